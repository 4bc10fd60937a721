"""G1 motion clips (collector/envs/g1/motion.py): loading, refusals, summary figures and writing.

Every clip here is made kinematically in this file: the home pose with joint
sinusoids inside the facts' limits, a pelvis moving forward at a known speed while
turning at a known yaw rate, body poses from MuJoCo's forward kinematics and
velocities by finite differences.  The known speed, yaw rate and length are the
reference for the figures.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import mujoco
import numpy as np
import pytest

from collector.envs.g1 import model as g1_model
from collector.envs.g1.motion import (
    KEYS,
    ClipError,
    MotionClip,
    clip_from_qpos,
    clip_stats,
    load_clip,
    write_clip,
)

FACTS = json.loads((Path(g1_model.__file__).parent / "g1_facts.json").read_text())
HINGES = [j for j in FACTS["joints"] if j["type"] == "hinge"]
JOINTS = [j["name"] for j in HINGES]
LIMITS = np.array([j["range"] for j in HINGES])
BODIES = [b["name"] for b in FACTS["bodies"]]
HOME = np.array(FACTS["home_keyframe"]["qpos"])

FPS = 50.0
FRAMES = 60
SPEED = 0.8  # m/s along the heading
YAW_RATE = 0.5  # rad/s
YAW0 = 2.9  # rad: the heading crosses +-pi during the clip, so the heading change must be wrapped


@pytest.fixture(scope="module")
def model() -> mujoco.MjModel:
    return g1_model.build_model()


def trajectory(frames: int = FRAMES, speed: float = SPEED, yaw_rate: float = YAW_RATE) -> np.ndarray:
    """[frames, 36] qpos: pelvis on a circle arc at `speed` and `yaw_rate`, joints swinging inside their limits."""
    t = np.arange(frames) / FPS
    heading = YAW0 + yaw_rate * t
    if yaw_rate:
        radius = speed / yaw_rate
        x, y = radius * (np.sin(heading) - math.sin(YAW0)), -radius * (np.cos(heading) - math.cos(YAW0))
    else:
        x, y = speed * t * math.cos(YAW0), speed * t * math.sin(YAW0)
    quat = np.stack([np.cos(heading / 2), 0 * t, 0 * t, np.sin(heading / 2)], axis=1)
    root = np.column_stack([x, y, np.full(frames, HOME[2]), quat])
    home = HOME[7:]
    amplitude = np.minimum(0.3, 0.5 * np.minimum(home - LIMITS[:, 0], LIMITS[:, 1] - home))
    phase = np.arange(len(home))
    joints = home + amplitude * np.sin(2 * np.pi * 1.5 * t[:, None] + phase)
    return np.concatenate([root, joints], axis=1)


def kinematic_arrays(model: mujoco.MjModel, qpos: np.ndarray) -> dict[str, np.ndarray]:
    """The clip's arrays (float32, as the reference clips) from qpos by MuJoCo FK and finite differences."""
    data = mujoco.MjData(model)
    pos, quat = [], []
    for q in qpos:
        data.qpos[:] = q
        mujoco.mj_kinematics(model, data)
        pos.append(data.xpos[1:].copy())
        quat.append(data.xquat[1:].copy())
    pos, quat, dt = np.array(pos), np.array(quat), 1 / FPS
    arrays = {"joint_pos": qpos[:, 7:], "joint_vel": np.gradient(qpos[:, 7:], dt, axis=0), "body_pos_w": pos,
              "body_quat_w": quat, "body_lin_vel_w": np.gradient(pos, dt, axis=0),
              "body_ang_vel_w": angular_velocity(quat, dt)}
    arrays = {k: v.astype(np.float32) for k, v in arrays.items()}
    return {"fps": np.array([FPS]), **arrays}


def angular_velocity(quat: np.ndarray, dt: float) -> np.ndarray:
    """World-frame angular velocity by MuJoCo's quaternion difference, central inside and one-sided at the ends."""
    out = np.zeros(quat.shape[:-1] + (3,))
    local = np.zeros(3)
    for t in range(len(quat)):
        a, b = min(t + 1, len(quat) - 1), max(t - 1, 0)
        for i in range(quat.shape[1]):
            mujoco.mju_subQuat(local, quat[a, i], quat[b, i])  # in the frame of quat[b]
            mujoco.mju_rotVecQuat(out[t, i], local, quat[b, i])
        out[t] /= (a - b) * dt
    return out


def save(path: Path, arrays: dict[str, np.ndarray]) -> Path:
    """Write arrays as an uncompressed npz at exactly `path`."""
    with open(path, "wb") as f:
        np.savez(f, **arrays)
    return path


@pytest.fixture(scope="module")
def good(model) -> dict[str, np.ndarray]:
    return kinematic_arrays(model, trajectory())


def test_a_kinematic_clip_loads_and_its_figures_are_the_ones_it_was_built_from(tmp_path, model, good):
    """Frames, duration (one 0.02 s step per frame), fps, pelvis speed and wrapped heading change match the build."""
    clip = load_clip(save(tmp_path / "good.npz", good), model)
    stats = clip_stats(clip, model)
    assert isinstance(clip, MotionClip) and clip.num_frames == FRAMES
    assert (stats.frames, stats.fps) == (FRAMES, FPS)
    assert stats.duration == pytest.approx(FRAMES / FPS)
    assert stats.mean_root_speed == pytest.approx(SPEED, rel=1e-4)
    turned = YAW_RATE * (FRAMES - 1) / FPS
    assert YAW0 + turned > math.pi  # the heading did wrap
    assert stats.heading_change == pytest.approx(turned, abs=1e-5)
    assert stats.max_fk_error < 1e-5  # float32 storage only


def test_the_default_model_is_used_without_one(tmp_path, good):
    """load_clip and clip_stats build the G1 model themselves when given none."""
    stats = clip_stats(load_clip(save(tmp_path / "good.npz", good)))
    assert stats.frames == FRAMES and stats.max_fk_error < 1e-5


def with_joint(joint: str, frame: int, value: float) -> np.ndarray:
    """The trajectory with one joint angle set at one frame."""
    qpos = trajectory()
    qpos[frame, 7 + JOINTS.index(joint)] = value
    return qpos


def edited(arrays: dict[str, np.ndarray], **changes) -> dict[str, np.ndarray]:
    """A copy of the arrays with some replaced (None removes the key)."""
    out = {k: v.copy() for k, v in arrays.items()}
    for key, value in changes.items():
        if value is None:
            del out[key]
        else:
            out[key] = value
    return out


def nan_at(a: np.ndarray, index: tuple) -> np.ndarray:
    """A copy with one NaN."""
    a = a.copy()
    a[index] = np.nan
    return a


def moved(a: np.ndarray, frame: int, body: str, offset: list[float]) -> np.ndarray:
    """A copy of body_pos_w with one body shifted at one frame."""
    a = a.copy()
    a[frame, BODIES.index(body)] += np.float32(offset)
    return a


KNEE_HI = LIMITS[JOINTS.index("left_knee_joint"), 1]

REFUSALS = {
    "missing key": (lambda g, m: edited(g, body_lin_vel_w=None), ["missing key", "body_lin_vel_w"]),
    "wrong body count": (lambda g, m: edited(g, **{k: g[k][:, :29] for k in KEYS if k.startswith("body")}),
                         ["body_pos_w has 29 bodies, expected 30"]),
    "wrong joint count": (lambda g, m: edited(g, joint_pos=g["joint_pos"][:, :28], joint_vel=g["joint_vel"][:, :28]),
                          ["joint_pos has 28 joints per frame, expected 29"]),
    "wrong shape": (lambda g, m: edited(g, body_quat_w=g["body_quat_w"][..., :3]),
                    ["body_quat_w has 3 components per body, expected 4"]),
    "frame counts differ": (lambda g, m: edited(g, body_ang_vel_w=g["body_ang_vel_w"][:-1]),
                            [f"body_ang_vel_w has {FRAMES - 1} frames, expected {FRAMES}"]),
    "fps 30": (lambda g, m: edited(g, fps=np.array([30.0])), ["fps is 30, expected 50", "not resampled"]),
    "a NaN": (lambda g, m: edited(g, joint_vel=nan_at(g["joint_vel"], (7, 3))), ["joint_vel has a NaN at frame 7"]),
    "joint 0.1 rad past its limit": (
        lambda g, m: kinematic_arrays(m, with_joint("left_knee_joint", 10, KNEE_HI + 0.1)),
        ["joint left_knee_joint", "frame 10", f"{KNEE_HI + 0.1:.4f} rad", "by 0.1000 rad"]),
    "body moved 2 cm": (lambda g, m: edited(g, body_pos_w=moved(g["body_pos_w"], 20, "left_elbow_link", [0, 0.02, 0])),
                        ["body left_elbow_link at frame 20 is 0.0200 m", "forward kinematics"]),
    "not a unit quaternion": (lambda g, m: edited(g, body_quat_w=g["body_quat_w"] * np.float32(0.5)),
                              ["unit quaternion"]),
}


@pytest.mark.parametrize("case", list(REFUSALS))
def test_a_bad_clip_is_refused_with_the_problem_and_the_file_named(tmp_path, model, good, case):
    """Each kind of bad clip raises ClipError (a ValueError) whose message names the problem and the file."""
    make, needles = REFUSALS[case]
    path = save(tmp_path / "bad_clip.npz", make(good, model))
    with pytest.raises(ClipError) as info:
        load_clip(path, model)
    assert isinstance(info.value, ValueError)
    message = str(info.value)
    assert str(path) in message
    for needle in needles:
        assert needle in message


@pytest.mark.parametrize("content", [b"not a zip archive at all", b"PK\x03\x04 truncated"])
def test_a_file_that_is_no_npz_is_refused(tmp_path, model, content):
    """A file np.load cannot read as an npz archive raises ClipError saying so."""
    path = tmp_path / "junk.npz"
    path.write_bytes(content)
    with pytest.raises(ClipError, match="not a readable .npz"):
        load_clip(path, model)


def test_a_missing_file_is_refused(tmp_path, model):
    """A path that does not exist raises ClipError naming it."""
    with pytest.raises(ClipError, match="nothere.npz.*not a readable"):
        load_clip(tmp_path / "nothere.npz", model)


def test_a_body_within_the_fk_tolerance_and_a_joint_at_its_limit_load(tmp_path, model, good):
    """A body 5 mm off its FK position and a joint exactly at its limit (float32) are accepted."""
    arrays = kinematic_arrays(model, with_joint("left_knee_joint", 10, KNEE_HI))
    arrays["body_pos_w"] = moved(arrays["body_pos_w"], 20, "left_elbow_link", [0, 0.005, 0])
    stats = clip_stats(load_clip(save(tmp_path / "edge.npz", arrays), model), model)
    assert stats.max_fk_error == pytest.approx(0.005, abs=1e-5)


def test_write_then_load_is_exact(tmp_path, model, good):
    """write_clip keeps every array bit for bit, with its dtype, in the same keys, readable without pickle."""
    clip = load_clip(save(tmp_path / "a.npz", good), model)
    out = tmp_path / "b_no_suffix"
    write_clip(out, clip)
    again = load_clip(out, model)
    assert again.fps == clip.fps
    for key in KEYS[1:]:
        a, b = getattr(clip, key), getattr(again, key)
        assert a.dtype == b.dtype and np.array_equal(a, b)
    with np.load(out, allow_pickle=False) as npz:
        assert sorted(npz.files) == sorted(KEYS)
        assert npz["fps"].shape == (1,) and npz["fps"].dtype == np.float64


def test_clip_from_qpos_equals_the_kinematic_construction(model, good):
    """clip_from_qpos gives this file's FK poses and finite-difference velocities."""
    clip = clip_from_qpos(trajectory(), model=model)
    assert clip.fps == FPS
    for key in ("joint_pos", "joint_vel", "body_pos_w", "body_quat_w", "body_lin_vel_w"):
        np.testing.assert_allclose(getattr(clip, key), good[key], atol=1e-6, rtol=1e-5, err_msg=key)
    np.testing.assert_allclose(clip.body_ang_vel_w, good["body_ang_vel_w"], atol=1e-4)
