"""How many cores this process may use, and how one host's cores are split between roles."""

from __future__ import annotations

import contextlib
import os
from dataclasses import dataclass
from pathlib import Path


def usable_cores() -> int:
    """Cores allowed by the affinity mask (taskset) and the cgroup CPU quota (containers)."""
    cores = len(os.sched_getaffinity(0))
    try:
        quota, period = Path("/sys/fs/cgroup/cpu.max").read_text().split()
        if quota != "max":
            cores = min(cores, max(1, int(int(quota) // int(period))))
    except (OSError, ValueError):
        pass
    return max(1, cores)


SHARED_COLLECTOR_NICE = 10  # the learner's weight is ~9x a collector thread's: it gets its cores back at once


@dataclass(frozen=True)
class CoreSplit:
    """How one host's cores go to the learner's torch threads and each collector's MuJoCo threads."""

    learner_threads: int
    collector_threads: int
    # True when the collectors' threads may run on the learner's cores: they run at a lower
    # priority (collector_nice), so the cores go to the physics while the learner waits and
    # back to the learner the moment it has work.
    shared: bool = False
    collector_nice: int = 0


def split_cores(total: int, num_collectors: int, learner_threads: int = 0, collector_threads: int = 0,
                accelerator: bool = False, collector_nice: int = -1) -> CoreSplit:
    """The split of `total` cores between a learner and `num_collectors` collectors on one host.

    Zero thread counts and collector_nice -1 mean automatic.  The learner's torch threads: half
    the cores (at least one) on a CPU; on an accelerator, which it only feeds, one (two from 8
    cores on).  The collectors' MuJoCo threads cover every core, the learner's too, per
    `collector_mujoco_threads` of their share.  A static split left the learner's cores idle while
    it waited for rollouts and the collectors' idle while they waited for room; shared, with the
    collectors at nice SHARED_COLLECTOR_NICE, the scheduler gives the cores to whichever side has
    work, the learner first.  Explicit values are kept as given; explicit thread counts that fit
    the cores make a split that is not `shared`, whose collectors run at nice 0 unless told otherwise.
    """
    if not learner_threads:
        if not num_collectors:
            learner_threads = total
        elif accelerator:
            learner_threads = 2 if total >= 8 else 1
        else:
            learner_threads = max(1, total // 2)
    if collector_threads:
        shared = bool(num_collectors) and learner_threads + num_collectors * collector_threads > total
    else:
        collector_threads = collector_mujoco_threads(max(1, total // max(1, num_collectors)))
        shared = bool(num_collectors)
    if collector_nice < 0:
        collector_nice = SHARED_COLLECTOR_NICE if shared else 0
    return CoreSplit(learner_threads, collector_threads, shared, collector_nice)


def collector_mujoco_threads(cores: int) -> int:
    """MuJoCo threads for a collector that may use `cores`: all of them up to 2, then one less.

    The collector's main thread runs the policy while the other env group's physics
    runs (collector/rollout.py).  A batch step waits for its slowest thread, so a
    MuJoCo thread that the main thread pushes off its core stalls the whole step;
    one core less keeps the collector's busy threads within its cores, and on a
    16-core host it measured no worse than using every core (BENCHMARKS.md, section
    "Collector against the physics ceiling, 2 and 16 cores").  With 2 cores both
    stay physics threads: one thread would leave no physics to overlap the inference
    with, and the collector would fall far below the physics ceiling.
    """
    return cores - 1 if cores >= 3 else max(1, cores)


def lower_priority(increment: int) -> None:
    """Add `increment` to the niceness of every thread of this process (Linux keeps one per thread).

    Threads started later inherit it from the thread that starts them; threads already running
    (a BLAS pool started when NumPy was imported) are lowered one by one.
    """
    if increment <= 0:
        return
    tasks = Path("/proc/self/task")
    if not tasks.is_dir():
        os.nice(increment)  # no per-thread view: the calling thread, inherited by what it starts
        return
    for task in tasks.iterdir():
        tid = int(task.name)
        with contextlib.suppress(ProcessLookupError):  # the thread ended meanwhile
            os.setpriority(os.PRIO_PROCESS, tid, min(19, os.getpriority(os.PRIO_PROCESS, tid) + increment))

