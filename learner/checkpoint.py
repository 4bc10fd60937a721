"""Checkpoints: written atomically (temp file, fsync, rename, fsync dir) with a SHA-256 of their
contents; loading and verification live in common.checkpoint_io."""

from __future__ import annotations

import io
import os
import tempfile
from pathlib import Path

import torch

from common.checkpoint_io import DIGEST_KEY, checkpoints_in, state_digest


def save_checkpoint(state: dict, path: str | Path) -> Path:
    """Write `state` (plus its digest) to `path`; a failure leaves any previous file untouched."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    state = {**state, DIGEST_KEY: state_digest(state)}
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        # Serialised in memory first: a full disk then fails in write() with a plain ENOSPC
        # instead of deep inside torch's zip writer.
        payload = io.BytesIO()
        torch.save(state, payload)
        with os.fdopen(fd, "wb") as f:
            f.write(payload.getbuffer())
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except OSError as exc:
        Path(tmp).unlink(missing_ok=True)
        raise OSError(exc.errno, f"writing checkpoint {path} failed (previous checkpoints are intact): "
                                 f"{exc.strerror or exc}") from exc
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    dir_fd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)
    return path


def prune_checkpoints(run_dir: Path, keep: int, protect: set[int] = frozenset()) -> list[Path]:
    """Delete all but the newest `keep` model_<i>.pt (never those in `protect`); returns what went."""
    found = checkpoints_in(run_dir)
    newest = sorted(found, reverse=True)[:keep]
    removed = []
    for it, path in found.items():
        if it not in newest and it not in protect:
            path.unlink(missing_ok=True)
            removed.append(path)
    return removed
