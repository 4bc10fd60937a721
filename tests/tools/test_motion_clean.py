"""Cleaning arm self-penetration out of G1 clips (tools/motion_clean.py) on clips built with a known penetration.

The reaching clip (tests/g1_clips.py) pushes the right hand into the right hip capsule in its middle
frames; cleaning must leave it clear by the clearance, move only the arm joints, little and smoothly,
keep every other number bit for bit, and rebuild the arm's bodies and velocities the way the clip
format defines them.
"""

from __future__ import annotations

import mujoco
import numpy as np
import pytest
from g1_clips import ARM_JOINTS, HAND, HIP, capsule_depth, crossed_legs_qpos, reaching_qpos, walking_qpos

from collector.envs.g1.model import build_model, joint_names
from collector.envs.g1.motion import KEYS, check_clip, clip_from_qpos, forward_kinematics
from tools.motion_clean import CLEARANCE, SMOOTH_SIGMA, clean_clip, gaussian_filter, signed_max_filter
from tools.motion_contacts import self_penetration

FRAMES, START, STOP = 70, 25, 45  # the hand is in the hip within (START, STOP)
ARM = np.array([joint_names().index(n) for n in ARM_JOINTS])
OTHER = np.setdiff1d(np.arange(29), ARM)
ARM_BODIES = np.arange(15, 29)  # clip body indices of the arm links (shoulder pitch onwards)
MAX_CHANGE = 0.1  # rad: a 2.5 cm push (overlap and clearance) at a lever of a few decimetres
MAX_STEP = 0.01  # rad per frame by which the correction may change


@pytest.fixture(scope="module")
def model() -> mujoco.MjModel:
    return build_model()


@pytest.fixture(scope="module")
def reaching(model):
    """The reaching clip and its cleaned result."""
    clip = clip_from_qpos(reaching_qpos(FRAMES, START, STOP), model=model)
    return clip, clean_clip(clip, model)


def test_the_arm_is_pushed_clear_of_the_hip(model, reaching):
    """After cleaning no frame penetrates, the hand keeps half the clearance from the hip, and check accepts it."""
    clip, result = reaching
    assert self_penetration(clip.qpos(), model).frames.any()  # there was something to clean
    assert not result.after.frames.any()
    assert not self_penetration(result.clip.qpos(), model).frames.any()
    before = np.array([capsule_depth(model, q, HAND, HIP) for q in clip.qpos()])
    after = np.array([capsule_depth(model, q, HAND, HIP) for q in result.clip.qpos()])
    assert after[before > 0].max() <= -CLEARANCE / 2
    check_clip(result.clip, model)


def test_legs_pelvis_and_torso_are_bit_for_bit_the_same(reaching):
    """Every body below the arms and every joint but the arm joints keep their numbers exactly."""
    clip, result = reaching
    keep = np.setdiff1d(np.arange(30), ARM_BODIES + 1)  # clip body index = model body id - 1
    for key in ("body_pos_w", "body_quat_w", "body_lin_vel_w", "body_ang_vel_w"):
        np.testing.assert_array_equal(getattr(result.clip, key)[:, keep], getattr(clip, key)[:, keep], err_msg=key)
    for key in ("joint_pos", "joint_vel"):
        np.testing.assert_array_equal(getattr(result.clip, key)[:, OTHER], getattr(clip, key)[:, OTHER], err_msg=key)
    assert result.clip.fps == clip.fps


def test_only_arm_joints_change_little_near_the_penetration(reaching):
    """Only arm joints change, by at most MAX_CHANGE, and only within the smoothing reach of the penetrating frames."""
    clip, result = reaching
    change = result.clip.joint_pos.astype(np.float64) - clip.joint_pos
    np.testing.assert_array_equal(change, result.change)
    assert np.all(change[:, OTHER] == 0)
    assert 0.005 < np.abs(change).max() <= MAX_CHANGE
    reach = int(np.ceil(5 * SMOOTH_SIGMA * clip.fps)) + 1  # max filter 2 sigma plus Gaussian 3 sigma
    touched = np.flatnonzero(result.frames_touched)
    assert START - reach <= touched[0] and touched[-1] <= STOP + reach
    np.testing.assert_array_equal(result.clip.joint_pos[:START - reach], clip.joint_pos[:START - reach])


def test_the_correction_ramps_in_and_out_smoothly(reaching):
    """The correction changes by at most MAX_STEP rad from one frame to the next and starts and ends at zero."""
    _, result = reaching
    steps = np.abs(np.diff(result.change, axis=0))
    assert steps.max() <= MAX_STEP
    assert np.all(result.change[[0, -1]] == 0)


def test_arm_bodies_and_velocities_are_rebuilt_as_the_format_defines_them(model, reaching):
    """Arm bodies are the FK of the new angles; joint and body velocities central differences (world frame)."""
    _, result = reaching
    clip = result.clip
    dt = 1.0 / clip.fps
    pos, quat = forward_kinematics(clip.qpos(), model)
    np.testing.assert_allclose(clip.body_pos_w, pos, atol=1e-6)
    np.testing.assert_allclose(np.abs(np.sum(clip.body_quat_w * quat, axis=2)), 1.0, atol=1e-6)
    joints = clip.joint_pos.astype(np.float64)
    np.testing.assert_allclose(clip.joint_vel[:, ARM], np.gradient(joints, dt, axis=0)[:, ARM], atol=2e-5)
    body_pos = clip.body_pos_w.astype(np.float64)
    np.testing.assert_allclose(clip.body_lin_vel_w, np.gradient(body_pos, dt, axis=0), atol=2e-5)
    np.testing.assert_allclose(clip.body_ang_vel_w[:, ARM_BODIES], mujoco_angular_velocity(clip.body_quat_w, dt)
                               [:, ARM_BODIES], atol=2e-4)


def mujoco_angular_velocity(quat: np.ndarray, dt: float) -> np.ndarray:
    """World-frame angular velocity by MuJoCo's quaternion difference, central inside and one-sided at the ends."""
    quat = quat.astype(np.float64)
    out = np.zeros(quat.shape[:-1] + (3,))
    local = np.zeros(3)
    for t in range(len(quat)):
        a, b = min(t + 1, len(quat) - 1), max(t - 1, 0)
        for i in range(quat.shape[1]):
            mujoco.mju_subQuat(local, quat[a, i], quat[b, i])  # in the frame of quat[b]
            mujoco.mju_rotVecQuat(out[t, i], local, quat[b, i])
        out[t] /= (a - b) * dt
    return out


def test_a_clip_without_penetration_is_left_as_it_is(model):
    """A clip that does not penetrate comes back with the very same arrays and no change."""
    clip = clip_from_qpos(walking_qpos(20), model=model)
    result = clean_clip(clip, model)
    assert result.rounds == 0 and not result.frames_touched.any()
    for key in KEYS[1:]:
        assert getattr(result.clip, key) is getattr(clip, key)


def test_penetration_the_arms_cannot_fix_is_left_and_reported(model):
    """Crossed legs are no arm's: cleaning changes nothing and reports the legs' penetration as remaining."""
    clip = clip_from_qpos(crossed_legs_qpos(10), model=model)
    result = clean_clip(clip, model)
    assert not result.frames_touched.any()
    assert result.after.frames.all() and ("left_thigh_collision", "right_thigh_collision") in result.after.pairs


def test_the_filters_hold_the_largest_correction_and_keep_a_constant():
    """signed_max_filter keeps the sign of the largest magnitude nearby; gaussian_filter keeps constants and mass."""
    x = np.zeros((11, 2))
    x[5] = (-0.3, 0.2)
    x[6, 1] = 0.25
    held = signed_max_filter(x, 2)
    np.testing.assert_array_equal(held[3:8, 0], -0.3)
    np.testing.assert_array_equal(held[[2, 8], 0], 0.0)
    np.testing.assert_array_equal(held[4:9, 1], 0.25)
    np.testing.assert_allclose(gaussian_filter(np.full((9, 1), 0.7), 2.0), 0.7)
    spike = np.zeros((41, 1))
    spike[20] = 1.0
    smoothed = gaussian_filter(spike, 2.0)
    assert smoothed.sum() == pytest.approx(1.0) and smoothed[20, 0] == smoothed.max() < 0.25
