"""A run's TensorBoard scalars, and when its first iteration was logged, for the benchmark and plotting tools."""

from __future__ import annotations

import subprocess
import time
from pathlib import Path


def wait_first_iteration(proc: subprocess.Popen, run: Path, timeout: float = 300) -> float:
    """The monotonic time at which `run` got its events file, which the learner opens at its first iteration."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"the learner exited {proc.returncode} before its first iteration")
        if run.is_dir() and any(run.glob("events.out.tfevents*")):
            return time.monotonic()
        time.sleep(0.2)
    raise RuntimeError(f"no iteration of {run} within {timeout:.0f} s")


def read_scalars(run: Path) -> dict[str, list[tuple[float, int, float]]]:
    """Every scalar tag of the event files in `run` as (wall_time, step, value), in logged order."""
    # Imported on use: tensorboard is slow to import and the tools' --help should not wait for it.
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(str(run), size_guidance={"scalars": 0})
    acc.Reload()
    return {tag: [(e.wall_time, e.step, e.value) for e in acc.Scalars(tag)] for tag in acc.Tags()["scalars"]}
