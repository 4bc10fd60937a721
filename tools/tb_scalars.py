"""A finished run's TensorBoard scalars, for the benchmark and plotting tools."""

from __future__ import annotations

from pathlib import Path


def read_scalars(run: Path) -> dict[str, list[tuple[float, int, float]]]:
    """Every scalar tag of the event files in `run` as (wall_time, step, value), in logged order."""
    # Imported on use: tensorboard is slow to import and the tools' --help should not wait for it.
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(str(run), size_guidance={"scalars": 0})
    acc.Reload()
    return {tag: [(e.wall_time, e.step, e.value) for e in acc.Scalars(tag)] for tag in acc.Tags()["scalars"]}
