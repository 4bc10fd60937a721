"""g1_motion_tracking: the task against mjlab's Tracking-Flat-Unitree-G1 numbers (TASKS.md section 2), on real MuJoCo.

Every clip here is built kinematically in this file (motion.clip_from_qpos): the home pose with joint
sinusoids inside the soft limits (waist joints still, so the torso stays upright), a pelvis at the home
height moving forward at 0.5 m/s while turning at 0.3 rad/s.  The references are the configuration's
numbers written here (weights, sigmas, thresholds, ranges), hand-built robot states placed against a
known clip frame, and plain MuJoCo on the robot model for the body frames and velocities.
"""

from __future__ import annotations

import math

import mujoco
import numpy as np
import pytest
from noise_checks import assert_uniform_noise
from rotations import quat, rot

from collector.envs import make_env
from collector.envs.g1 import model as g1_model
from collector.envs.g1.motion import ClipError, clip_from_qpos, write_clip
from collector.envs.g1.tracking import CRITIC_SLICES, OBS_SLICES, TRACKED_BODIES
from common.config import load_config
from common.task_spec import TASK_SPECS

TASK = "g1_motion_tracking"
DT = 0.02
HOME = np.array(g1_model.load_facts()["home_keyframe"]["qpos"])
JOINTS = g1_model.joint_names()
HINGES = [j for j in g1_model.load_facts()["joints"] if j["type"] == "hinge"]
LIMITS = np.array([j["range"] for j in HINGES])
SOFT = np.stack([LIMITS.mean(1) - 0.45 * np.ptp(LIMITS, 1), LIMITS.mean(1) + 0.45 * np.ptp(LIMITS, 1)], 1)
TERMS = ("motion_global_root_pos", "motion_global_root_ori", "motion_body_pos", "motion_body_ori",
         "motion_body_lin_vel", "motion_body_ang_vel", "action_rate_l2", "joint_limit", "self_collisions")
WEIGHT = {"motion_global_root_pos": 0.5, "motion_global_root_ori": 0.5, "motion_body_pos": 1.0,
          "motion_body_ori": 1.0, "motion_body_lin_vel": 1.0, "motion_body_ang_vel": 1.0}
SIGMA = {"motion_global_root_pos": 0.3, "motion_global_root_ori": 0.4, "motion_body_pos": 0.3,
         "motion_body_ori": 0.4, "motion_body_lin_vel": 1.0, "motion_body_ang_vel": 3.14}
ANCHOR = TRACKED_BODIES.index("torso_link")
WAIST = [JOINTS.index(j) for j in JOINTS if j.startswith("waist")]  # held still: the torso's pose is the pelvis's
LIMBS = np.array([j not in WAIST for j in range(29)])
FRAMES = 250  # 5 s: floor(250 / 50) + 1 = 6 adaptive-sampling bins
F = 100  # the clip frame the hand-built states are placed against
ATOL = 1e-5  # observations are float32


def trajectory(frames: int = FRAMES, amplitude: float = 0.3) -> np.ndarray:
    """[frames, 36] qpos of the test motion (see the module docstring)."""
    t = np.arange(frames) * DT
    heading = 0.3 * t
    qpos = np.tile(HOME, (frames, 1))
    qpos[:, 0], qpos[:, 1] = np.sin(heading) / 0.6, (1 - np.cos(heading)) / 0.6  # 0.5 m/s on a circle
    qpos[:, 3], qpos[:, 6] = np.cos(heading / 2), np.sin(heading / 2)
    home = HOME[7:]
    amp = np.minimum(amplitude, 0.4 * np.minimum(home - SOFT[:, 0], SOFT[:, 1] - home))
    amp[WAIST] = 0.0
    qpos[:, 7:] = home + amp * np.sin(2 * np.pi * 1.0 * t[:, None] + np.arange(29))
    return qpos


@pytest.fixture(scope="module")
def clip_path(tmp_path_factory):
    path = tmp_path_factory.mktemp("clips") / "walk_turn.npz"
    write_clip(path, clip_from_qpos(trajectory()))
    return str(path)


def _env(path: str, n: int, seed: int = 0, noise: bool = False, **kwargs):
    """An env with observation noise, initialisation noise and pushes off unless `noise`."""
    e = make_env(TASK, n, 1, seed=seed, motion_file=path, **kwargs)
    e.noise = e.init_noise = e.pushes = noise
    e.reset()
    return e


def _place(e, qpos: np.ndarray, qvel: np.ndarray | None = None, frame: int = F):
    """Show clip `frame` and load the robot state (rows broadcast); returns (obs, critic)."""
    n = e.num_envs
    e.frame[:] = frame
    e.set_state(np.broadcast_to(qpos, (n, 36)), np.zeros((n, 35)) if qvel is None else np.broadcast_to(qvel, (n, 35)))
    return e.observe()


def _fk(qpos: np.ndarray, qvel: np.ndarray | None = None):
    """Plain MuJoCo: frames (pos, quat) and world velocities (lin, ang) of the 14 tracked bodies."""
    m = g1_model.build_model()
    d = mujoco.MjData(m)
    d.qpos[:] = qpos
    d.qvel[:] = 0 if qvel is None else qvel
    mujoco.mj_forward(m, d)
    ids = [m.body(b).id for b in TRACKED_BODIES]
    vel = np.zeros((14, 6))
    for k, i in enumerate(ids):
        mujoco.mj_objectVelocity(m, d, mujoco.mjtObj.mjOBJ_XBODY, i, vel[k], 0)
    return d.xpos[ids].copy(), d.xquat[ids].copy(), vel[:, 3:], vel[:, :3]


def _yawed(qpos: np.ndarray, yaw: float, shift=(0.0, 0.0, 0.0)) -> np.ndarray:
    """qpos turned by `yaw` about the world z axis through the origin, then translated by `shift`."""
    q = qpos.copy()
    r = rot(quat([0, 0, 1], yaw))
    q[:3] = r @ qpos[:3] + shift
    w1, v1, w2, v2 = math.cos(yaw / 2), np.array([0, 0, math.sin(yaw / 2)]), qpos[3], qpos[4:7]
    q[3:7] = np.concatenate([[w1 * w2 - v1 @ v2], w1 * v2 + w2 * v1 + np.cross(v1, v2)])
    return q


def _kernel(name: str, error: float) -> float:
    return WEIGHT[name] * DT * math.exp(-error / SIGMA[name] ** 2)


# ------------------------------------------------------------------- spec


def test_spec_dims_match_the_environment_arrays(clip_path):
    """TaskSpec says 160/286/29, 500 steps (10 s), 0.02 s, the 9 terms; the env's arrays, dt and terms agree."""
    spec = TASK_SPECS[TASK]
    assert (spec.obs_dim, spec.critic_dim, spec.act_dim, spec.max_episode_steps) == (160, 286, 29, 500)
    assert spec.control_dt == DT and spec.reward_terms == TERMS
    e = _env(clip_path, 3)
    assert e.dt == pytest.approx(DT) and e.frame_skip == 4 and e.max_episode_steps == 500
    obs, critic = e.observe()
    assert obs.shape == (3, 160) and critic.shape == (3, 286) and obs.dtype == critic.dtype == np.float32
    res = e.step(np.zeros((3, 29), np.float32))
    assert tuple(res.terms) == TERMS and all(t.shape == (3,) for t in res.terms.values())
    np.testing.assert_allclose(res.rewards, sum(res.terms.values()), rtol=1e-5, atol=1e-7)
    assert sum(s.stop - s.start for s in OBS_SLICES.values()) == 160
    assert sum(s.stop - s.start for s in CRITIC_SLICES.values()) == 286
    e.close()


def test_missing_or_bad_motion_file_is_refused_naming_the_field(tmp_path):
    """No clip, an unreadable file or a 30 fps clip: ClipError naming task_options.motion_file; the config's
    default is the seed's clip name."""
    for missing in (None, ""):
        with pytest.raises(ClipError, match=r"task_options\.motion_file"):
            make_env(TASK, 1, 1, 0, motion_file=missing)
    with pytest.raises(ClipError, match=r"task_options\.motion_file: .*nope\.npz"):
        make_env(TASK, 1, 1, 0, motion_file=str(tmp_path / "nope.npz"))
    slow = tmp_path / "slow.npz"
    write_clip(slow, clip_from_qpos(trajectory(20), fps=30.0))
    with pytest.raises(ClipError, match=r"task_options\.motion_file: .*fps is 30"):
        make_env(TASK, 1, 1, 0, motion_file=str(slow))
    assert load_config([f"task={TASK}"], environ={}).task_options.motion_file == "motions/g1/dance1_subject2_part.npz"
    cfg = load_config([f"task={TASK}", "task_options.motion_file=clip.npz"], environ={})
    assert cfg.task_options.motion_file == "clip.npz"


# ------------------------------------------------------------ observation


def test_observation_blocks_on_a_hand_built_state(clip_path):
    """Command, anchor position/orientation in the robot anchor frame, IMU, biased joints, actions; critic bodies."""
    e = _env(clip_path, 2)
    ref = trajectory()[F]
    robot = _yawed(ref, 0.4, (0.3, -0.2, 0.05))
    robot[7:] += np.linspace(-0.05, 0.05, 29) * LIMBS
    qvel = np.zeros(35)
    qvel[3:6] = [0.3, -0.2, 0.1]
    qvel[6:] = np.linspace(1.0, -1.0, 29)
    obs, critic = _place(e, robot, qvel)
    pos, q, _, _ = _fk(robot)
    ref_pos, ref_q, _, _ = _fk(ref)
    r_anchor = rot(q[ANCHOR])
    np.testing.assert_allclose(obs[:, OBS_SLICES["command"]], [np.concatenate([e.ref_joint_pos[F],
                                                                                e.ref_joint_vel[F]])] * 2, atol=ATOL)
    np.testing.assert_allclose(obs[0, OBS_SLICES["motion_anchor_pos_b"]], r_anchor.T @ (ref_pos[ANCHOR] - pos[ANCHOR]),
                               atol=ATOL)
    rel = r_anchor.T @ rot(ref_q[ANCHOR])  # the robot only yawed: a rotation about z by -0.4
    np.testing.assert_allclose(rel[:, :2].ravel(), [math.cos(0.4), math.sin(0.4), -math.sin(0.4), math.cos(0.4), 0, 0],
                               atol=1e-5)
    np.testing.assert_allclose(obs[0, OBS_SLICES["motion_anchor_ori_b"]], rel[:, :2].ravel(), atol=ATOL)
    np.testing.assert_allclose(obs[:, OBS_SLICES["base_ang_vel"]], [qvel[3:6]] * 2, atol=ATOL)
    np.testing.assert_allclose(obs[:, OBS_SLICES["joint_pos"]], robot[7:] - HOME[7:] + e.encoder_bias, atol=ATOL)
    np.testing.assert_allclose(critic[:, CRITIC_SLICES["joint_pos"]], [robot[7:] - HOME[7:]] * 2, atol=ATOL)
    np.testing.assert_allclose(obs[:, OBS_SLICES["joint_vel"]], [qvel[6:]] * 2, atol=ATOL)
    body_pos = [(r_anchor.T @ (p - pos[ANCHOR])) for p in pos]
    np.testing.assert_allclose(critic[0, CRITIC_SLICES["body_pos"]], np.ravel(body_pos), atol=ATOL)
    body_ori = [(r_anchor.T @ rot(b))[:, :2].ravel() for b in q]
    np.testing.assert_allclose(critic[0, CRITIC_SLICES["body_ori"]], np.ravel(body_ori), atol=ATOL)
    for name in ("command", "motion_anchor_pos_b", "motion_anchor_ori_b", "base_lin_vel", "base_ang_vel",
                 "joint_vel", "actions"):
        np.testing.assert_array_equal(critic[:, CRITIC_SLICES[name]], obs[:, OBS_SLICES[name]])
    actions = np.tile(np.linspace(-3, 3, 29), (2, 1)).astype(np.float32)
    res = e.step(actions)
    np.testing.assert_array_equal(res.obs[:, OBS_SLICES["actions"]], actions)
    np.testing.assert_array_equal(res.critic[:, CRITIC_SLICES["actions"]], actions)
    e.close()


def test_noise_is_uniform_within_the_bounds_on_the_actor_only(clip_path):
    """With noise on, actor - clean lies within +-0.25/0.05/0.5/0.2/0.01/0.5 per block and fills it; critic clean."""
    e = _env(clip_path, 256)
    e.noise = True
    noisy, critic_noisy = _place(e, trajectory()[F])
    e.noise = False
    e.refresh()
    clean, critic_clean = e.observe()
    np.testing.assert_array_equal(critic_noisy, critic_clean)
    diff = noisy.astype(float) - clean
    bounds = {"motion_anchor_pos_b": 0.25, "motion_anchor_ori_b": 0.05, "base_lin_vel": 0.5, "base_ang_vel": 0.2,
              "joint_pos": 0.01, "joint_vel": 0.5}
    assert_uniform_noise(diff, OBS_SLICES, bounds)
    assert not diff[:, OBS_SLICES["command"]].any() and not diff[:, OBS_SLICES["actions"]].any()
    e.close()


# ---------------------------------------------------------------- rewards


def test_tracking_terms_are_their_weight_times_dt_at_zero_error(clip_path):
    """Robot exactly at the clip frame (reference velocities = the robot's): each tracking term = weight * dt."""
    e = _env(clip_path, 1)
    ref = trajectory()[F]
    qvel = np.zeros(35)
    qvel[:3], qvel[3:6], qvel[6:] = [0.4, 0.1, -0.1], [0.2, -0.3, 0.25], np.linspace(-1, 1, 29)
    _place(e, ref, qvel)
    _, _, lin, ang = _fk(ref, qvel)
    e.ref_lin_vel[F], e.ref_ang_vel[F] = lin, ang
    terms, terminated = e.evaluate()
    for name, w in WEIGHT.items():
        assert terms[name][0] == pytest.approx(w * DT, rel=1e-6), name
    assert not terminated[0]
    assert e.anchor_pos_error[0] < 1e-6 and e.body_pos_error[0] < 1e-6 and e.joint_pos_error[0] < 1e-6
    assert e.clip_progress[0] == pytest.approx(F / (FRAMES - 1))
    e.close()


def test_tracking_kernels_at_known_errors(clip_path):
    """Known offsets give exp(-e/sigma^2): anchor shift, roll of the whole robot, velocity offsets; errors exposed."""
    e = _env(clip_path, 1)
    ref = trajectory()[F]
    shift = np.array([0.1, -0.2, 0.05])
    _place(e, _yawed(ref, 0.0, shift))
    _, _, lin, ang = _fk(ref)
    dv, dw = np.array([0.3, -0.4, 0.0]), np.array([1.0, 0.5, -2.0])
    e.ref_lin_vel[F], e.ref_ang_vel[F] = lin + dv, ang + dw  # the robot is at rest
    terms, _ = e.evaluate()
    assert terms["motion_global_root_pos"][0] == pytest.approx(_kernel("motion_global_root_pos", 0.0525), rel=1e-5)
    # Re-anchored: the xy shift is taken out, the z shift stays for every body.
    assert terms["motion_body_pos"][0] == pytest.approx(_kernel("motion_body_pos", 0.05 ** 2), rel=1e-5)
    assert terms["motion_body_lin_vel"][0] == pytest.approx(_kernel("motion_body_lin_vel", 0.25), rel=1e-5)
    assert terms["motion_body_ang_vel"][0] == pytest.approx(_kernel("motion_body_ang_vel", 5.25), rel=1e-5)
    assert e.anchor_pos_error[0] == pytest.approx(math.sqrt(0.0525), rel=1e-5)
    assert e.body_pos_error[0] == pytest.approx(0.05, rel=1e-4)
    # A roll of the whole robot about the world x axis through its anchor: every body is 0.3 rad off.
    robot = ref.copy()
    pos, _, _, _ = _fk(ref)
    r = rot(quat([1, 0, 0], 0.3))
    robot[:3] = pos[ANCHOR] + r @ (ref[:3] - pos[ANCHOR])
    w1, v1, w2, v2 = math.cos(0.15), np.array([math.sin(0.15), 0, 0]), ref[3], ref[4:7]
    robot[3:7] = np.concatenate([[w1 * w2 - v1 @ v2], w1 * v2 + w2 * v1 + np.cross(v1, v2)])
    robot[7:] += 0.02 * LIMBS
    _place(e, robot)
    terms, _ = e.evaluate()
    assert terms["motion_global_root_ori"][0] == pytest.approx(_kernel("motion_global_root_ori", 0.09), rel=1e-4)
    assert terms["motion_body_ori"][0] < _kernel("motion_body_ori", 0.0) * 0.7  # joints moved too: below exp(-.09/.16)
    assert terms["motion_global_root_pos"][0] == pytest.approx(_kernel("motion_global_root_pos", 0.0), rel=1e-6)
    assert e.joint_pos_error[0] == pytest.approx(0.02 * math.sqrt(26), rel=1e-4)
    e.close()


def test_reanchoring_removes_the_robots_yaw_and_horizontal_offset_only(clip_path):
    """Turned about z and moved in xy, the body terms stay at their maximum while the global anchor terms drop."""
    e = _env(clip_path, 1)
    ref = trajectory()[F]
    _place(e, _yawed(ref, 0.7, (0.4, 0.3, 0.0)))
    terms, terminated = e.evaluate()
    assert terms["motion_body_pos"][0] == pytest.approx(DT, rel=1e-6)
    assert terms["motion_body_ori"][0] == pytest.approx(DT, rel=1e-6)
    assert terms["motion_global_root_ori"][0] == pytest.approx(_kernel("motion_global_root_ori", 0.49), rel=1e-5)
    pos, _, _, _ = _fk(_yawed(ref, 0.7, (0.4, 0.3, 0.0)))
    ref_pos, _, _, _ = _fk(ref)
    err = float(np.sum((pos[ANCHOR] - ref_pos[ANCHOR]) ** 2))
    assert err > 0.1 and terms["motion_global_root_pos"][0] == pytest.approx(_kernel("motion_global_root_pos", err),
                                                                              rel=1e-5)
    assert not terminated[0]  # z and tilt match: no termination however far the robot stands
    e.close()


def test_action_rate_joint_limit_and_self_collisions(clip_path):
    """action_rate -0.1*dt*|da|^2, joint_limit -10*dt*excess beyond 0.9 x range, self_collisions -10*dt*substeps."""
    e = _env(clip_path, 2)
    ref = trajectory()[F]
    _place(e, ref)
    rng = np.random.default_rng(3)
    a1, a2 = rng.uniform(-2, 2, (2, 2, 29)).astype(np.float32)
    e.step(a1)
    res = e.step(a2)
    np.testing.assert_allclose(res.terms["action_rate_l2"], -0.1 * DT * ((a2 - a1).astype(float) ** 2).sum(1),
                               rtol=1e-5)
    robot = np.tile(ref, (2, 1))
    knee = JOINTS.index("left_knee_joint")
    robot[0, 7 + knee] = SOFT[knee, 1] + 0.1
    roll = JOINTS.index("left_shoulder_roll_joint")
    robot[1, 7 + roll] = -1.0  # the left arm through the torso
    e.frame[:] = F
    e.set_state(robot, np.zeros((2, 35)))
    terms, _ = e.evaluate()
    assert terms["joint_limit"][0] == pytest.approx(-10.0 * DT * 0.1, rel=1e-6)
    res = e.step(np.zeros((2, 29), np.float32))
    np.testing.assert_array_equal(e.self_collision_count[1], 4)
    assert res.terms["self_collisions"][1] == pytest.approx(-10.0 * DT * 4, rel=1e-6)
    e.close()


# ----------------------------------------------------------- termination


@pytest.mark.parametrize("margin, ends", [(-0.01, False), (0.01, True)])
def test_terminations_just_below_and_above_their_thresholds(clip_path, margin, ends):
    """Anchor z error 0.25 m, anchor gravity-z difference 0.8, end-effector z error 0.25 m (re-anchored), each alone."""
    e = _env(clip_path, 3)
    ref = trajectory()[F]
    e.ref_pos[F, ANCHOR, 2] += 0.25 + margin  # env 0: the reference anchor higher (bodies' re-anchored z unchanged)
    _place(e, ref)
    _, terminated = e.evaluate()
    assert terminated[0] == ends
    e.ref_pos[F, ANCHOR, 2] -= 0.25 + margin
    _, q, _, _ = _fk(ref)
    robot_zz = rot(q[ANCHOR])[2, 2]
    tilt = math.acos(robot_zz - 0.8 - margin)  # reference anchor tilted: R22 differs by 0.8 + margin
    e.ref_quat[F, ANCHOR] = quat([1, 0, 0], tilt)
    _, terminated = e.evaluate()
    assert terminated[0] == ends
    e.ref_quat[F, ANCHOR] = q[ANCHOR]
    wrist = TRACKED_BODIES.index("right_wrist_yaw_link")
    e.ref_pos[F, wrist, 2] -= 0.25 + margin
    _, terminated = e.evaluate()
    assert terminated[0] == ends
    e.ref_pos[F, wrist, 2] += 0.25 + margin
    _, terminated = e.evaluate()
    assert not terminated.any()
    e.close()


def test_a_terminated_env_restarts_and_is_counted_as_a_failure_of_its_bin(clip_path):
    """Robot 0.5 m above the reference: terminated, reset at a new start frame; its bin's failure is counted."""
    e = _env(clip_path, 4)
    robot = trajectory()[F].copy()
    _place(e, robot)
    e.set_state(np.stack([robot + np.r_[0, 0, 0.5, np.zeros(33)], robot, robot, robot]), np.zeros((4, 35)))
    res = e.step(np.zeros((4, 29), np.float32))
    np.testing.assert_array_equal(res.terminated, [True, False, False, False])
    assert e._steps[0] == 0 and list(e._steps[1:]) == [1, 1, 1] and list(e.frame[1:]) == [F + 1] * 3
    assert e._bin_failures[e.bin_of(F)] == 1 and e._bin_failures.sum() == 1
    e.close()


# ---------------------------------------------------------- start frames


def test_reference_state_initialisation_places_the_robot_at_the_clip_frame(clip_path):
    """Noise off: the clip's state at the start frame s exactly (frame shown s + 1); on: within the ranges."""
    e = _env(clip_path, 500, seed=4)
    clip_q = trajectory()
    start = e.frame - 1
    assert start.min() >= 0 and start.max() <= FRAMES - 2
    np.testing.assert_allclose(e.qpos, clip_q[start], atol=2e-6)  # the clip stores float32
    np.testing.assert_allclose(e.qvel[:, 6:], e.ref_joint_vel[start], atol=1e-12)
    e.init_noise = True
    e.reset()
    start = e.frame - 1
    d = e.qpos[:, :3] - clip_q[start, :3]
    for col, bound in enumerate((0.05, 0.05, 0.01)):
        assert np.abs(d[:, col]).max() <= bound + 1e-6 and np.abs(d[:, col]).max() > 0.9 * bound
    rpy = []
    for i in range(500):  # R_delta = R_robot R_clip^T = Rz(yaw) Ry(pitch) Rx(roll)
        r = rot(e.qpos[i, 3:7]) @ rot(clip_q[start[i], 3:7]).T
        rpy.append([math.atan2(r[2, 1], r[2, 2]), -math.asin(r[2, 0]), math.atan2(r[1, 0], r[0, 0])])
    rpy = np.abs(rpy)
    np.testing.assert_array_less(rpy.max(0), [0.1 + 1e-6, 0.1 + 1e-6, 0.2 + 1e-6])
    assert np.all(rpy.max(0) > [0.09, 0.09, 0.18])
    dq = e.qpos[:, 7:] - clip_q[start, 7:]
    assert np.abs(dq).max() <= 0.1 + 1e-6 and np.abs(dq).max() > 0.09
    assert np.all(e.qpos[:, 7:] >= SOFT[:, 0] - 1e-12) and np.all(e.qpos[:, 7:] <= SOFT[:, 1] + 1e-12)
    lin = e.qvel[:, :3] - e.ref_root[2][start]
    for col, bound in enumerate((0.5, 0.5, 0.2)):
        assert np.abs(lin[:, col]).max() <= bound + 1e-6 and np.abs(lin[:, col]).max() > 0.9 * bound
    np.testing.assert_allclose(e.qvel[:, 6:], e.ref_joint_vel[start], atol=1e-12)
    e.close()


def test_adaptive_sampling_moves_probability_to_bins_where_episodes_failed(clip_path):
    """64 failures in bin 2 give score 0.001*64 there: p2 = (0.064 + 0.1/6) / (0.064 + 0.1); draws follow p."""
    e = _env(clip_path, 64, seed=5)
    assert e.num_bins == 6
    np.testing.assert_allclose(e.sampling_probabilities(), np.full(6, 1 / 6))
    frame = 2 * FRAMES // 6 + 5
    assert e.bin_of(frame) == 2
    robot = trajectory()[frame].copy()
    robot[2] += 0.5  # every env 0.5 m above its reference: all terminate
    _place(e, robot, frame=frame)
    assert e.step(np.zeros((64, 29), np.float32)).terminated.all()
    res = e.step(np.zeros((64, 29), np.float32))  # this step's score update takes in the 64 failures
    assert not res.terminated.any()
    np.testing.assert_allclose(e.bin_scores, [0, 0, 0.064, 0, 0, 0], atol=1e-12)
    expected = np.full(6, 0.1 / 6)
    expected[2] += 0.064
    np.testing.assert_allclose(e.sampling_probabilities(), expected / expected.sum(), rtol=1e-12)
    e.rng = np.random.default_rng(0)
    frames = e._sample_frames(20000)
    share = np.mean(e.bin_of(frames) == 2)
    assert share == pytest.approx(expected[2] / expected.sum(), abs=0.015)  # 0.49, against 1/6 before
    assert frames.min() >= 0 and frames.max() <= FRAMES - 2
    rng = np.random.default_rng(0)  # the same draws by the formula: floor((bin + U(0, 1)) / 6 * (T - 1))
    bins = rng.choice(6, size=20000, p=expected / expected.sum())
    np.testing.assert_array_equal(frames, np.floor((bins + rng.uniform(0, 1, 20000)) / 6 * (FRAMES - 1)))
    e.close()


def test_time_outs_are_no_failures_and_a_clip_that_runs_out_restarts_mid_episode(clip_path):
    """Episodes cut by the time limit add no failure; a running env at the last frame restarts without a reset."""
    e = _env(clip_path, 4, max_episode_steps=3)
    for _ in range(6):
        res = e.step(np.zeros((4, 29), np.float32))
        assert not res.terminated.any()
    assert res.truncated.all() and not e._bin_failures.any() and not e.bin_scores.any()
    e.close()
    e = _env(clip_path, 2)
    _place(e, trajectory()[FRAMES - 1], frame=FRAMES - 1)
    e.step(np.zeros((2, 29), np.float32))
    assert list(e._steps) == [1, 1]  # the episode goes on
    start = e.frame - 1
    assert np.all(start <= FRAMES - 2)
    np.testing.assert_allclose(e.qpos, trajectory()[start], atol=2e-6)  # teleported to the new start frame
    e.close()


# ------------------------------------------------------------ randomisation


def test_domain_randomisation_and_push_ranges(clip_path):
    """Bias U(+-0.01), torso CoM U(+-.025, +-.05, +-.05), friction U(0.3, 1.2); pushes v (+-.5, +-.5, +-.2), w (+-.52,
    +-.52, +-.78)."""
    n = 400
    e = _env(clip_path, n, seed=9)
    for values, lo, hi in ((e.foot_friction, 0.3, 1.2), (e.encoder_bias, -0.01, 0.01),
                           (e.torso_com_offset[:, 0], -0.025, 0.025), (e.torso_com_offset[:, 1], -0.05, 0.05),
                           (e.torso_com_offset[:, 2], -0.05, 0.05)):
        assert values.min() >= lo and values.max() <= hi
        assert np.std(values) == pytest.approx((hi - lo) / math.sqrt(12), rel=0.12)
    robot = trajectory()[F]
    _place(e, robot)
    e.pushes = True
    e.push_time_left[:] = 0.01
    e._push()
    dw = (rot(robot[3:7]) @ e.qvel[:, 3:6].T).T
    for values, bounds in ((e.qvel[:, :3], (0.5, 0.5, 0.2)), (dw, (0.52, 0.52, 0.78))):
        for col, bound in enumerate(bounds):
            assert np.abs(values[:, col]).max() <= bound + 1e-9 and np.abs(values[:, col]).max() > 0.9 * bound
    assert np.all((e.push_time_left >= 1.0) & (e.push_time_left <= 3.0))
    e.close()


# ----------------------------------------------------------------- replay


def test_replaying_the_clips_joint_targets_keeps_tracking_near_the_maximum(clip_path):
    """From a reference-state start (no noise, no pushes), actions (clip q - default)/scale keep the pose terms
    >= 0.95 and the velocity terms >= 0.65 of their maximum for the first 3 steps, and beat holding the default pose.

    Why these bounds: the pose kernels (sigma 0.3 m, 0.4 rad) stay near 1 while the robot is near the clip, but
    the velocity kernels (sigma 1 m/s) see two effects a replay cannot remove: the PD servos (10 Hz, damping
    ratio 2) lag targets swinging at up to ~1.9 rad/s, and this kinematic clip slides the pelvis at 0.5 m/s
    without footsteps, so the feet's friction brakes the robot (its body velocities ~0.3-0.5 m/s short, a
    kernel ~0.7).  Without a balancing policy the robot drifts off the clip after a few steps, so only 3 are
    checked (measured: pose >= 0.958, velocity >= 0.706; holding the default pose scores ~1 lower in total).
    """
    pose_terms = ("motion_global_root_pos", "motion_global_root_ori", "motion_body_pos", "motion_body_ori")
    vel_terms = ("motion_body_lin_vel", "motion_body_ang_vel")
    totals = []
    for replay in (True, False):
        e = _env(clip_path, 4, seed=6)
        total = 0.0
        for _ in range(3):
            a = (e.ref_joint_pos[e.frame] - e.default_joint_pos) / e.action_scale if replay else np.zeros((4, 29))
            res = e.step(a.astype(np.float32))
            assert not res.terminated.any()
            fraction = {name: res.terms[name] / (WEIGHT[name] * DT) for name in pose_terms + vel_terms}
            if replay:
                for name in pose_terms:
                    assert fraction[name].min() >= 0.95, name
                for name in vel_terms:
                    assert fraction[name].min() >= 0.65, name
            total += sum(f.mean() for f in fraction.values())
        totals.append(total)
        e.close()
    assert totals[0] > totals[1] + 0.5  # of 18 (6 terms x 3 steps at their maximum)
