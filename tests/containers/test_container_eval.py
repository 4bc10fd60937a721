"""The eval image for real: appo-eval renders a video through EGL and Mesa, appo-export writes ONNX and TorchScript,
both from a run the learner image trained."""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pytest
from container_helpers import IMAGES, docker

pytestmark = [pytest.mark.container, pytest.mark.timeout(300)]

TASK = "inverted_pendulum"
TINY = ["algo.num_envs=16", "algo.steps_per_env=16", "algo.policy.actor_hidden_dims=[32,32]",
        "algo.policy.critic_hidden_dims=[32,32]", "training.device=cpu"]


def run_image(image: str, entrypoint: str, data: Path, *args: str):
    """The image's `entrypoint` as uid 10001 with `data` (a host directory) at /var/lib/appo."""
    return docker("run", "--rm", "--network", "host", "-v", f"{data}:/var/lib/appo", "--entrypoint", entrypoint,
                  image, *args, check=False, timeout=240)


@pytest.fixture(scope="module")
def data(tmp_path_factory) -> Path:
    """A host directory owned by uid 10001 holding a 10-iteration run trained by appo-train in the learner image."""
    root = tmp_path_factory.mktemp("eval")
    os.chown(root, 10001, 10001)
    out = run_image(IMAGES["learner"], "appo-train", root, "--task", TASK, "training.log_dir=/var/lib/appo/logs",
                    "algo.max_iterations=10", "training.run_name=trained", "training.console=false", *TINY)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    assert (root / "logs" / TASK / "trained" / "model_10.pt").is_file()
    return root


def test_appo_eval_renders_a_video_into_folders_it_makes(data):
    """appo-eval in the eval image renders env 0's episode to an MP4 (non-blank frames) and its plot through EGL with
    Mesa, as uid 10001, into folders that did not exist, and writes its JSON report."""
    out = run_image(IMAGES["eval"], "appo-eval", data, "--load-run", f"/var/lib/appo/logs/{TASK}/trained",
                    "--episodes", "2", "--threads", "1", "--max-episode-steps", "60", "--video-size", "160x120",
                    "--video", "/var/lib/appo/out/videos/eval.mp4", "--json", "/var/lib/appo/out/reports/eval.json")
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    video = data / "out" / "videos" / "eval.mp4"
    assert video.stat().st_size > 0 and video.with_suffix(".png").stat().st_size > 0
    report = json.loads((data / "out" / "reports" / "eval.json").read_text())
    assert report["episodes"] == 2
    import imageio.v2 as imageio

    reader = imageio.get_reader(str(video), format="FFMPEG")
    try:
        assert reader.count_frames() == report["video_frames"] >= 10
        frame = reader.get_data(report["video_frames"] // 2)
    finally:
        reader.close()
    assert frame.shape[:2] == (120, 160)
    assert float(np.std(frame)) > 5, "a blank frame"


def test_appo_export_writes_onnx_and_torchscript_that_agree(data):
    """appo-export in the eval image writes policy.onnx and policy_torchscript.pt (its own parity check passes), and
    the ONNX actor runs outside the image."""
    out = run_image(IMAGES["eval"], "appo-export", data, "--load-run", f"/var/lib/appo/logs/{TASK}/trained",
                    "--out", "/var/lib/appo/exported")
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    onnx_file, ts_file = data / "exported" / "policy.onnx", data / "exported" / "policy_torchscript.pt"
    assert onnx_file.stat().st_size > 0 and ts_file.stat().st_size > 0
    import onnxruntime as ort

    session = ort.InferenceSession(str(onnx_file), providers=["CPUExecutionProvider"])
    obs_dim = session.get_inputs()[0].shape[1]
    actions = session.run(None, {"obs": np.zeros((3, obs_dim), np.float32)})[0]
    assert actions.shape[0] == 3 and np.isfinite(actions).all()
