"""The three images as built: what each carries (torch, TensorBoard, GL), its size, user, entrypoint, health check."""

from __future__ import annotations

import json

import pytest
from container_helpers import IMAGES, docker, inspect

pytestmark = pytest.mark.container

COLLECTOR_MAX_BYTES = 500 * 10**6  # as `docker image ls` counts (SI megabytes)

FIND = "import importlib.util as u, json, sys; print(json.dumps({m: u.find_spec(m) is not None for m in sys.argv[1:]}))"


def modules(image: str, *names: str) -> dict[str, bool]:
    out = docker("run", "--rm", "--network", "host", "--entrypoint", "python3", image, "-c", FIND, *names)
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_collector_image_is_torch_free_and_at_most_500_mb():
    """appo-collector has no torch and no TensorBoard, imports its collector, and is at most 500 MB."""
    image = IMAGES["collector"]
    assert modules(image, "torch", "tensorboard", "collector.main", "mujoco") == {
        "torch": False, "tensorboard": False, "collector.main": True, "mujoco": True}
    size = int(inspect(image, "{{.Size}}"))
    assert size <= COLLECTOR_MAX_BYTES, f"{image} is {size / 1e6:.0f} MB"


def test_learner_and_eval_images_keep_torch():
    """appo-learner has torch and TensorBoard (it serves TensorBoard too); appo-eval has torch for appo-export."""
    assert modules(IMAGES["learner"], "torch", "tensorboard", "learner.main") == {
        "torch": True, "tensorboard": True, "learner.main": True}
    assert modules(IMAGES["eval"], "torch", "onnxruntime", "tools.export") == {
        "torch": True, "onnxruntime": True, "tools.export": True}


@pytest.mark.parametrize("entry", ["appo-learner", "appo-train"])
def test_learner_entry_points_without_torch_name_the_extra(entry):
    """In the torch-free collector image, appo-learner and appo-train fail saying to install appo[learner]."""
    out = docker("run", "--rm", "--network", "host", "--entrypoint", entry, IMAGES["collector"], "--help",
                 check=False)
    assert out.returncode != 0
    assert "pip install 'appo[learner]'" in out.stderr, out.stderr[-2000:]


@pytest.mark.parametrize(("name", "entry", "healthcheck"), [
    ("learner", "appo-learner", True), ("collector", "appo-collector", True), ("eval", "appo-eval", False)])
def test_images_run_as_uid_10001_with_exec_entrypoints(name, entry, healthcheck):
    """Each image runs as 10001:10001 with its executable as the exec-form entrypoint; the training images probe
    /healthz."""
    config = json.loads(inspect(IMAGES[name], "{{json .Config}}"))
    assert config["User"] == "10001:10001"
    assert config["Entrypoint"] == [entry]
    if healthcheck:
        assert config["Healthcheck"]["Test"][0] == "CMD" and config["Healthcheck"]["Test"][-1] == "/healthz"


def test_only_the_eval_image_renders():
    """MUJOCO_GL=disable in the training images; the eval image renders with EGL and has libOpenGL.so.0."""
    for name, gl in (("learner", "disable"), ("collector", "disable"), ("eval", "egl")):
        env = json.loads(inspect(IMAGES[name], "{{json .Config.Env}}"))
        assert f"MUJOCO_GL={gl}" in env, (name, env)
    # PyOpenGL, which MuJoCo's EGL backend imports, loads libOpenGL.so.0 (the eval image once lacked it).
    out = docker("run", "--rm", "--network", "host", "--entrypoint", "python3", IMAGES["eval"], "-c",
                 "import ctypes; ctypes.CDLL('libOpenGL.so.0'); ctypes.CDLL('libEGL.so.1'); print('ok')")
    assert out.stdout.strip() == "ok"
