"""Core counting and the one-host split between learner and collectors."""

from __future__ import annotations

import subprocess
import sys

import pytest

from common.cores import SHARED_COLLECTOR_NICE, collector_mujoco_threads, split_cores, usable_cores


@pytest.mark.parametrize(("total", "collectors", "expected"), [(2, 1, (1, 2)), (16, 1, (8, 15)), (16, 3, (8, 4)),
                                                              (1, 1, (1, 1)), (4, 1, (2, 3))])
def test_cpu_learner_takes_half_and_collectors_share_every_core_at_a_lower_priority(total, collectors, expected):
    """On a CPU learner the collectors' threads cover all cores, the learner's too, and run niced below it."""
    split = split_cores(total, collectors)
    assert (split.learner_threads, split.collector_threads) == expected
    assert split.shared and split.collector_nice == SHARED_COLLECTOR_NICE > 0
    assert split.collector_threads == collector_mujoco_threads(max(1, total // collectors))


def test_a_learner_without_collectors_takes_every_core():
    """No local collectors (appo-learner): every core is the learner's, nothing is shared or niced."""
    split = split_cores(4, 0)
    assert split.learner_threads == 4 and not split.shared and split.collector_nice == 0


@pytest.mark.parametrize(("cores", "threads"), [(1, 1), (2, 2), (3, 2), (4, 3), (16, 15)])
def test_collector_leaves_its_main_thread_a_core_from_three_cores_on(cores, threads):
    """A collector's MuJoCo threads: every core up to 2 (the groups still overlap), one less from 3 on."""
    assert collector_mujoco_threads(cores) == threads


@pytest.mark.parametrize(("total", "expected"), [(2, (1, 2)), (4, (1, 3)), (8, (2, 7)), (16, (2, 15))])
def test_accelerator_learner_keeps_one_or_two_cores_and_collectors_share_them(total, expected):
    """A learner training on an accelerator keeps 1 torch thread (2 from 8 cores on); the collector's threads
    cover every core at the lower priority."""
    split = split_cores(total, 1, accelerator=True)
    assert (split.learner_threads, split.collector_threads) == expected
    assert split.shared and split.collector_nice == SHARED_COLLECTOR_NICE


def test_explicit_thread_counts_and_nice_are_kept():
    """training.learner_threads / collector_threads / collector_nice override the automatic split as given."""
    assert split_cores(16, 2, learner_threads=3).collector_threads == 7  # 8 shared cores each: 7 MuJoCo threads
    split = split_cores(16, 2, collector_threads=5, accelerator=True)
    assert (split.learner_threads, split.collector_threads) == (2, 5)
    split = split_cores(2, 1, learner_threads=2, collector_threads=1, collector_nice=0)
    assert (split.learner_threads, split.collector_threads, split.collector_nice) == (2, 1, 0)
    assert split_cores(2, 1, accelerator=True, collector_nice=5).collector_nice == 5


def test_a_split_that_fits_the_cores_is_not_shared_and_not_niced():
    """Thread counts set so learner and collectors fit the cores (the old static split): nothing shared, nice 0."""
    split = split_cores(16, 1, learner_threads=8, collector_threads=7)
    assert not split.shared and split.collector_nice == 0
    split = split_cores(2, 1, collector_threads=1)
    assert (split.learner_threads, split.shared, split.collector_nice) == (1, False, 0)


def test_usable_cores_respects_the_affinity_mask():
    """A process pinned to one core (taskset) counts one usable core."""
    code = "from common.cores import usable_cores; print(usable_cores())"
    out = subprocess.run(["taskset", "-c", "0", sys.executable, "-c", code], capture_output=True, text=True,
                         check=True)
    assert out.stdout.strip() == "1"
    assert usable_cores() >= 1


def test_lower_priority_reaches_threads_already_running_and_those_started_after():
    """lower_priority(3) lowers every running thread of the process, and threads started later inherit it."""
    code = """
import os, threading
from pathlib import Path
from common.cores import lower_priority
stop = threading.Event()
before = threading.Thread(target=stop.wait); before.start()
base = os.getpriority(os.PRIO_PROCESS, 0)
lower_priority(3)
after = threading.Thread(target=stop.wait); after.start()
tasks = list(Path("/proc/self/task").glob("*/stat"))  # listed before stop.set(), while both threads run
nices = {int(p.read_text().rsplit(")", 1)[1].split()[16]) for p in tasks}
stop.set()
print(base, len(tasks), sorted(nices))
"""
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    out = proc.stdout.split(maxsplit=2)
    base, threads, nices = int(out[0]), int(out[1]), out[2].strip()
    assert threads >= 3 and nices == str([min(19, base + 3)])
