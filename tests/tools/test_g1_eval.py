"""appo-eval, appo-export and appo-motion record on the G1 tasks, on checkpoints the real appo-train wrote.

Two tiny training runs (16 envs x 8 steps, 2 iterations, [32, 32] networks) are made once per module:
g1_velocity_flat, and g1_motion_tracking on a clip built kinematically here (test_motion_cli's arc: the
home pose, the pelvis on a circle arc).  Their policies barely act; the tests check what the tools
report and write, and that the figures agree with each other, not how well the robot tracks.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnxruntime
import pytest
import torch
from PIL import Image
from test_motion_cli import arc_clip

from collector.envs.g1.motion import load_clip, write_clip
from collector.envs.g1.tracking import TRACKED_BODIES
from common.checkpoint_io import find_checkpoint, load_policy
from tools import eval as appo_eval
from tools import motion as appo_motion
from tools.export import FILE_NAMES, load_torchscript
from tools.export import main as export_main

BIN = Path(sys.executable).parent
ROOT = Path(__file__).resolve().parents[2]
TINY = ["algo.max_iterations=2", "algo.num_envs=16", "algo.steps_per_env=8", "algo.save_interval=1",
        "training.console=false", "algo.policy.actor_hidden_dims=[32,32]", "algo.policy.critic_hidden_dims=[32,32]"]
CLIP_FRAMES = 40  # one play of the clip: 39 steps
NO_GL = ("cannot create an offscreen OpenGL context", "cannot render:")  # no context; no GL library


def train(root: Path, task: str, *extra: str) -> Path:
    """Run appo-train on a tiny budget; its log root (runs under <root>/logs/<task>/)."""
    logs, shm = root / "logs", root / "shm"
    shm.mkdir(parents=True)
    proc = subprocess.run([str(BIN / "appo-train"), "--task", task, *TINY, f"training.log_dir={logs}",
                           f"transport.shm_root={shm}", *extra], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return logs


def tool(module: str, *argv: str) -> subprocess.CompletedProcess:
    """Run `python -m tools.<module> ARGV` from the repository root."""
    return subprocess.run([sys.executable, "-m", f"tools.{module}", *argv], capture_output=True, text=True,
                          timeout=120, cwd=ROOT)


@pytest.fixture(scope="module")
def clip_path(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("clips") / "arc.npz"
    write_clip(path, arc_clip(CLIP_FRAMES))
    return path


@pytest.fixture(scope="module")
def walk_logs(tmp_path_factory) -> Path:
    return train(tmp_path_factory.mktemp("walk"), "g1_velocity_flat")


@pytest.fixture(scope="module")
def seed_walk_logs(tmp_path_factory) -> Path:
    """The seed's walker with its gait phase fed to the networks as sine and cosine (algo.policy.periodic_inputs)."""
    return train(tmp_path_factory.mktemp("seed_walk"), "g1_walk_flat", "algo.policy.periodic_inputs=true")


@pytest.fixture(scope="module")
def tracking_logs(tmp_path_factory, clip_path) -> Path:
    return train(tmp_path_factory.mktemp("tracking"), "g1_motion_tracking", f"task_options.motion_file={clip_path}")


@pytest.fixture(scope="module")
def tracking_eval(tmp_path_factory, tracking_logs):
    """One appo-eval run of the tracking checkpoint with --json and a tiny --video (without it where there is
    no offscreen OpenGL): (process, figures, video path or the reason there is none)."""
    out = tmp_path_factory.mktemp("tracking_eval")
    base = ["--task", "g1_motion_tracking", "--log-root", str(tracking_logs), "--episodes", "3", "--threads", "1",
            "--json", str(out / "e.json")]
    video = out / "e.mp4"
    proc = tool("eval", *base, "--video", str(video), "--video-size", "160x120")
    if proc.returncode == 2 and any(m in proc.stderr for m in NO_GL):
        video = proc.stderr.strip()
        proc = tool("eval", *base)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc, json.loads((out / "e.json").read_text()), video


def test_walk_eval_prints_velocity_tracking_errors_and_survival(walk_logs, tmp_path):
    """appo-eval on a g1_velocity_flat checkpoint prints and writes the xy and yaw-rate RMS errors and the
    time-limit fraction, and no motion-tracking figures."""
    proc = tool("eval", "--task", "g1_velocity_flat", "--log-root", str(walk_logs), "--episodes", "2", "--threads", "1",
                "--max-episode-steps", "20", "--json", str(tmp_path / "w.json"))
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "velocity tracking RMS error: xy" in proc.stdout and "reached time limit" in proc.stdout
    out = json.loads((tmp_path / "w.json").read_text())
    assert out["task"] == "g1_velocity_flat" and out["episodes"] == 2 and out["checkpoint"].endswith("model_2.pt")
    assert out["velocity_xy_rms_error"] > 0 and out["yaw_rate_rms_error"] >= 0
    assert 0.0 <= out["time_limit_fraction"] <= 1.0 and max(out["lengths"]) <= 20
    assert "clip_fraction_mean" not in out and "body_plot" not in out


def test_seed_walk_trains_and_eval_reports_its_velocity_tracking(seed_walk_logs, tmp_path):
    """The seed's g1_walk_flat trains with the real appo-train, and appo-eval on its checkpoint prints the xy and
    yaw-rate tracking errors and the commanded and measured speeds."""
    proc = tool("eval", "--task", "g1_walk_flat", "--log-root", str(seed_walk_logs), "--episodes", "2", "--threads",
                "1", "--max-episode-steps", "20", "--json", str(tmp_path / "s.json"))
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "velocity tracking RMS error: xy" in proc.stdout
    out = json.loads((tmp_path / "s.json").read_text())
    assert out["task"] == "g1_walk_flat" and out["episodes"] == 2 and max(out["lengths"]) <= 20
    assert out["velocity_xy_rms_error"] >= 0 and out["yaw_rate_rms_error"] > 0
    policy = load_policy(find_checkpoint("-1", "g1_walk_flat", seed_walk_logs))
    # 98 raw columns; the networks take 100: the two phases' sines in place, their cosines appended.
    assert policy.obs_dim == 98 and policy.model.obs_normalizer.mean.numel() == 100


def test_export_of_a_periodic_input_walker_takes_raw_observations(seed_walk_logs, tmp_path):
    """appo-export of the g1_walk_flat checkpoint with periodic inputs: its ONNX and TorchScript models take the
    98 raw columns and give the checkpoint's mean action, the same for a phase and that phase a turn later."""
    ckpt = find_checkpoint("-1", "g1_walk_flat", seed_walk_logs)
    obs = torch.randn(5, 98, generator=torch.Generator().manual_seed(0))
    later = obs.clone()
    later[:, 96:] += 2 * np.pi
    got_onnx, got_ts = exported_actions(ckpt, tmp_path, later)
    with torch.no_grad():
        want = load_policy(ckpt).model.act_deterministic(obs).numpy()
    assert want.shape == (5, 29)
    assert np.abs(got_onnx - want).max() <= 1e-4 and np.abs(got_ts - want).max() <= 1e-4


def test_play_mode_turns_the_seed_walks_observation_noise_off():
    """appo-eval's play mode switches off g1_walk_flat's actor noise, as for the other G1 tasks."""
    from collector.envs import make_env

    with make_env("g1_walk_flat", num_envs=2, num_threads=1, seed=0) as env:
        assert env.noise
        appo_eval.use_play_settings(env)
        obs, critic = env.reset()
        assert not env.noise
        np.testing.assert_array_equal(obs, critic[:, :98])


def test_tracking_eval_prints_the_four_figures_and_writes_them_to_json(tracking_eval, clip_path):
    """Tracking eval prints the anchor, body and joint errors and the clip fraction; episodes start at frame 0
    (a fraction is the episode length over T - 1) and last at most one play of the clip; the per-body errors
    average to the body error."""
    proc, out, _ = tracking_eval
    line = next(ln for ln in proc.stdout.splitlines() if ln.startswith("motion tracking mean error:"))
    for figure in ("anchor position", "body position", "joint position", "clip completed"):
        assert figure in line
    assert out["motion_file"] == str(clip_path)
    for name in ("anchor_pos_error_mean", "body_pos_error_mean", "joint_pos_error_mean"):
        assert np.isfinite(out[name]) and out[name] >= 0.0, name
    assert 0.0 <= out["clip_fraction_mean"] <= 1.0
    assert max(out["lengths"]) <= CLIP_FRAMES - 1
    assert out["clip_fractions"] == pytest.approx([length / (CLIP_FRAMES - 1) for length in out["lengths"]])
    assert out["clip_fraction_mean"] == pytest.approx(np.mean(out["clip_fractions"]))
    per_body = out["body_pos_error_per_body"]
    assert list(per_body) == list(TRACKED_BODIES) and min(per_body.values()) >= 0.0
    assert np.mean(list(per_body.values())) == pytest.approx(out["body_pos_error_mean"])


def test_tracking_eval_draws_the_per_body_plot_from_the_json_figures(tracking_eval):
    """The per-body bar chart is a PNG beside the json (<stem>_bodies.png) whose plotted values (its
    Description chunk) are the json's per-body errors."""
    proc, out, _ = tracking_eval
    plot = Path(out["body_plot"])
    assert plot.name == "e_bodies.png" and f"body plot: {plot}" in proc.stdout
    image = Image.open(plot)
    assert image.format == "PNG" and image.size[0] > 400
    assert json.loads(image.text["Description"]) == out["body_pos_error_per_body"]


def test_tracking_video_has_one_frame_per_step_and_draws_the_reference(tracking_eval):
    """--video on tracking writes an MP4 of env 0's first episode (one frame per step) with the green
    reference spheres in the picture."""
    import imageio.v2 as imageio

    _, out, video = tracking_eval
    if not isinstance(video, Path):
        pytest.skip(f"no offscreen OpenGL here: {video}")
    assert out["video_frames"] in out["lengths"]  # 3 envs, one episode each; lengths in the order they ended
    reader = imageio.get_reader(str(video), format="FFMPEG")
    assert reader.count_frames() == out["video_frames"]
    frame = reader.get_data(0).astype(int)
    reader.close()
    green = (frame[..., 1] > frame[..., 0] + 60) & (frame[..., 1] > frame[..., 2] + 60)
    assert frame.shape == (120, 160, 3) and green.sum() >= 10


def test_play_settings_turn_the_g1_switches_off_and_play_the_clip_once(clip_path):
    """Evaluation's play mode: no observation noise (both G1 tasks); for tracking no initialisation noise, no
    pushes, starts at frame 0 and episodes of one play of the clip (T - 1 steps) or a shorter given limit."""
    from collector.envs import make_env

    walk = make_env("g1_velocity_flat", 1, 1, 0)
    appo_eval.use_play_settings(walk)
    assert walk.noise is False and walk.max_episode_steps == walk.spec.max_episode_steps
    walk.close()
    for limit, steps in ((None, CLIP_FRAMES - 1), (5, 5), (10_000, CLIP_FRAMES - 1)):
        env = make_env("g1_motion_tracking", 2, 1, 0, motion_file=str(clip_path))
        appo_eval.use_play_settings(env, limit)
        assert (env.noise, env.init_noise, env.pushes, env.sampling_mode) == (False, False, False, "start")
        assert env.max_episode_steps == steps
        env.reset()
        assert (env.frame == 1).all()  # placed at frame 0, showing frame 1
        env.close()


def test_tracking_eval_is_deterministic_and_takes_a_clip_override(tracking_logs, tmp_path):
    """Two evaluations give the same figures; task_options.motion_file=CLIP replaces the run's clip (a shorter
    clip gives shorter episodes); other overrides and a refused clip are errors."""
    short = tmp_path / "short.npz"
    write_clip(short, arc_clip(12))
    argv = ["--task", "g1_motion_tracking", "--log-root", str(tracking_logs), "--episodes", "2", "--threads", "1",
            f"task_options.motion_file={short}"]
    first, second = (appo_eval.evaluate(appo_eval.parse_args(argv)) for _ in range(2))
    assert first == second
    assert first["motion_file"] == str(short) and max(first["lengths"]) <= 11
    with pytest.raises(SystemExit):
        appo_eval.parse_args([*argv, "algo.num_envs=4"])
    (tmp_path / "bad.npz").write_bytes(b"not a clip")
    threads = torch.get_num_threads()
    try:
        assert appo_eval.main([*argv[:-1], f"task_options.motion_file={tmp_path / 'bad.npz'}"]) == 2
    finally:
        torch.set_num_threads(threads)  # main() sets the process's threads


def exported_actions(ckpt: Path, out: Path, obs: torch.Tensor) -> tuple[np.ndarray, np.ndarray]:
    """appo-export of `ckpt` into `out`; the ONNX and the TorchScript model's actions on `obs`."""
    assert export_main(["--load-run", str(ckpt), "--out", str(out)]) == 0
    with torch.no_grad():
        got_ts = load_torchscript(out / FILE_NAMES["torchscript"])(obs).numpy()
    session = onnxruntime.InferenceSession(str(out / FILE_NAMES["onnx"]), providers=["CPUExecutionProvider"])
    (got_onnx,) = session.run(["actions"], {"obs": obs.numpy()})
    return got_onnx, got_ts


def test_export_of_a_g1_velocity_checkpoint_gives_its_deterministic_action(walk_logs, tmp_path):
    """appo-export on the trained g1_velocity_flat checkpoint writes ONNX and TorchScript models whose action on a
    random raw observation is the checkpoint's mean action."""
    ckpt = find_checkpoint("-1", "g1_velocity_flat", walk_logs)
    obs = torch.randn(5, 99, generator=torch.Generator().manual_seed(0))
    got_onnx, got_ts = exported_actions(ckpt, tmp_path, obs)
    with torch.no_grad():
        want = load_policy(ckpt).model.act_deterministic(obs).numpy()
    assert want.shape == (5, 29)
    assert np.abs(got_onnx - want).max() <= 1e-5 and np.abs(got_ts - want).max() <= 1e-5


def test_record_writes_a_clip_that_check_accepts(walk_logs, tmp_path):
    """appo-motion record writes round(seconds x 50) frames of the walk policy as a clip that appo-motion check
    accepts, starting at the env's reset pose."""
    out = tmp_path / "clips" / "walk.npz"
    proc = tool("motion", "record", "--task", "g1_velocity_flat", "--load-run", "-1", "--log-root", str(walk_logs),
                "--checkpoint", "2", "--seconds", "0.5", "--command", "0.5", "0", "0.2", "--out", str(out))
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "frames: 25" in proc.stdout
    check = tool("motion", "check", str(out))
    assert check.returncode == 0, check.stderr
    assert "frames: 25" in check.stdout and "fps: 50" in check.stdout
    clip = load_clip(out)
    assert clip.num_frames == 25 and 0.7 < clip.body_pos_w[0, 0, 2] < 0.9  # the pelvis near its 0.76 m home


@pytest.mark.parametrize("argv, needle", [
    (["--load-run", "nowhere"], "run 'nowhere' not found"),
    (["--task", "g1_motion_tracking"], "g1_velocity_flat policies only"),
    (["--seconds", "0"], "must be a positive number of seconds"),
    (["--seconds", "-1"], "must be a positive number of seconds"),
])
def test_record_refuses_bad_input_with_status_2(walk_logs, tmp_path, capsys, argv, needle):
    """An unknown run, a task other than g1_velocity_flat and seconds <= 0 are refused with the problem named, exit 2,
    and no clip."""
    out = tmp_path / "x.npz"
    args = {"--log-root": str(walk_logs), "--seconds": "0.5", "--command": ["0.5", "0", "0"], "--out": str(out)}
    args.update({argv[0]: argv[1]})
    flat = [x for k, v in args.items() for x in (k, *(v if isinstance(v, list) else [v]))]
    threads = torch.get_num_threads()
    try:
        code = appo_motion.main(["record", *flat])
    except SystemExit as exc:  # argparse's refusals
        code = exc.code
    finally:
        torch.set_num_threads(threads)  # main() sets the process's threads
    assert code == 2 and needle in capsys.readouterr().err and not out.exists()
