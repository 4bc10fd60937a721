"""appo-eval and appo-export on checkpoints in the learner's format (made here, or by the real appo-train)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import numpy as np
import onnx
import onnxruntime
import pytest
import torch
from checkpoint_helpers import SMALL, write_checkpoint

from collector.envs import make_env
from common.checkpoint_io import CheckpointError, find_checkpoint, load_checkpoint, load_policy
from common.task_plugins import resolve_task_spec
from tools import eval as appo_eval
from tools.export import FILE_NAMES, DeterministicActor, export, load_torchscript, sample_observations
from tools.export import main as export_main

BIN = Path(sys.executable).parent
ROOT = Path(__file__).resolve().parents[2]

# A task reporting commanded and measured body velocities through the optional hook.
TRACKED_SOURCE = textwrap.dedent('''
    import numpy as np
    from common.task_spec import TASK_SPECS

    spec = TASK_SPECS["inverted_pendulum"]

    class Tracked:
        """The wrapped env plus a velocity_tracking() hook with fixed commanded and measured velocities."""

        def __init__(self, env):
            self._env = env

        def __getattr__(self, name):
            return getattr(self._env, name)

        def velocity_tracking(self):
            n = self._env.num_envs
            return np.tile([1.0, 0.5, 0.2], (n, 1)), np.tile([0.3, 0.4, 0.0], (n, 1))

    def make(num_envs, num_threads, seed, max_episode_steps=None):
        from collector.envs import make_env
        return Tracked(make_env("inverted_pendulum", num_envs, num_threads, seed, max_episode_steps))
''')


def eval_args(*argv: str):
    return appo_eval.parse_args(list(argv))


def test_find_checkpoint_resolves_indices_names_dirs_and_files(tmp_path):
    """-1/-2 pick the newest/previous run with checkpoints, --checkpoint picks model_N, names and paths work."""
    root = tmp_path / "logs"
    old, new = root / "hopper" / "zz_old", root / "hopper" / "aa_new"  # names sort opposite to start order
    for run, its in ((old, (1, 3)), (new, (2,))):
        for i in its:
            write_checkpoint(run / f"model_{i}.pt", "hopper", i)
        (run / "config.yaml").write_text("task: hopper\n")
        time.sleep(0.02)
    (root / "hopper" / "empty_run").mkdir()
    assert find_checkpoint("-1", "hopper", root) == new / "model_2.pt"
    assert find_checkpoint("-2", "hopper", root) == old / "model_3.pt"
    assert find_checkpoint("-2", "hopper", root, checkpoint=1) == old / "model_1.pt"
    assert find_checkpoint("zz_old", "hopper", root) == old / "model_3.pt"
    assert find_checkpoint(str(old), None, root) == old / "model_3.pt"
    assert find_checkpoint(str(old / "model_1.pt"), None) == old / "model_1.pt"
    for args, phrase in [(("-3", "hopper", root), "out of range"), (("-1", "ant", root), "no runs of task 'ant'"),
                         (("nope", "hopper", root), "run 'nope' not found"), (("-1", None, root), "give --task"),
                         (("empty_run", "hopper", root), "holds no checkpoint")]:
        with pytest.raises(CheckpointError, match=phrase):
            find_checkpoint(*args)
    with pytest.raises(CheckpointError, match="no model_7.pt"):
        find_checkpoint("-1", "hopper", root, checkpoint=7)


def test_bad_checkpoint_files_are_refused_by_name(tmp_path):
    """Missing, corrupt and non-APPO files raise CheckpointError naming the file."""
    corrupt, foreign = tmp_path / "corrupt.pt", tmp_path / "foreign.pt"
    corrupt.write_bytes(b"not a checkpoint")
    torch.save({"weights": torch.zeros(3)}, foreign)
    for path, phrase in [(tmp_path / "missing.pt", "does not exist"), (corrupt, "unreadable or corrupt"),
                         (foreign, "not an APPO checkpoint")]:
        with pytest.raises(CheckpointError, match=f"{path}.*{phrase}"):
            load_checkpoint(path)
    threads = torch.get_num_threads()
    try:
        assert appo_eval.main(["--load-run", str(corrupt)]) == 2  # the CLI reports instead of raising
    finally:
        torch.set_num_threads(threads)  # main() sets the process's threads


def test_eval_figures_match_a_hand_rollout(tmp_path):
    """appo-eval's returns and lengths are each env's first episode under the normalised mean action."""
    ckpt = tmp_path / "model_5.pt"
    model = write_checkpoint(ckpt, "inverted_pendulum")
    out = appo_eval.evaluate(eval_args("--load-run", str(ckpt), "--episodes", "4", "--num-envs", "4",
                                       "--seed", "3", "--threads", "1", "--max-episode-steps", "40"))
    env = make_env("inverted_pendulum", 4, 1, 3, max_episode_steps=40)
    obs, _ = env.reset()
    ret, length, first = np.zeros(4), np.zeros(4, int), {}
    with torch.no_grad():
        while len(first) < 4:
            norm = model.obs_normalizer
            normalised = (torch.from_numpy(obs) - norm.mean) / torch.sqrt(norm.var + 1e-8)
            r = env.step(model.actor(normalised.clamp(-10, 10)).numpy())
            ret, length = ret + r.rewards, length + 1
            for i in np.flatnonzero(r.terminated | r.truncated):
                first.setdefault(i, (ret[i], length[i], bool(r.truncated[i])))
            ret[r.terminated | r.truncated], length[r.terminated | r.truncated] = 0, 0
            obs = r.obs
    env.close()
    want = [first[i] for i in range(4)]
    assert sorted(out["returns"]) == pytest.approx(sorted(w[0] for w in want))
    assert out["length_mean"] == pytest.approx(np.mean([w[1] for w in want]))
    assert out["time_limit_fraction"] == pytest.approx(np.mean([w[2] for w in want]))
    assert out["episodes"] == 4 and out["iteration"] == 5 and "velocity_xy_rms_error" not in out


def test_velocity_tracking_hook_gives_rms_errors(tmp_path, monkeypatch):
    """A task with velocity_tracking() gets xy and yaw-rate RMS errors of commanded minus measured, and the
    commanded and measured xy speeds' RMS."""
    (tmp_path / "appo_tracked_task.py").write_text(TRACKED_SOURCE)
    monkeypatch.syspath_prepend(str(tmp_path))
    ckpt = tmp_path / "model_5.pt"
    write_checkpoint(ckpt, "inverted_pendulum")
    out = appo_eval.evaluate(eval_args("--task", "appo_tracked_task:make", "--load-run", str(ckpt),
                                       "--episodes", "3", "--threads", "1", "--plot", str(tmp_path / "p.png")))
    sys.modules.pop("appo_tracked_task", None)
    assert out["velocity_xy_rms_error"] == pytest.approx(np.sqrt(0.7**2 + 0.1**2))
    assert out["yaw_rate_rms_error"] == pytest.approx(0.2)
    assert out["commanded_xy_speed_rms"] == pytest.approx(np.sqrt(1.0 + 0.25))
    assert out["measured_xy_speed_rms"] == pytest.approx(0.5)
    assert (tmp_path / "p.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_slope_of_measured_on_commanded_is_the_least_squares_fit():
    """The slope per component is numpy's least-squares fit over all counted samples: 0.5 for a robot that
    moves at half the command plus an offset, 0 for one that stands, None where the command never varies."""
    rng = np.random.default_rng(0)
    results = appo_eval.Results()
    commands = [rng.uniform(-1, 1, (8, 3)) for _ in range(5)]
    for cmd in commands:
        cmd[:, 1] = 0.3  # vy constant: no slope to fit
        measured = np.stack([0.5 * cmd[:, 0] + 0.1, np.zeros(8), np.zeros(8)], axis=1)
        results.add_tracking(cmd, measured)
    results.add_episode(1.0, 1, True)
    figures = results.figures()
    everything = np.concatenate(commands)
    assert figures["slope_vx"] == pytest.approx(np.polyfit(everything[:, 0], 0.5 * everything[:, 0] + 0.1, 1)[0])
    assert figures["slope_vx"] == pytest.approx(0.5)
    assert figures["slope_vy"] is None
    assert figures["slope_yaw_rate"] == pytest.approx(0.0, abs=1e-12)


def test_video_has_one_frame_per_step_of_the_first_episode(tmp_path):
    """--video writes a playable MP4 of env 0's first episode (one frame per step) plus a PNG plot, into folders
    it makes."""
    import imageio.v2 as imageio

    ckpt = tmp_path / "model_5.pt"
    write_checkpoint(ckpt, "half_cheetah")  # never terminates: the first episode is exactly the time limit
    video, report = tmp_path / "videos" / "run.mp4", tmp_path / "reports" / "eval.json"  # folders not there yet
    proc = subprocess.run(
        [sys.executable, "-m", "tools.eval", "--load-run", str(ckpt), "--episodes", "2", "--threads", "1",
         "--max-episode-steps", "15", "--video", str(video), "--video-size", "160x120", "--json", str(report)],
        capture_output=True, text=True, timeout=120, cwd=ROOT,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(report.read_text())
    assert out["video_frames"] == 15 and out["lengths"] == [15, 15] and out["time_limit_fraction"] == 1.0
    reader = imageio.get_reader(str(video), format="FFMPEG")
    assert reader.count_frames() == 15
    frame = reader.get_data(7)
    reader.close()
    assert frame.shape == (120, 160, 3) and frame.std() > 10  # a scene, not a blank buffer
    assert Path(out["plot"]) == video.with_suffix(".png") and video.with_suffix(".png").stat().st_size > 1000


@pytest.mark.parametrize("task, overrides", [
    ("hopper", ()), ("g1_velocity_flat", ()), ("g1_motion_tracking", ("task_options.motion_file=clip.npz",)),
])
def test_onnx_and_torchscript_match_the_eager_actor(tmp_path, task, overrides):
    """Exported ONNX (onnxruntime) and TorchScript give the eager normalised mean action within 1e-5, any batch."""
    ckpt = tmp_path / "model_5.pt"
    model = write_checkpoint(ckpt, task, 5, 0, *overrides)
    spec = resolve_task_spec(task)
    policy = load_policy(ckpt)
    written = export(policy, tmp_path / "out")
    assert written == {fmt: tmp_path / "out" / name for fmt, name in FILE_NAMES.items()}
    session = onnxruntime.InferenceSession(str(written["onnx"]), providers=["CPUExecutionProvider"])
    scripted = load_torchscript(written["torchscript"])
    obs = sample_observations(DeterministicActor(model), spec.obs_dim, count=300, seed=1)
    for batch in (obs[:1], obs[:37], obs):
        with torch.no_grad():
            want = model.act_deterministic(batch).numpy()
            got_ts = scripted(batch).numpy()
        (got_onnx,) = session.run(["actions"], {"obs": batch.numpy()})
        assert np.abs(got_onnx - want).max() <= 1e-5
        assert np.abs(got_ts - want).max() <= 1e-5
    meta = {p.key: p.value for p in onnx.load(str(written["onnx"])).metadata_props}
    assert (meta["task"], meta["obs_dim"], meta["act_dim"]) == (task, str(spec.obs_dim), str(spec.act_dim))


def test_export_cli_writes_files_and_refuses_bad_input(tmp_path, capsys):
    """appo-export --load-run RUN --out DIR writes both files; bad runs and formats fail with the problem named."""
    run = tmp_path / "logs" / "inverted_pendulum" / "r1"
    write_checkpoint(run / "model_3.pt", "inverted_pendulum")
    args = ["--task", "inverted_pendulum", "--log-root", str(tmp_path / "logs"), "--out", str(tmp_path / "x")]
    assert export_main(args + ["--formats", "torchscript"]) == 0
    assert (tmp_path / "x" / FILE_NAMES["torchscript"]).is_file() and not (tmp_path / "x" / FILE_NAMES["onnx"]).exists()
    assert export_main(["--load-run", str(tmp_path / "nowhere"), "--out", str(tmp_path / "y")]) == 2
    assert "give --task" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        export_main(args + ["--formats", "tflite"])


def test_eval_runs_the_latest_checkpoint_of_a_real_training_run(tmp_path):
    """appo-eval --task T --load-run -1 finds and runs the checkpoint a real appo-train run wrote."""
    logs, shm = tmp_path / "logs", tmp_path / "shm"
    shm.mkdir()
    train = subprocess.run(
        [str(BIN / "appo-train"), "--task", "inverted_pendulum", "algo.max_iterations=2", "algo.num_envs=8",
         "algo.steps_per_env=8", "algo.save_interval=1", "training.console=false", f"training.log_dir={logs}",
         f"transport.shm_root={shm}", *SMALL],
        capture_output=True, text=True, timeout=120,
    )
    assert train.returncode == 0, train.stderr[-3000:]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.run(
        [sys.executable, "-m", "tools.eval", "--task", "inverted_pendulum", "--load-run", "-1",
         "--log-root", str(logs), "--episodes", "3", "--threads", "1", "--json", str(tmp_path / "e.json")],
        capture_output=True, text=True, timeout=120, env=env,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads((tmp_path / "e.json").read_text())
    assert out["checkpoint"].endswith("model_2.pt") and out["iteration"] == 2 and out["episodes"] == 3
    assert "return" in proc.stdout and "reached time limit" in proc.stdout
