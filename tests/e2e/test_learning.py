"""Learning: the real appo-train solves inverted_pendulum on two cores within the time budget."""

import subprocess
import time

from e2e_helpers import exe, read_summary


def test_inverted_pendulum_reaches_900(tmp_path, shm_root):
    """With its preset, inverted_pendulum reaches a mean episode return >= 900 in under 3 minutes."""
    run = tmp_path / "run"
    start = time.monotonic()
    proc = subprocess.run(
        [exe("appo-train"), "--task", "inverted_pendulum", "--log-dir", str(run), "training.console=false",
         f"transport.shm_root={shm_root}"],
        capture_output=True, text=True, timeout=240,
    )
    wall = time.monotonic() - start
    assert proc.returncode == 0, proc.stderr[-3000:]
    summary = read_summary(run)
    assert summary["best_mean_reward"] >= 900, summary
    assert wall < 180, f"took {wall:.0f}s"
