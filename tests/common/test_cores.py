"""Core counting and the one-host split between learner and collectors."""

from __future__ import annotations

import subprocess
import sys

import pytest

from common.cores import collector_mujoco_threads, split_cores, usable_cores


@pytest.mark.parametrize(("total", "collectors", "expected"), [(2, 1, (1, 1)), (16, 1, (8, 7)), (16, 3, (8, 2)),
                                                              (1, 1, (1, 1)), (4, 0, (4, 1)), (4, 1, (2, 2))])
def test_cpu_learner_takes_half_and_collectors_share_the_rest(total, collectors, expected):
    """On a CPU learner the automatic split gives the learner half the cores and never oversubscribes."""
    learner, per_collector = split_cores(total, collectors)
    assert (learner, per_collector) == expected
    if total >= 2 and collectors:
        assert learner + collectors * per_collector <= total


@pytest.mark.parametrize(("cores", "threads"), [(1, 1), (2, 2), (3, 2), (4, 3), (16, 15)])
def test_collector_leaves_its_main_thread_a_core_from_three_cores_on(cores, threads):
    """A collector's MuJoCo threads: every core up to 2 (the groups still overlap), one less from 3 on."""
    assert collector_mujoco_threads(cores) == threads


@pytest.mark.parametrize(("total", "expected"), [(2, (1, 1)), (4, (1, 2)), (8, (2, 5)), (16, (2, 13))])
def test_accelerator_learner_keeps_one_or_two_cores(total, expected):
    """A learner training on an accelerator keeps 1 core (2 from 8 on); the collector gets the rest."""
    assert split_cores(total, 1, accelerator=True) == expected


def test_explicit_thread_counts_are_kept():
    """training.learner_threads / collector_threads override the automatic split as given."""
    assert split_cores(16, 2, learner_threads=3) == (3, 5)  # 6 cores each: 5 MuJoCo threads + the main thread
    assert split_cores(16, 2, collector_threads=5, accelerator=True) == (2, 5)
    assert split_cores(2, 1, learner_threads=2, collector_threads=2) == (2, 2)


def test_usable_cores_respects_the_affinity_mask():
    """A process pinned to one core (taskset) counts one usable core."""
    code = "from common.cores import usable_cores; print(usable_cores())"
    out = subprocess.run(["taskset", "-c", "0", sys.executable, "-c", code], capture_output=True, text=True,
                         check=True)
    assert out.stdout.strip() == "1"
    assert usable_cores() >= 1
