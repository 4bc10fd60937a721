"""`--resume PATH|latest`: which checkpoint, and whether this run may continue it.

The resumed run starts from the checkpoint's own config; values given now (CLI,
env, YAML) apply on top where they are safe (max_iterations, save_interval, num_envs,
learning rate, ...), and a change of task or network shape is refused.
"""

from __future__ import annotations

from pathlib import Path

from common.checkpoint_io import CheckpointError, latest_valid_checkpoint, load_checkpoint, renamed_note, runs_of
from common.config import AppoConfig
from common.logging import get_logger

log = get_logger("resume")

# Keys whose change would make the saved weights meaningless or unloadable.
FIXED_KEYS = ("task", "algo.policy", "algo.empirical_normalization")


class ResumeError(ValueError):
    """The checkpoint cannot continue as this run: its task or network shape differs."""


def find_resume_checkpoint(spec: str, task: str, log_dir: str, run_dir: str | None) -> tuple[Path, dict] | None:
    """The checkpoint `spec` means: a file, a run directory, or `latest`.

    `latest` looks in `run_dir` when given, else in the newest run of <log_dir>/<task>;
    it returns None when there is nothing to resume (a first start), skipping damaged
    files for the newest good one.
    """
    if spec != "latest":
        path = Path(spec)
        if path.is_file():
            return path, load_checkpoint(path)
        if path.is_dir():
            found = latest_valid_checkpoint(path, log)
            if found is None:
                raise CheckpointError(f"run directory {path} holds no usable checkpoint")
            return found
        raise CheckpointError(f"--resume {spec}: no such checkpoint file or run directory")
    candidates = [Path(run_dir)] if run_dir else list(reversed(runs_of(Path(log_dir) / task))) \
        if (Path(log_dir) / task).is_dir() else []
    for directory in candidates:
        if directory.is_dir():
            found = latest_valid_checkpoint(directory, log)
            if found is not None:
                return found
    return None


def _get(d: dict, dotted: str):
    for part in dotted.split("."):
        d = d.get(part, {}) if isinstance(d, dict) else {}
    return d


def check_task(saved: dict, task: str) -> None:
    """A checkpoint continues only as its own task; the refusal names that task (and its old name if renamed)."""
    if saved.get("task") != task:
        raise ResumeError(f"cannot resume: the checkpoint's task is {saved.get('task')!r}, not {task!r}"
                          f"{renamed_note(saved.get('task'), task)}; a resumed run must keep the task")


def check_compatible(saved: dict, cfg: AppoConfig) -> None:
    now = cfg.to_dict()
    check_task(saved, cfg.task)
    for key in FIXED_KEYS:
        if _get(saved, key) != _get(now, key):
            raise ResumeError(
                f"cannot resume: {key} was {_get(saved, key)!r} in the checkpoint and is {_get(now, key)!r} now; "
                "a resumed run must keep the task and network shape"
            )


def learning_rate_override(saved: dict, cfg: AppoConfig) -> float | None:
    """A learning rate given now, different from the run's configured one, replaces the adapted rate."""
    before = _get(saved, "algo.algorithm.learning_rate")
    now = cfg.algo.algorithm.learning_rate
    return now if before != now else None
