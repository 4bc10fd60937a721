"""Checkpoints: atomic writes, damage detected with the file named, `latest` falls back,
a failed write keeps the old file."""

import os
import random
import subprocess

import pytest
import torch

from common.checkpoint_io import CheckpointError, latest_valid_checkpoint, load_checkpoint
from learner.checkpoint import prune_checkpoints, save_checkpoint


def _state(value: float, size: int = 1000) -> dict:
    return {"appo": {"model": {"w": torch.full((size,), value)}}, "iteration": int(value), "config": {}}


def test_round_trip_and_no_temp_files_left(tmp_path):
    """A saved checkpoint loads back equal, and the directory holds only the final file."""
    path = save_checkpoint(_state(3.0), tmp_path / "model_3.pt")
    state = load_checkpoint(path)
    assert torch.equal(state["appo"]["model"]["w"], torch.full((1000,), 3.0))
    assert [p.name for p in tmp_path.iterdir()] == ["model_3.pt"]


@pytest.mark.parametrize("seed", range(5))
def test_truncated_checkpoint_is_detected(tmp_path, seed):
    """Cut at a random point, the file is refused with its path in the message."""
    path = save_checkpoint(_state(1.0), tmp_path / "model_1.pt")
    data = path.read_bytes()
    cut = random.Random(seed).randrange(1, len(data) - 1)
    path.write_bytes(data[:cut])
    with pytest.raises(CheckpointError, match="model_1.pt"):
        load_checkpoint(path)


@pytest.mark.parametrize("seed", range(8))
def test_flipped_bytes_are_detected(tmp_path, seed):
    """A flipped byte anywhere (tensor data included) is refused, never loaded silently."""
    path = save_checkpoint(_state(2.0, size=20000), tmp_path / "model_2.pt")
    data = bytearray(path.read_bytes())
    rng = random.Random(seed)
    pos = rng.randrange(len(data))
    data[pos] ^= 1 << rng.randrange(8)
    path.write_bytes(bytes(data))
    with pytest.raises(CheckpointError, match="model_2.pt"):
        load_checkpoint(path)


def test_latest_skips_damaged_newest_for_previous_good(tmp_path):
    """With the newest checkpoint corrupt, `latest` picks the one before it."""
    save_checkpoint(_state(1.0), tmp_path / "model_1.pt")
    save_checkpoint(_state(2.0), tmp_path / "model_2.pt")
    newest = save_checkpoint(_state(3.0), tmp_path / "model_3.pt")
    newest.write_bytes(newest.read_bytes()[:100])
    path, state = latest_valid_checkpoint(tmp_path)
    assert path.name == "model_2.pt" and state["iteration"] == 2


def test_prune_keeps_newest_and_protected(tmp_path):
    """Only the newest K checkpoints (plus protected ones) remain."""
    for i in (1, 2, 3, 4, 5):
        save_checkpoint(_state(float(i), 10), tmp_path / f"model_{i}.pt")
    prune_checkpoints(tmp_path, keep=2, protect={1})
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model_1.pt", "model_4.pt", "model_5.pt"]


@pytest.fixture
def tiny_disk(tmp_path):
    """A 512 KiB tmpfs: a real full disk (skipped only where mounting is not permitted)."""
    mnt = tmp_path / "disk"
    mnt.mkdir()
    proc = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=512k", "tmpfs", str(mnt)],
                          capture_output=True, text=True)
    if proc.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {proc.stderr.strip()}")
    yield mnt
    subprocess.run(["umount", str(mnt)], check=True)


def test_write_failing_on_full_disk_keeps_previous_checkpoint(tiny_disk):
    """ENOSPC midway through a save: the error surfaces, the previous checkpoint is intact, no temp file remains."""
    good = save_checkpoint(_state(1.0, size=10_000), tiny_disk / "model_1.pt")  # 40 KB
    before = good.read_bytes()
    with pytest.raises(OSError) as exc:
        save_checkpoint(_state(2.0, size=200_000), tiny_disk / "model_1.pt")  # 800 KB: does not fit
    assert exc.value.errno == 28 and "model_1.pt" in str(exc.value) and "No space left" in str(exc.value)
    assert good.read_bytes() == before
    assert load_checkpoint(good)["iteration"] == 1
    assert os.listdir(tiny_disk) == ["model_1.pt"]
