"""appo-train's play of the final policy (training.no_play, play_env_num, play_steps): real runs end to end, and
the child process's failures, timeout and stop as warnings that never fail the run."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
from pathlib import Path

import imageio.v2 as imageio
import numpy as np
import pytest
from e2e_helpers import exe, read_summary, wait_for
from structlog.testing import capture_logs
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from common import gl
from common.checkpoint_io import load_policy
from common.config import load_config
from learner import play_after
from tools.play_video import grid_shape

TINY = ["algo.num_envs=8", "algo.steps_per_env=8", "algo.max_iterations=2", "algo.save_interval=1",
        "algo.policy.actor_hidden_dims=[32,32]", "algo.policy.critic_hidden_dims=[32,32]", "training.console=false"]
PLAY = ["training.no_play=false", "training.play_env_num=2", "training.play_steps=10"]


def train(run: Path, shm_root: Path, task: str, *overrides: str, **env: str | None) -> subprocess.CompletedProcess:
    """A tiny appo-train run to its end, JSON log lines on stderr; `env` added to ours (a None value removed)."""
    environ = {k: v for k, v in {**os.environ, "APPO_LOG_FORMAT": "json", **env}.items() if v is not None}
    cmd = [exe("appo-train"), "--task", task, "--log-dir", str(run), f"transport.shm_root={shm_root}", *TINY,
           *overrides]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=300, env=environ)


def events(stderr: str, name: str) -> list[dict]:
    """The JSON log records of one event."""
    records = [json.loads(line) for line in stderr.splitlines() if line.startswith("{")]
    return [r for r in records if r.get("event") == name]


def image_tags(run: Path) -> dict[str, list]:
    acc = EventAccumulator(str(run), size_guidance={"images": 0})
    acc.Reload()
    return {tag: acc.Images(tag) for tag in acc.Tags()["images"]}


def assert_not_played(run: Path) -> None:
    assert not (run / "play.mp4").exists() and not (run / "partial.play.mp4").exists()
    assert not (run / "play.png").exists()
    assert not any(tag.startswith("Play/") for tag in image_tags(run))


def test_finished_run_renders_video_plot_and_tensorboard_images(tmp_path, shm_root):
    """A go2_joystick_flat run that reaches max_iterations writes play.mp4 (a tile per env, play_steps frames, not
    blank), play.png and both to its TensorBoard events, and says where."""
    run = tmp_path / "run"
    proc = train(run, shm_root, "go2_joystick_flat", *PLAY)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert f"video: {run / 'play.mp4'} (10 frames" in proc.stdout and f"plot: {run / 'play.png'}" in proc.stdout
    assert events(proc.stderr, "final policy played")
    with imageio.get_reader(str(run / "play.mp4"), format="FFMPEG") as reader:
        frames = list(reader.iter_data())  # not list(reader): its length is unknown to it
    assert len(frames) == 10
    assert frames[0].shape == (240, 640, 3)  # two 320x240 tiles side by side
    for frame in (frames[0], frames[-1]):
        for tile in (frame[:, :320], frame[:, 320:]):
            assert tile.std() > 10, "a blank tile"
    plot = imageio.imread(run / "play.png")
    assert plot.ndim == 3 and plot.shape[0] > 300
    tags = image_tags(run)
    assert set(tags) >= {"Play/frames", "Play/velocity_tracking"}
    assert [e.step for e in tags["Play/frames"]] == [2]  # the final checkpoint's iteration
    assert tags["Play/velocity_tracking"][0].width == plot.shape[1]
    assert read_summary(run)["status"] == "completed"


def test_no_play_writes_neither(tmp_path, shm_root):
    """training.no_play=true (the key itself, no APPO_ variable): no play is started and nothing of one written."""
    run = tmp_path / "run"
    proc = train(run, shm_root, "inverted_pendulum", "training.no_play=true", APPO_TRAINING__NO_PLAY=None)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert not events(proc.stderr, "playing the final policy")
    assert (run / "model_2.pt").is_file()
    assert_not_played(run)


@pytest.mark.skipif(gl.library_loads("osmesa"), reason="OSMesa loads here: MUJOCO_GL=osmesa would render")
def test_run_without_gl_exits_0_with_checkpoints_and_a_warning(tmp_path, shm_root):
    """Where no GL context can be made (MUJOCO_GL=osmesa without libOSMesa), appo-train still exits 0 with its
    final checkpoint intact, and warns naming the missing library and training.no_play."""
    run = tmp_path / "run"
    proc = train(run, shm_root, "inverted_pendulum", *PLAY, MUJOCO_GL="osmesa")
    assert proc.returncode == 0, proc.stderr[-3000:]
    (warning,) = events(proc.stderr, "final policy not rendered")
    assert warning["level"] == "warning"
    assert "libOSMesa" in warning["cause"] and "training.no_play=true" in warning["hint"]
    assert load_policy(run / "model_2.pt").iteration == 2  # verified against its digest
    assert read_summary(run)["status"] == "completed"
    assert_not_played(run)


def stopped_train(run: Path, shm_root: Path, ready: Path, *overrides: str, grace: float) -> tuple[int, str]:
    """A tiny inverted_pendulum appo-train run sent SIGTERM once `ready` exists: (exit status, JSON log)."""
    err = run.parent / "stderr.log"
    cmd = [exe("appo-train"), "--task", "inverted_pendulum", "--log-dir", str(run), f"transport.shm_root={shm_root}",
           *TINY, *overrides]
    with err.open("w") as stderr:
        proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=stderr,
                                env={**os.environ, "APPO_LOG_FORMAT": "json"})
        try:
            wait_for(lambda: ready.exists() or proc.poll() is not None, 180, f"{ready.name} to appear")
            proc.send_signal(signal.SIGTERM)
            rc = proc.wait(timeout=grace)
        finally:
            if proc.poll() is None:
                proc.kill()
    return rc, err.read_text()


def test_stop_during_the_play_exits_0_and_leaves_no_video(tmp_path, shm_root):
    """SIGTERM while the final policy plays: the play is ended, its partial video removed, a warning logged, and
    appo-train exits 0 within its stop grace."""
    run = tmp_path / "run"
    rc, log = stopped_train(run, shm_root, run / "partial.play.mp4", "training.no_play=false",
                            "training.play_env_num=1", "training.play_steps=1000000", grace=20)
    assert rc == 0, log[-3000:]
    (warning,) = events(log, "final policy not rendered")
    assert "stopped" in warning["cause"]
    assert (run / "model_2.pt").is_file()
    assert_not_played(run)


def test_interrupted_run_does_not_play(tmp_path, shm_root):
    """A run stopped by SIGTERM before max_iterations ends without a play, even with training.no_play=false."""
    run = tmp_path / "run"
    rc, log = stopped_train(run, shm_root, run / "model_1.pt", "algo.max_iterations=100000", "training.no_play=false",
                            grace=60)
    assert rc == 0, log[-3000:]
    assert read_summary(run)["status"] == "interrupted"
    assert not events(log, "playing the final policy")
    assert_not_played(run)


@pytest.mark.parametrize("key", ["training.play_env_num", "training.play_steps"])
def test_bad_play_values_are_refused_by_name(tmp_path, shm_root, key):
    """play_env_num=0 or play_steps=0 is refused before training, exit 2, naming the key."""
    run = tmp_path / "run"
    proc = train(run, shm_root, "inverted_pendulum", f"{key}=0")
    assert proc.returncode == 2
    assert key in proc.stderr and "greater than or equal to 1" in proc.stderr
    assert not run.exists()


def test_cli_override_beats_the_environment_variable():
    """training.no_play defaults to false, APPO_TRAINING__NO_PLAY=true sets it, and training.no_play=false on the
    command line wins over the variable; the seed's defaults of 16 envs and 150 steps."""
    assert load_config([], environ={}).training.no_play is False
    env = {"APPO_TRAINING__NO_PLAY": "true"}
    assert load_config([], environ=env).training.no_play is True
    assert load_config(["training.no_play=false"], environ=env).training.no_play is False
    cfg = load_config([], environ={})
    assert (cfg.training.play_env_num, cfg.training.play_steps) == (16, 150)


@pytest.mark.parametrize("script, cause", [
    ("import time; time.sleep(60)", "no result within 1 s"),
    ("raise RuntimeError('boom')", "RuntimeError: boom"),
    ("import sys; print('error: cannot render: no GL', file=sys.stderr); sys.exit(2)", "cannot render: no GL"),
])
def test_failed_play_is_a_warning_naming_the_cause(tmp_path, monkeypatch, script, cause):
    """A play that times out, crashes or refuses is ended and reported as one warning with its cause and the
    training.no_play hint; play_final_policy returns False and raises nothing."""
    monkeypatch.setattr(play_after, "play_command", lambda *_: [sys.executable, "-c", script])
    with capture_logs() as logs:
        assert play_after.play_final_policy(tmp_path, load_config([]), threading.Event(), timeout_s=1) is False
    (warning,) = [r for r in logs if r["log_level"] == "warning"]
    assert warning["cause"] == cause and "training.no_play=true" in warning["hint"]


def test_stop_event_ends_the_play(tmp_path, monkeypatch):
    """A stop (SIGTERM/SIGINT to appo-train) during the play ends the child at once and is reported as such."""
    monkeypatch.setattr(play_after, "play_command", lambda *_: [sys.executable, "-c", "import time; time.sleep(60)"])
    stop = threading.Event()
    threading.Timer(0.5, stop.set).start()
    with capture_logs() as logs:
        assert play_after.play_final_policy(tmp_path, load_config([]), stop) is False
    (warning,) = [r for r in logs if r["log_level"] == "warning"]
    assert "stopped" in warning["cause"]


def test_tiles_form_a_near_square_grid():
    """The tile grid: one row up to 2 envs, 2x2 for 3-4, 2x3 for 5-6, 4x4 for 16."""
    assert [grid_shape(n) for n in (1, 2, 3, 4, 5, 6, 16)] == [(1, 1), (1, 2), (2, 2), (2, 2), (2, 3), (2, 3), (4, 4)]
    assert np.prod(grid_shape(16)) == 16
