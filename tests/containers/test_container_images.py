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


STEP_GO2 = ("import numpy as np; from collector.envs import make_env; "
            "env = make_env('go2_joystick_flat', 2, 1, 0, sim='motrix'); env.reset(); "
            "r = env.step(np.zeros((2, 12), np.float32)); "
            "print('height', env.qpos[0, 2], 'finite', np.isfinite(r.obs).all())")


def test_the_motrix_collector_image_steps_the_go2_on_motrixsim_and_the_default_one_says_what_to_use():
    """appo-collector-motrix steps go2_joystick_flat on MotrixSim; the default image names it for --sim motrix."""
    out = docker("run", "--rm", "--network", "host", "--entrypoint", "python3", IMAGES["collector-motrix"], "-c",
                 STEP_GO2)
    words = out.stdout.split()
    assert words[-1] == "True" and 0.2 < float(words[1]) < 0.45, out.stdout
    assert modules(IMAGES["collector-motrix"], "torch", "motrixsim") == {"torch": False, "motrixsim": True}
    out = docker("run", "--rm", "--network", "host", "--entrypoint", "python3", IMAGES["collector"], "-c", STEP_GO2,
                 check=False)
    assert out.returncode != 0 and "appo-collector-motrix image" in out.stderr, out.stderr[-2000:]


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
    ("learner", "appo-learner", True), ("collector", "appo-collector", True),
    ("collector-motrix", "appo-collector", True), ("eval", "appo-eval", False)])
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
