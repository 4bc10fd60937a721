"""Checkpoints: written atomically (temp file, fsync, rename, fsync dir), loaded weights-only."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import torch


class CheckpointError(RuntimeError):
    pass


def save_checkpoint(state: dict, path: str | Path) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            torch.save(state, f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    dir_fd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)
    return path


def load_checkpoint(path: str | Path, map_location: str | torch.device = "cpu") -> dict:
    path = Path(path)
    if not path.is_file():
        raise CheckpointError(f"checkpoint {path} does not exist")
    try:
        state = torch.load(path, map_location=map_location, weights_only=True)
    except Exception as exc:  # torch raises several types for torn or foreign files
        raise CheckpointError(f"checkpoint {path} is unreadable or corrupt: {exc}") from None
    if not isinstance(state, dict) or "appo" not in state:
        raise CheckpointError(f"checkpoint {path} is not an APPO checkpoint")
    return state
