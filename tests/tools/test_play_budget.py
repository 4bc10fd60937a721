"""appo-play's CPU budget: it reads the host's idle cores and, while they are busy, holds the viewer to its share."""

from __future__ import annotations

import subprocess
import threading
import time
from pathlib import Path

import pytest

from tools.play import budget as budget_mod
from tools.play.budget import CpuBudget, idle_ticks

STAT = """cpu  700 0 300 1000 0 0 0 0 0 0
cpu0 100 0 100 700 100 0 0 0 0 0
cpu1 600 0 200 200 0 0 0 0 5 0
intr 12345 0 0
ctxt 999
"""


class Clocks:
    """Wall and CPU clocks the test moves by hand."""

    def __init__(self):
        self.wall = self.cpu = 0.0

    def tick(self, wall: float, cpu: float) -> None:
        self.wall += wall
        self.cpu += cpu


def test_idle_ticks_sum_the_chosen_cpus_and_count_iowait_as_idle():
    """Per-CPU lines only (not the total line), idle + iowait over the first eight fields, filtered by CPU."""
    assert idle_ticks(STAT, None) == (800 + 200, 1000 + 1000)
    assert idle_ticks(STAT, {0}) == (800, 1000)
    assert idle_ticks(STAT, {1}) == (200, 1000)


def write_stat(path: Path, idle: list[int], total: list[int]) -> None:
    path.write_text("cpu  0 0 0 0 0 0 0 0\n" + "".join(
        f"cpu{i} {t - d} 0 0 {d} 0 0 0 0\n" for i, (d, t) in enumerate(zip(idle, total, strict=True))))


def test_owed_spreads_the_cpu_used_at_the_budget_only_while_busy(tmp_path, monkeypatch):
    """Busy: rest = CPU used / budget - wall elapsed, debt carried past the cap, no credit kept; idle host: no rest."""
    stat = tmp_path / "stat"
    write_stat(stat, [0, 0], [0, 0])
    c = Clocks()
    b = CpuBudget(budget=0.02, stat_path=str(stat), clock=lambda: c.wall, cpu_clock=lambda: c.cpu)
    b.cpus = {0, 1}
    # Half a second later both CPUs were fully used by others: busy.
    write_stat(stat, [0, 0], [50, 50])
    c.tick(wall=budget_mod.SAMPLE_S, cpu=0.0)
    assert b.owed() == 0.0 and b.busy and b.idle_cores == 0.0
    c.tick(wall=0.001, cpu=0.002)  # a 2 ms step owes 0.1 s of rest less the 1 ms it took
    assert b.owed() == pytest.approx(0.099)
    c.tick(wall=0.099, cpu=0.0)  # it rested that
    assert b.owed() == pytest.approx(0.0)
    c.tick(wall=0.01, cpu=0.05)  # 2.5 s owed: capped per rest, the rest carried over
    assert b.owed() == pytest.approx(budget_mod.MAX_REST_S)
    c.tick(wall=budget_mod.MAX_REST_S, cpu=0.0)
    assert b.owed() == pytest.approx(min(2.49 - budget_mod.MAX_REST_S, budget_mod.MAX_REST_S))
    # The cores go idle (1.5 of 2 idle): no rest, and the debt is forgiven.
    write_stat(stat, [40, 35], [100, 100])
    c.tick(wall=budget_mod.SAMPLE_S, cpu=0.0)
    assert b.owed() == 0.0 and not b.busy and b.idle_cores == pytest.approx(1.5)
    c.tick(wall=0.001, cpu=0.5)
    assert b.owed() == 0.0


def test_a_host_without_proc_stat_is_never_held_back(tmp_path):
    """No way to see the load (not Linux): the budget never rests, rather than guessing."""
    c = Clocks()
    b = CpuBudget(stat_path=str(tmp_path / "missing"), clock=lambda: c.wall, cpu_clock=lambda: c.cpu)
    c.tick(wall=1.0, cpu=0.9)
    assert b.owed() == 0.0 and not b.busy


def test_a_bad_budget_is_refused():
    """A budget outside (0, 1] of a core is an error naming it."""
    with pytest.raises(ValueError, match="budget must be in"):
        CpuBudget(budget=0.0)


def wait_until(predicate, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(0.1)


def test_busy_loops_on_every_core_are_seen_and_a_hungry_loop_is_held_to_its_share():
    """Real /proc/stat: one busy process per core makes the host busy; a loop that wants a whole core then takes
    about the budget of the process's CPU time; when they stop, the host is idle again."""
    b = CpuBudget(budget=0.05)
    hogs = [subprocess.Popen(["sh", "-c", "while :; do :; done"]) for _ in range(len(b.cpus or [0]))]
    try:
        wait_until(lambda: (b.owed(), b.busy)[1], 10.0, "the host to count as busy")
        stop = threading.Event()
        t0, c0 = time.monotonic(), time.process_time()
        while time.monotonic() - t0 < 3.0:
            sum(i * i for i in range(20000))  # about a millisecond of pure Python
            b.rest(stop)
        share = (time.process_time() - c0) / (time.monotonic() - t0)
        assert b.busy
        assert share < 2 * b.budget, f"the loop took {share:.3f} of a core, budget {b.budget}"
    finally:
        for h in hogs:
            h.kill()
            h.wait()
    wait_until(lambda: (b.owed(), not b.busy)[1], 10.0, "the host to count as idle after the hogs stopped")
