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
        collector_threads = max(1, (total - learner_threads) // max(1, num_collectors))
    return learner_threads, collector_threads
