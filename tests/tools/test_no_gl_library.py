"""A host without EGL, reproduced for real: the commands run in a mount namespace where every libEGL file reads
as empty (bind-mounted /dev/null), so `import mujoco` with MUJOCO_GL=egl fails as on a bare GPU node.
Evaluation, a time-to-criterion run and a clip check still work, with MUJOCO_GL=egl set and unset; a --video
fails in one line naming the library and what to do, after the figures and the JSON are written."""

from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from test_motion_cli import arc_clip

from collector.envs.g1.motion import write_clip

BIN = Path(sys.executable).parent
ROOT = Path(__file__).resolve().parents[2]


def _egl_files() -> list[str]:
    """Every libEGL file the dynamic loader knows of (symlink targets included)."""
    listing = subprocess.run(["ldconfig", "-p"], capture_output=True, text=True).stdout
    names = {line.split("=>")[-1].strip() for line in listing.splitlines() if "libEGL" in line}
    return sorted({os.path.realpath(n) for n in names if os.path.exists(n)})


EGL_FILES = _egl_files()


def without_egl(cmd: list[str], gl: str | None, timeout: float = 300) -> subprocess.CompletedProcess:
    """Run `cmd` from the repository root where no libEGL can be loaded, with MUJOCO_GL=gl (None: unset)."""
    env = {k: v for k, v in os.environ.items() if k != "MUJOCO_GL"}
    if gl is not None:
        env["MUJOCO_GL"] = gl
    if EGL_FILES:  # hide them; where the machine has none, the missing library is already real
        if os.geteuid() != 0 or not shutil.which("unshare"):
            pytest.skip("hiding libEGL needs root and unshare (a private mount namespace)")
        mounts = " && ".join(f"mount --bind /dev/null {shlex.quote(f)}" for f in EGL_FILES)
        cmd = ["unshare", "-m", "sh", "-c", f"{mounts} && exec {shlex.join(cmd)}"]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env, cwd=ROOT)


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory) -> Path:
    """A tiny real inverted_pendulum run (appo-train), trained with EGL hidden and MUJOCO_GL=egl set."""
    root = tmp_path_factory.mktemp("noegl")
    proc = without_egl([str(BIN / "appo-train"), "--task", "inverted_pendulum", "algo.max_iterations=2",
                        "algo.num_envs=8", "algo.steps_per_env=8", "algo.save_interval=1", "training.console=false",
                        f"training.log_dir={root / 'logs'}", f"transport.shm_root={root / 'shm'}"], gl="egl")
    assert proc.returncode == 0, proc.stderr[-3000:]
    (run,) = (root / "logs" / "inverted_pendulum").iterdir()
    return run


def test_the_missing_library_is_real_and_only_rendering_needs_it():
    """Where libEGL is hidden, MuJoCo's own import with MUJOCO_GL=egl fails (the reported AttributeError), while
    the collector's tasks import and step."""
    bare = without_egl([sys.executable, "-c", "import mujoco"], gl="egl")
    assert bare.returncode != 0 and "eglQueryString" in bare.stderr
    ours = without_egl([sys.executable, "-c", "from collector.envs import make_env; "
                        "e = make_env('hopper', 2, 1, 0); e.reset(); print(e.step(e.reset()[0][:, :3] * 0).rewards)"],
                       gl="egl")
    assert ours.returncode == 0, ours.stderr[-2000:]


@pytest.mark.parametrize("gl", ["egl", None])
def test_eval_without_video_runs(run_dir, gl, tmp_path):
    """appo-eval without --video prints and writes its figures with no GL library, MUJOCO_GL=egl set or unset."""
    proc = without_egl([str(BIN / "appo-eval"), "--load-run", str(run_dir), "--episodes", "2", "--threads", "1",
                        "--max-episode-steps", "20", "--json", str(tmp_path / "e.json")], gl=gl)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "episodes 2" in proc.stdout
    assert json.loads((tmp_path / "e.json").read_text())["episodes"] == 2


@pytest.mark.parametrize("gl", ["egl", None])
def test_eval_video_fails_in_one_line_after_the_figures(run_dir, gl, tmp_path):
    """--video without a GL library: exit 2 and one stderr line naming libEGL.so.1 and the ways out, while the
    figures are printed, the JSON and the plot written, and no MP4 is left behind."""
    video, plot, out = tmp_path / "v.mp4", tmp_path / "v.png", tmp_path / "e.json"
    proc = without_egl([str(BIN / "appo-eval"), "--load-run", str(run_dir), "--episodes", "2", "--threads", "1",
                        "--max-episode-steps", "20", "--video", str(video), "--json", str(out)], gl=gl)
    assert proc.returncode == 2
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1, proc.stderr
    assert "libEGL.so.1" in lines[0] and "install" in lines[0] and "MUJOCO_GL=osmesa" in lines[0]
    assert "episodes 2" in proc.stdout
    figures = json.loads(out.read_text())
    assert figures["episodes"] == 2 and "libEGL.so.1" in figures["video_error"]
    assert plot.is_file() and not video.exists()


def test_time_to_criterion_trains_and_evaluates(tmp_path):
    """A short time-to-criterion run (training processes and in-process evaluation) with MUJOCO_GL=egl set."""
    out = tmp_path / "ttc.json"
    proc = without_egl([sys.executable, "-m", "benchmarks.time_to_criterion", "--task", "inverted_pendulum",
                        "--seeds", "3", "--minutes", "0.1", "--save-every", "10", "--episodes", "2",
                        "--return-at-least", "1", "--log-dir", str(tmp_path / "runs"), "--json", str(out),
                        "algo.num_envs=16", "algo.steps_per_env=16"], gl="egl")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert json.loads(out.read_text())["summary"]["return"]["met_by"] == 1


@pytest.mark.parametrize("gl", ["egl", None])
def test_motion_check_runs(gl, tmp_path):
    """appo-motion check, which draws nothing, checks a clip with no GL library."""
    clip = tmp_path / "arc.npz"
    write_clip(clip, arc_clip(20))
    proc = without_egl([str(BIN / "appo-motion"), "check", str(clip)], gl=gl)
    assert proc.returncode == 0, proc.stderr[-3000:]
