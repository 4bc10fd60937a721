"""How much CPU the viewer's loop may take: everything while the host has idle cores, a sliver while it has none.

SCHED_IDLE would give the same courtesy to a run on this host, but Python threads share one lock (the GIL): an
idle-priority loop preempted while holding it stalls the websocket and follower threads for seconds. So every
thread stays at normal priority and the loop itself rests, measured against the whole process's CPU time.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable

from common.logging import get_logger

log = get_logger("play")

BUDGET = 0.02  # share of one core the viewer keeps to while the cores are busy: a 2-core run loses about 1%
BUSY_BELOW = 0.2  # idle cores (over the CPUs this process may use) under which the host counts as busy
SAMPLE_S = 0.5  # how often /proc/stat is read
MAX_REST_S = 0.5  # the longest single rest, so pause and reset still answer while the host is busy


def idle_ticks(stat_text: str, cpus: set[int] | None) -> tuple[int, int]:
    """(idle + iowait, total) clock ticks summed over the per-CPU lines of /proc/stat for `cpus` (None: all)."""
    idle = total = 0
    for line in stat_text.splitlines():
        name, _, rest = line.partition(" ")
        if not name.startswith("cpu") or name == "cpu":
            continue
        if cpus is not None and int(name[3:]) not in cpus:
            continue
        ticks = [int(v) for v in rest.split()[:8]]  # user nice system idle iowait irq softirq steal (guest is in user)
        idle += ticks[3] + ticks[4]
        total += sum(ticks)
    return idle, total


class CpuBudget:
    """Rests a loop so the process uses at most `budget` of one core whenever the host's cores are busy."""

    def __init__(self, budget: float = BUDGET, stat_path: str = "/proc/stat",
                 clock: Callable[[], float] = time.monotonic, cpu_clock: Callable[[], float] = time.process_time):
        if not 0.0 < budget <= 1.0:
            raise ValueError(f"budget must be in (0, 1] of one core, got {budget}")
        self.budget = budget
        self.stat_path = stat_path
        self.clock, self.cpu_clock = clock, cpu_clock
        self.cpus = set(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None
        self.busy = False
        self.idle_cores: float | None = None
        self._warned = False
        self._ticks = self._read()
        self._sampled = self._wall = clock()
        self._cpu = cpu_clock()
        self._debt = 0.0

    def _read(self) -> tuple[int, int] | None:
        try:
            with open(self.stat_path) as f:
                return idle_ticks(f.read(), self.cpus)
        except OSError as exc:  # not Linux: no way to see the host's load, so never hold back
            if not self._warned:
                self._warned = True
                log.warning("cannot read the host's CPU load; the viewer will not yield to other work",
                            path=self.stat_path, error=str(exc))
            return None

    def sample(self) -> None:
        """Whether the host is busy now, from its idle ticks since the last sample."""
        ticks = self._read()
        if ticks is None or self._ticks is None:
            self._ticks = ticks
            self.busy = False
            return
        d_idle, d_total = ticks[0] - self._ticks[0], ticks[1] - self._ticks[1]
        if d_total <= 0:  # under one clock tick since the last read: keep the last verdict
            return
        self._ticks = ticks
        n = len(self.cpus) if self.cpus else 1
        self.idle_cores = n * d_idle / d_total
        self.busy = self.idle_cores < BUSY_BELOW

    def owed(self) -> float:
        """Seconds to rest now: the CPU used since the last call, spread at `budget`, less the wall time it took."""
        now, cpu = self.clock(), self.cpu_clock()
        if now - self._sampled >= SAMPLE_S:
            self.sample()
            self._sampled = now
        used, wall = cpu - self._cpu, now - self._wall
        self._wall, self._cpu = now, cpu
        # Debt carries across calls (one step can owe more than MAX_REST_S); credit does not, so no bursts.
        self._debt = max(0.0, self._debt + used / self.budget - wall) if self.busy else 0.0
        return min(self._debt, MAX_REST_S)

    def rest(self, stop: threading.Event) -> None:
        """Rest what is owed (at most until `stop`)."""
        owed = self.owed()
        if owed > 0.0:
            stop.wait(owed)
