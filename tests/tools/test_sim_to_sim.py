"""appo-eval --sim: a policy trained on one physics engine evaluated on the other, with the same figures."""

from __future__ import annotations

import json
import subprocess

from checkpoint_helpers import write_checkpoint
from e2e_helpers import exe


def _eval(path, out, *extra) -> subprocess.CompletedProcess:
    return subprocess.run([exe("appo-eval"), "--load-run", str(path), "--episodes", "2", "--max-episode-steps", "40",
                           "--threads", "1", "--json", str(out), *extra], capture_output=True, text=True, timeout=180)


def test_a_mujoco_policy_evaluates_on_motrix_with_the_same_figures(tmp_path):
    """--sim motrix on a MuJoCo checkpoint: exit 0, both engines named, the same figure keys as on MuJoCo."""
    path = tmp_path / "model_5.pt"
    write_checkpoint(path, "go2_joystick_flat")
    home = _eval(path, tmp_path / "mujoco.json")
    assert home.returncode == 0, home.stderr[-2000:]
    assert "physics mujoco (trained on mujoco)" in home.stdout
    away = _eval(path, tmp_path / "motrix.json", "--sim", "motrix")
    assert away.returncode == 0, away.stderr[-2000:]
    assert "physics motrix (trained on mujoco)" in away.stdout
    mujoco, motrix = (json.loads((tmp_path / f"{s}.json").read_text()) for s in ("mujoco", "motrix"))
    assert (mujoco["sim"], motrix["sim"], motrix["trained_on"]) == ("mujoco", "motrix", "mujoco")
    assert set(motrix) == set(mujoco) and "velocity_xy_rms_error" in motrix
    assert len(motrix["lengths"]) == 2


def test_an_engine_the_task_lacks_is_refused_in_one_line(tmp_path):
    """A Gymnasium task's checkpoint with --sim motrix exits 2 naming the engine it runs on."""
    path = tmp_path / "model_5.pt"
    write_checkpoint(path, "hopper")
    proc = _eval(path, tmp_path / "x.json", "--sim", "motrix")
    assert proc.returncode == 2 and "task hopper runs on mujoco, not 'motrix'" in proc.stderr
    assert not (tmp_path / "x.json").exists()
