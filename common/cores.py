"""How many cores this process may use, and how one host's cores are split between roles."""

from __future__ import annotations

import os
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


def split_cores(total: int, num_collectors: int, learner_threads: int = 0, collector_threads: int = 0,
                accelerator: bool = False) -> tuple[int, int]:
    """(learner torch threads, MuJoCo threads per collector) that do not oversubscribe `total`.

    Zero means automatic: the learner takes half (at least one core), the collectors
    share the rest.  A learner training on an accelerator (`accelerator`) only feeds
    it, so it keeps one core (two from 8 cores on) and the collectors get the rest.
    Each collector's share becomes MuJoCo threads per `collector_mujoco_threads`.
    Explicit values are kept as given.
    """
    if not learner_threads:
        if not num_collectors:
            learner_threads = total
        elif accelerator:
            learner_threads = 2 if total >= 8 else 1
        else:
            learner_threads = max(1, total // 2)
    if not collector_threads:
        collector_threads = collector_mujoco_threads(max(1, (total - learner_threads) // max(1, num_collectors)))
    return learner_threads, collector_threads


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
