"""Fixtures shared by every test package: a private shared-memory root, and the network-namespace lab; no play
after training."""

import os
import subprocess
import time
from pathlib import Path

import pytest
from netlab import netlab  # noqa: F401  (re-exported: a fixture is found by its name in a conftest)

# The suite runs many short appo-train runs to completion: none renders its final policy (minutes on a CPU)
# unless its command line says training.no_play=false, which beats this variable. Inherited by every child.
os.environ["APPO_TRAINING__NO_PLAY"] = "true"


@pytest.fixture
def shm_root(tmp_path):
    """A private shared-memory root per test (tmpfs when /dev/shm is there), checked empty afterwards."""
    base = Path("/dev/shm") if Path("/dev/shm").is_dir() else tmp_path
    # Not named appo-*: a learner sweeping /dev/shm must not mistake the test root for a run directory.
    root = base / f"appotest-{os.getpid()}-{time.monotonic_ns()}"
    root.mkdir()
    yield root
    leftovers = list(root.iterdir())
    for p in leftovers:
        subprocess.run(["rm", "-rf", str(p)])
    root.rmdir()
    assert leftovers == [], f"shared memory left behind: {leftovers}"
