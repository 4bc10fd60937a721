"""g1_velocity_flat: the task against mjlab's Velocity-Flat-Unitree-G1 numbers, on real MuJoCo.

The references are the configuration's numbers written here (weights, kernels, sigma tables,
ranges, thresholds) and hand-built states; plain MuJoCo on the robot model gives the few
kinematic quantities (foot site heights, angular momentum) that have no closed form.
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
from collector.envs.g1.velocity import CRITIC_SLICES, OBS_SLICES, count_self_collisions
from common.task_spec import TASK_SPECS

TASK = "g1_velocity_flat"
DT = 0.02
HOME = np.array(g1_model.load_facts()["home_keyframe"]["qpos"])
DEFAULT = HOME[7:]
JOINTS = g1_model.joint_names()
IMU_POS = np.array([0.04525, 0.0, -0.08339])  # imu_in_pelvis
ATOL = 1e-5  # observations are float32
TERMS = ("track_linear_velocity", "track_angular_velocity", "upright", "pose", "body_ang_vel", "angular_momentum",
         "dof_pos_limits", "action_rate_l2", "air_time", "foot_clearance", "foot_swing_height", "foot_slip",
         "soft_landing", "self_collisions")
# Posture sigma per joint kind (TASKS.md section 1).
WALK = {"hip_pitch": 0.3, "hip_roll": 0.15, "hip_yaw": 0.15, "knee": 0.35, "ankle_pitch": 0.25, "ankle_roll": 0.1,
        "waist_yaw": 0.2, "waist_roll": 0.08, "waist_pitch": 0.1, "shoulder_pitch": 0.15, "shoulder_roll": 0.15,
        "shoulder_yaw": 0.1, "elbow": 0.15, "wrist_roll": 0.3, "wrist_pitch": 0.3, "wrist_yaw": 0.3}
RUN = {"hip_pitch": 0.5, "hip_roll": 0.2, "hip_yaw": 0.2, "knee": 0.6, "ankle_pitch": 0.35, "ankle_roll": 0.15,
       "waist_yaw": 0.3, "waist_roll": 0.08, "waist_pitch": 0.2, "shoulder_pitch": 0.5, "shoulder_roll": 0.2,
       "shoulder_yaw": 0.15, "elbow": 0.35, "wrist_roll": 0.3, "wrist_pitch": 0.3, "wrist_yaw": 0.3}


def _kind(name: str) -> str:
    return name.removesuffix("_joint").removeprefix("left_").removeprefix("right_")


def _env(n: int, seed: int = 0, noise: bool = False):
    e = make_env(TASK, n, 1, seed=seed)
    e.noise = noise
    e.reset()
    return e


def _state(n: int, z: float = 1.5, quat=(1, 0, 0, 0)) -> tuple[np.ndarray, np.ndarray]:
    """n copies of the default pose at height z (1.5 m: clear of the floor) and orientation, at rest."""
    qpos = np.tile(HOME, (n, 1))
    qpos[:, 2] = z
    qpos[:, 3:7] = quat
    return qpos, np.zeros((n, 35))


def _set(e, qpos, qvel, commands=None):
    """Load a state (resets the foot data) and optionally plain commands; returns (obs, critic)."""
    e.set_state(qpos, qvel)
    if commands is not None:
        e.set_commands(np.asarray(commands, float))
    return e.observe()


# ------------------------------------------------------------------- spec


def test_spec_dims_match_the_environment_arrays():
    """TaskSpec says 99/111/29, 1000 steps, 0.02 s, the 14 terms; the env's arrays, dt and terms agree."""
    spec = TASK_SPECS[TASK]
    assert (spec.obs_dim, spec.critic_dim, spec.act_dim, spec.max_episode_steps) == (99, 111, 29, 1000)
    assert spec.control_dt == DT and spec.reward_terms == TERMS
    e = _env(3)
    assert e.dt == pytest.approx(DT) and e.model.opt.timestep == 0.005 and e.frame_skip == 4
    assert e.max_episode_steps == 1000
    obs, critic = e.observe()
    assert obs.shape == (3, 99) and critic.shape == (3, 111) and obs.dtype == critic.dtype == np.float32
    res = e.step(np.zeros((3, 29), np.float32))
    assert tuple(res.terms) == TERMS and all(t.shape == (3,) and t.dtype == np.float32 for t in res.terms.values())
    np.testing.assert_allclose(res.rewards, sum(res.terms.values()), rtol=1e-5, atol=1e-7)
    assert sum(s.stop - s.start for s in OBS_SLICES.values()) == 99
    assert sum(s.stop - s.start for s in CRITIC_SLICES.values()) == 12
    e.close()


# ------------------------------------------------------------ observation


def test_actor_observation_blocks_on_a_hand_built_state():
    """IMU velocities, projected gravity of a known tilt, biased joint offsets, joint velocities, action, command."""
    e = _env(3)
    quats = [quat([1, 0, 0], math.radians(30)), quat([0, 1, 0], math.radians(30)), quat([0.3, -0.5, 0.8], 1.1)]
    qpos, qvel = _state(3)
    qpos[:, 3:7] = quats
    offsets = np.linspace(-0.2, 0.2, 29)
    qpos[:, 7:] += offsets
    qvel[:, :3] = [[0.4, -0.1, 0.2], [0.0, 0.3, 0.0], [-0.2, 0.5, 0.1]]
    qvel[:, 3:6] = [[0.3, -0.2, 0.1], [1.0, 0.0, 0.0], [-0.4, 0.7, 2.0]]
    qvel[:, 6:] = np.linspace(1.5, -1.5, 29)
    commands = [[0.5, -0.2, 0.3], [0.0, 0.0, 0.0], [-1.0, 1.0, -0.5]]
    obs, critic = _set(e, qpos, qvel, commands)
    np.testing.assert_allclose(obs[:2, OBS_SLICES["projected_gravity"]],
                               [[0, -0.5, -math.sqrt(3) / 2], [0.5, 0, -math.sqrt(3) / 2]], atol=ATOL)
    np.testing.assert_allclose(obs[2, OBS_SLICES["projected_gravity"]], rot(quats[2]).T @ [0, 0, -1], atol=ATOL)
    np.testing.assert_allclose(obs[:, OBS_SLICES["base_ang_vel"]], qvel[:, 3:6], atol=ATOL)
    for i in range(3):  # velocimeter at the IMU site: R^T v + w x r
        expected = rot(quats[i]).T @ qvel[i, :3] + np.cross(qvel[i, 3:6], IMU_POS)
        np.testing.assert_allclose(obs[i, OBS_SLICES["base_lin_vel"]], expected, atol=ATOL)
    np.testing.assert_allclose(obs[:, OBS_SLICES["joint_pos"]], offsets + e.encoder_bias, atol=ATOL)
    np.testing.assert_allclose(critic[:, OBS_SLICES["joint_pos"]], np.tile(offsets, (3, 1)), atol=ATOL)
    np.testing.assert_allclose(obs[:, OBS_SLICES["joint_vel"]], qvel[:, 6:], atol=ATOL)
    assert not obs[:, OBS_SLICES["actions"]].any()
    np.testing.assert_allclose(obs[:, OBS_SLICES["command"]], commands, atol=ATOL)
    actions = np.tile(np.linspace(-3, 3, 29), (3, 1)).astype(np.float32)  # no clipping: +-3 stays
    res = e.step(actions)
    np.testing.assert_array_equal(res.obs[:, OBS_SLICES["actions"]], actions)
    e.close()


def test_critic_is_noise_free_and_adds_foot_height_air_time_contact_and_log_forces():
    """Critic = unbiased clean terms, then foot site heights, air times, contacts, sign(f)*log(1+|f|)."""
    e = _env(2)
    qpos, qvel = _state(2, z=1.2)
    _, c = _set(e, qpos, qvel)
    m = g1_model.build_model()
    d = mujoco.MjData(m)
    d.qpos[:] = qpos[0]
    mujoco.mj_forward(m, d)
    feet_z = [d.site("left_foot").xpos[2], d.site("right_foot").xpos[2]]
    np.testing.assert_allclose(c[:, CRITIC_SLICES["foot_height"]], [feet_z] * 2, atol=ATOL)
    assert not c[:, CRITIC_SLICES["foot_air_time"]].any()  # zero after a reset
    res = e.step(np.zeros((2, 29), np.float32))  # one step of free fall: 4 substeps in the air
    c = res.critic
    np.testing.assert_allclose(c[:, CRITIC_SLICES["foot_air_time"]], 0.02, atol=1e-7)
    assert not c[:, CRITIC_SLICES["foot_contact"]].any() and not c[:, CRITIC_SLICES["foot_contact_forces"]].any()
    e.foot_force[:] = [[[0.0, 3.0, -250.0], [-1.0, 0.0, 80.0]]] * 2
    e.foot_contact[:] = [True, False]
    e.refresh()
    _, c = e.observe()
    expected = [0, math.log(4.0), -math.log(251.0), -math.log(2.0), 0, math.log(81.0)]
    np.testing.assert_allclose(c[:, CRITIC_SLICES["foot_contact_forces"]], [expected] * 2, rtol=1e-6)
    np.testing.assert_array_equal(c[:, CRITIC_SLICES["foot_contact"]], [[1, 0]] * 2)
    e.close()


def test_noise_is_uniform_within_the_bounds_on_the_actor_only():
    """With noise on, actor - clean lies within +-0.5/0.2/0.05/0.01/1.5 per block and fills it; critic is clean."""
    e = _env(256, noise=True)
    qpos, qvel = _state(256)
    qvel[:, 6:] = 0.7
    noisy, critic_noisy = _set(e, qpos, qvel, np.tile([0.5, 0.1, -0.2], (256, 1)))
    e.noise = False
    e.refresh()
    clean, critic_clean = e.observe()
    np.testing.assert_array_equal(critic_noisy, critic_clean)
    diff = noisy.astype(float) - clean
    assert_uniform_noise(diff, OBS_SLICES, {"base_lin_vel": 0.5, "base_ang_vel": 0.2, "projected_gravity": 0.05,
                                            "joint_pos": 0.01, "joint_vel": 1.5})
    assert not diff[:, OBS_SLICES["actions"]].any() and not diff[:, OBS_SLICES["command"]].any()
    e.close()


# ---------------------------------------------------------------- actions


def test_action_scale_per_joint_group_and_the_biased_target():
    """scale = 0.5475 (7520-14), 0.3507 (7520-22), 0.4386 (5020, 2x5020), 0.0745 (4010); ctrl = a*s + q0 - bias."""
    e = _env(2)
    group = {"hip_pitch": 0.5475, "hip_yaw": 0.5475, "waist_yaw": 0.5475, "hip_roll": 0.3507, "knee": 0.3507,
             "shoulder_pitch": 0.4386, "shoulder_roll": 0.4386, "shoulder_yaw": 0.4386, "elbow": 0.4386,
             "wrist_roll": 0.4386, "waist_roll": 0.4386, "waist_pitch": 0.4386, "ankle_pitch": 0.4386,
             "ankle_roll": 0.4386, "wrist_pitch": 0.0745, "wrist_yaw": 0.0745}
    expected = np.array([group[_kind(j)] for j in JOINTS])
    np.testing.assert_allclose(e.action_scale, expected, atol=5e-5)
    a = np.random.default_rng(0).uniform(-2, 2, (2, 29)).astype(np.float32)
    e.step(a)
    np.testing.assert_allclose(e._ctrl, a * e.action_scale + DEFAULT - e.encoder_bias, rtol=0, atol=1e-12)
    assert np.all(np.abs(e.encoder_bias) <= 0.015) and np.ptp(e.encoder_bias[:, 0]) > 0
    e.close()


def test_each_env_runs_its_target_friction_and_torso_com_exactly_over_4_substeps():
    """An env's trajectory equals plain MuJoCo (its foot friction, torso CoM, held target, 4 x 0.005 s) bit for bit."""
    e = _env(3, seed=5)
    start_q, start_v = e.qpos.copy(), e.qvel.copy()
    actions = np.random.default_rng(1).uniform(-1, 1, (6, 3, 29)).astype(np.float32)
    for a in actions:
        res = e.step(a)
        assert not res.terminated.any()
    for i in range(3):
        m = g1_model.build_model()
        for g in range(m.ngeom):
            name = m.geom(g).name
            if name.startswith(("left_foot", "right_foot")) and name.endswith("_collision"):
                m.geom_friction[g, 0] = e.foot_friction[i]
        m.body_ipos[m.body("torso_link").id] += e.torso_com_offset[i]
        d = mujoco.MjData(m)
        d.qpos[:], d.qvel[:] = start_q[i], start_v[i]
        for a in actions[:, i]:
            d.ctrl[:] = a.astype(np.float64) * e.action_scale + DEFAULT - e.encoder_bias[i]
            mujoco.mj_step(m, d, nstep=4)
        np.testing.assert_array_equal(e.qpos[i], d.qpos)
        np.testing.assert_array_equal(e.qvel[i], d.qvel)
    e.close()


# ---------------------------------------------------------------- rewards


def test_tracking_kernels_at_zero_and_known_error_in_the_base_frame():
    """track_linear/angular: 2.0*dt*exp(-e/0.25) and 2.0*dt*exp(-e/0.5), e from pelvis-frame velocities."""
    e = _env(3)
    yaw = 0.7
    qpos, qvel = _state(3, quat=quat([0, 0, 1], yaw))
    c, s = math.cos(yaw), math.sin(yaw)
    v_body = np.array([[0.8, -0.3, 0.0], [0.5, 0.0, 0.2], [0.0, 0.0, 0.0]])
    qvel[:, :3] = v_body @ np.array([[c, s, 0], [-s, c, 0], [0, 0, 1]])  # world = R v_body
    qvel[:, 3:6] = [[0.0, 0.0, 0.4], [0.1, 0.2, 0.3], [0.0, 0.0, 0.0]]
    _set(e, qpos, qvel, [[0.8, -0.3, 0.4], [0.0, 0.0, 0.5], [0.0, 0.0, 0.0]])
    terms, _ = e.evaluate()
    np.testing.assert_allclose(terms["track_linear_velocity"], [0.04, 0.04 * math.exp(-0.29 / 0.25), 0.04],
                               rtol=1e-9)
    np.testing.assert_allclose(terms["track_angular_velocity"], [0.04, 0.04 * math.exp(-0.09 / 0.5), 0.04],
                               rtol=1e-9)
    e.close()


def test_upright_body_ang_vel_angular_momentum_and_air_time():
    """upright 1.0*dt*exp(-sin^2(tilt)/0.2); body_ang_vel -0.05*dt*|w_xy|^2; angular_momentum -0.02*dt*|L|^2."""
    e = _env(2)
    tilt = math.radians(25)
    qpos, qvel = _state(2, quat=quat([0, 1, 0], tilt))
    qpos[1, 3:7] = quat([0, 0, 1], 1.2)
    qvel[:, 3:6] = [0.3, -0.4, 0.5]  # pelvis frame; joints at rest: the whole robot turns rigidly
    _set(e, qpos, qvel, np.zeros((2, 3)))
    terms, _ = e.evaluate()
    np.testing.assert_allclose(terms["upright"], [0.02 * math.exp(-math.sin(tilt) ** 2 / 0.2), 0.02], rtol=1e-9)
    w_world = [rot(qpos[i, 3:7]) @ qvel[i, 3:6] for i in range(2)]
    np.testing.assert_allclose(terms["body_ang_vel"], [-0.05 * DT * (w[0] ** 2 + w[1] ** 2) for w in w_world],
                               rtol=1e-9)
    expected = []
    for i in range(2):
        m = g1_model.build_model()
        m.body_ipos[m.body("torso_link").id] += e.torso_com_offset[i]  # this env's randomised CoM
        d = mujoco.MjData(m)
        d.qpos[:], d.qvel[:] = qpos[i], qvel[i]
        mujoco.mj_forward(m, d)
        mujoco.mj_subtreeVel(m, d)
        expected.append(-0.02 * DT * np.sum(d.subtree_angmom[m.body("pelvis").id] ** 2))
    np.testing.assert_allclose(terms["angular_momentum"], expected, rtol=1e-9)
    assert expected[0] < 0 and not terms["air_time"].any()  # air_time: weight 0 for the G1
    e.close()


@pytest.mark.parametrize("speed_cmd, table", [([0.0, 0.0, 0.0], None), ([0.6, 0.8, 0.0], WALK),
                                              ([1.2, -1.6, 0.0], RUN), ([0.0, 0.0, 0.049], None),
                                              ([0.0, 0.03, 0.02], WALK), ([1.0, 0.0, 0.5], RUN)])
def test_posture_sigma_regime_by_command_speed(speed_cmd, table):
    """pose = dt*exp(-mean((q-q0)^2/sigma^2)): sigma 0.05 for s < 0.05, walking table below 1.5, running from 1.5."""
    e = _env(1)
    qpos, qvel = _state(1)
    dq = np.linspace(-0.12, 0.1, 29)
    qpos[:, 7:] += dq
    _set(e, qpos, qvel, [speed_cmd])
    terms, _ = e.evaluate()
    sigma = np.full(29, 0.05) if table is None else np.array([table[_kind(j)] for j in JOINTS])
    np.testing.assert_allclose(terms["pose"], DT * math.exp(-np.mean(dq ** 2 / sigma ** 2)), rtol=1e-9)
    e.close()


def test_dof_pos_limits_beyond_the_soft_limits_of_0_9_times_the_range():
    """dof_pos_limits = -1.0*dt*sum of the distances beyond mid +- 0.45*range; zero inside."""
    e = _env(2)
    qpos, qvel = _state(2)
    knee, ankle = JOINTS.index("left_knee_joint"), JOINTS.index("right_ankle_roll_joint")
    knee_lo, knee_hi = -0.087267, 2.8798
    ankle_lo, ankle_hi = -0.2618, 0.2618
    knee_soft_hi = (knee_lo + knee_hi) / 2 + 0.45 * (knee_hi - knee_lo)
    ankle_soft_lo = -0.45 * (ankle_hi - ankle_lo)
    qpos[0, 7 + knee] = 2.8
    qpos[0, 7 + ankle] = -0.25
    qpos[1, 7 + knee] = knee_soft_hi - 0.01
    _set(e, qpos, qvel)
    terms, _ = e.evaluate()
    excess = (2.8 - knee_soft_hi) + (ankle_soft_lo - -0.25)
    np.testing.assert_allclose(terms["dof_pos_limits"], [-DT * excess, 0.0], rtol=1e-9, atol=1e-15)
    e.close()


def test_action_rate_from_two_consecutive_raw_actions():
    """action_rate_l2 = -0.1*dt*|a_t - a_{t-1}|^2 on raw (unclipped) actions, a_0 = 0 after a reset."""
    e = _env(2)
    _set(e, *_state(2))
    rng = np.random.default_rng(3)
    a1, a2 = rng.uniform(-5, 5, (2, 2, 29)).astype(np.float32)
    res = e.step(a1)
    np.testing.assert_allclose(res.terms["action_rate_l2"], -0.1 * DT * (a1.astype(float) ** 2).sum(1), rtol=1e-6)
    res = e.step(a2)
    np.testing.assert_allclose(res.terms["action_rate_l2"], -0.1 * DT * ((a2 - a1).astype(float) ** 2).sum(1),
                               rtol=1e-6)
    e.close()


def test_foot_terms_apply_only_when_the_command_is_active():
    """foot_slip, foot_clearance, foot_swing_height, soft_landing: their formulas when |cmd_xy|+|wz| > 0.05, else 0."""
    e = _env(4)
    qpos, qvel = _state(4, z=0.9)
    v = np.array([0.6, -0.8, 0.1])
    qvel[:, :3] = v  # a rigid translation: both foot sites move at v
    commands = [[0.0, 0.0, 0.0], [0.04, 0.0, 0.0], [0.0, 0.03, 0.021], [0.3, 0.0, 0.2]]
    _set(e, qpos, qvel, commands)
    m = g1_model.build_model()
    d = mujoco.MjData(m)
    d.qpos[:] = qpos[0]
    mujoco.mj_forward(m, d)
    h = np.array([d.site("left_foot").xpos[2], d.site("right_foot").xpos[2]])
    e.foot_contact[:] = [True, False]
    e.first_contact[:] = [False, True]
    e.peak_height[:] = [0.3, 0.16]
    e.foot_force[:] = [[0.0, 0.0, 0.0], [30.0, 40.0, 120.0]]
    terms, _ = e.evaluate()
    active = np.array([0, 0, 1, 1])
    np.testing.assert_allclose(terms["foot_slip"], -0.1 * DT * 1.0 * active, rtol=1e-9)  # |v_xy|^2 = 1, left only
    np.testing.assert_allclose(terms["foot_clearance"], -2.0 * DT * np.abs(h - 0.1).sum() * 1.0 * active, rtol=1e-6)
    np.testing.assert_allclose(terms["foot_swing_height"], -0.25 * DT * (0.16 / 0.1 - 1) ** 2 * active, rtol=1e-9)
    np.testing.assert_allclose(terms["soft_landing"], -1e-5 * DT * 130.0 * active, rtol=1e-9)
    e.close()


def test_self_collisions_count_substeps_over_10_newtons():
    """The count is the substeps with self-contact force > 10 N; an arm pressed into the torso scores all 4."""
    np.testing.assert_array_equal(count_self_collisions(np.array([[5.0, 0.0], [11.0, 0.0], [10.0, 12.0],
                                                                  [20.0, 0.0]])), [2, 1])
    e = _env(2)
    qpos, qvel = _state(2)
    roll = JOINTS.index("left_shoulder_roll_joint")
    qpos[1, 7 + roll] = -1.0  # the left arm swung through the torso
    _set(e, qpos, qvel)
    res = e.step(np.zeros((2, 29), np.float32))
    np.testing.assert_array_equal(e.self_collision_count, [0, 4])
    np.testing.assert_allclose(res.terms["self_collisions"], [0.0, -1.0 * DT * 4], rtol=1e-6)
    e.close()


def test_first_contact_air_time_and_swing_peak_on_a_drop():
    """Dropped feet accumulate air time 0.02 s per step; touchdown is a first contact once; the peak then clears."""
    e = _env(1)
    qpos, qvel = _state(1, z=0.83)
    _set(e, qpos, qvel, [[0.5, 0.0, 0.0]])
    zero = np.zeros((1, 29), np.float32)
    landed = None
    for k in range(1, 40):
        res = e.step(zero)
        if e.foot_contact.any():
            landed = k
            break
        np.testing.assert_allclose(res.critic[0, CRITIC_SLICES["foot_air_time"]], 0.02 * k, atol=1e-6)
    assert landed is not None and e.first_contact[e.foot_contact].all()
    assert (e.peak_height[e.first_contact] == 0).all()  # cleared after the reward saw it
    assert res.terms["foot_swing_height"][0] < 0 and res.terms["soft_landing"][0] < 0
    for _ in range(2):
        e.step(zero)
    assert (e.foot_contact & ~e.first_contact).any()  # a foot still down is no longer a first contact
    e.close()


# ----------------------------------------------------------- termination


def test_termination_beyond_70_degrees_of_tilt():
    """69 (and 69.9) degrees about any horizontal axis do not terminate, 71 (and 70.1) do; a terminated env restarts."""
    e = _env(4)
    qpos, qvel = _state(4)
    axes, degs = [[1, 0, 0], [1, 1, 0], [0, 1, 0], [-1, 2, 0]], [69, 69.9, 70.1, 71]
    for i, (a, deg) in enumerate(zip(axes, degs, strict=True)):
        tilt = quat(a, math.radians(deg))
        yaw = quat([0, 0, 1], 0.5 + i)
        w1, v1, w2, v2 = yaw[0], yaw[1:], tilt[0], tilt[1:]
        qpos[i, 3:7] = np.concatenate([[w1 * w2 - v1 @ v2], w1 * v2 + w2 * v1 + np.cross(v1, v2)])
    _set(e, qpos, qvel)
    _, terminated = e.evaluate()
    np.testing.assert_array_equal(terminated, [False, False, True, True])
    qpos[:, 3:7] = [quat([1, 0, 0], math.radians(d)) for d in (60, 65, 75, 80)]
    _set(e, qpos, qvel)
    res = e.step(np.zeros((4, 29), np.float32))
    np.testing.assert_array_equal(res.terminated, [False, False, True, True])
    assert not res.truncated.any()
    np.testing.assert_array_equal(e._steps, [1, 1, 0, 0])
    assert 0.77 <= e.qpos[2, 2] <= 0.81 and res.final_obs[2, 8] > -0.5  # final obs still tilted
    e.close()


# ---------------------------------------------------------------- command


def test_command_mix_fractions_timer_and_forward_only_values():
    """Over 20000 resamples: 10% standing, 30% heading, 20% forward-only (vx >= 0.3, vy = wz = 0), timer U(3, 8)."""
    e = _env(1000, seed=2)
    ids = np.arange(1000)
    flags, timers, fwd_cmds = [], [], []
    for _ in range(20):
        e._resample_commands(ids)
        flags.append(np.stack([e.is_standing, e.is_heading, e.is_forward]).copy())
        timers.append(e.command_time_left.copy())
        fwd_cmds.append(e.commands[e.is_forward].copy())
    frac = np.concatenate(flags, axis=1).mean(axis=1)
    np.testing.assert_allclose(frac, [0.1, 0.3, 0.2], atol=4 * math.sqrt(0.25 / 20000))
    t = np.concatenate(timers)
    assert t.min() >= 3.0 and t.max() <= 8.0 and abs(t.mean() - 5.5) < 0.05
    f = np.concatenate(fwd_cmds)
    assert np.all(f[:, 0] >= 0.3) and not f[:, 1:].any()
    assert abs(np.mean(f[:, 0] <= 0.3 + 1e-12) - 0.3) < 0.03  # |vx| < 0.3 for 30% of U(-1, 1)
    e._update_commands(slice(None))
    assert not e.commands[e.is_standing].any()
    e.close()


def test_heading_control_sets_wz_from_the_wrapped_heading_error():
    """Heading envs get wz = clip(0.5 * wrap(target - heading), -0.5, 0.5) after each step; standing envs 0."""
    e = _env(3)
    yaws = [0.2, -3.0, 0.0]
    qpos, qvel = _state(3)
    qpos[:, 3:7] = [quat([0, 0, 1], y) for y in yaws]
    _set(e, qpos, qvel, [[0.5, 0.0, 0.1], [0.5, 0.0, 0.1], [0.5, 0.0, 0.1]])
    e.heading_target[:] = [0.5, 3.0, 2.0]
    e.is_heading[:] = True
    e.command_time_left[:] = 5.0
    e.step(np.zeros((3, 29), np.float32))
    q = e.qpos[:, 3:7]
    heading = np.arctan2(2 * (q[:, 0] * q[:, 3] + q[:, 1] * q[:, 2]), 1 - 2 * (q[:, 2] ** 2 + q[:, 3] ** 2))
    err = (e.heading_target - heading + math.pi) % (2 * math.pi) - math.pi
    np.testing.assert_allclose(e.commands[:, 2], np.clip(0.5 * err, -0.5, 0.5), atol=1e-12)
    assert e.commands[1, 2] == pytest.approx(0.5 * (6.0 - 2 * math.pi), abs=0.01)  # wrapped: -0.14, not +3.0
    assert e.commands[2, 2] == 0.5  # clipped
    e.is_standing[0] = True
    e.step(np.zeros((3, 29), np.float32))
    assert not e.commands[0].any()
    e.close()


@pytest.mark.parametrize("step, vx, wz", [(119_999, (-1.0, 1.0), (-0.5, 0.5)), (120_000, (-1.5, 2.0), (-0.7, 0.7)),
                                          (240_000, (-2.0, 3.0), (-0.7, 0.7))])
def test_curriculum_ranges_switch_at_120000_and_240000_env_steps(step, vx, wz):
    """Resampled vx and wz span the stage's ranges at the global step counter; vy stays (-1, 1)."""
    e = _env(2000, seed=3)
    e.global_step = step
    e._resample_commands(np.arange(2000))
    free = ~e.is_forward & ~e.is_standing & ~e.is_heading
    c = e.commands[free]
    for col, (lo, hi) in ((0, vx), (1, (-1.0, 1.0)), (2, wz)):
        assert c[:, col].min() >= lo and c[:, col].max() <= hi
        assert c[:, col].min() < lo + 0.05 * (hi - lo) and c[:, col].max() > hi - 0.05 * (hi - lo)
    e.close()


def test_global_step_counts_vectorized_steps():
    """The curriculum counter advances by one per step() of the whole batch."""
    e = _env(3)
    for _ in range(5):
        e.step(np.zeros((3, 29), np.float32))
    assert e.global_step == 5
    e.close()


# ---------------------------------------------------------- reset and DR


def test_reset_ranges():
    """Root x, y U(-0.5, 0.5), z 0.76 + U(0.01, 0.05), yaw U(-3.14, 3.14) only; default joints; everything at rest."""
    n = 1000
    e = _env(n, seed=8)
    q, v = e.qpos, e.qvel
    assert np.all(np.abs(q[:, :2]) <= 0.5) and np.abs(q[:, :2]).mean() == pytest.approx(0.25, rel=0.06)
    assert q[:, 2].min() >= 0.77 and q[:, 2].max() <= 0.81 and q[:, 2].mean() == pytest.approx(0.79, abs=0.002)
    assert np.all(np.abs(q[:, 4:6]) < 1e-15)
    yaw = 2 * np.arctan2(q[:, 6], q[:, 3])
    assert np.abs(yaw).max() <= 3.14 and np.abs(yaw).max() > 3.0
    np.testing.assert_array_equal(q[:, 7:], np.tile(DEFAULT, (n, 1)))
    assert not v.any() and not e.last_actions.any()
    e.close()


def test_domain_randomisation_ranges_are_drawn_per_env():
    """Foot friction U(0.3, 1.2) on all 14 capsules, bias U(+-0.015), torso CoM U(+-.025, +-.025, +-.03), per env."""
    n = 500
    e = _env(n, seed=9)
    m = e.model
    friction = e._sim.expand("geom_friction").reshape(n, m.ngeom, 3)
    feet = [g for g in range(m.ngeom) if m.geom(g).name.startswith(("left_foot", "right_foot"))
            and m.geom(g).name.endswith("_collision")]
    assert len(feet) == 14
    np.testing.assert_array_equal(friction[:, feet, 0], np.repeat(e.foot_friction[:, None], 14, axis=1))
    others = [g for g in range(m.ngeom) if g not in feet]
    np.testing.assert_array_equal(friction[:, others], np.broadcast_to(m.geom_friction[others], (n, len(others), 3)))
    for values, lo, hi in ((e.foot_friction, 0.3, 1.2), (e.encoder_bias, -0.015, 0.015),
                           (e.torso_com_offset[:, 0], -0.025, 0.025), (e.torso_com_offset[:, 1], -0.025, 0.025),
                           (e.torso_com_offset[:, 2], -0.03, 0.03)):
        assert values.min() >= lo and values.max() <= hi
        assert np.std(values) == pytest.approx((hi - lo) / math.sqrt(12), rel=0.1)
    assert len(np.unique(e.foot_friction)) == n and len(np.unique(e.encoder_bias[:, 3])) == n
    ipos = e._sim.expand("body_ipos").reshape(n, m.nbody, 3)
    torso = m.body("torso_link").id
    np.testing.assert_allclose(ipos[:, torso], m.body_ipos[torso] + e.torso_com_offset, atol=1e-15)
    assert np.all(e.push_time_left >= 1.0) and np.all(e.push_time_left <= 3.0)
    e.close()


def test_push_adds_a_world_frame_velocity_within_the_ranges_and_redraws_its_timer():
    """Due pushes add v in (+-.5, +-.5, +-.4) and world w in (+-.52, +-.52, +-.78); timers redrawn in U(1, 3)."""
    n = 400
    e = _env(n, seed=10)
    qpos, qvel = _state(n, quat=quat([1, 2, 3], 0.8))
    _set(e, qpos, qvel)
    e.push_time_left[: n // 2] = 0.01
    e.push_time_left[n // 2:] = 2.5
    e._push()
    dv = e.qvel[:, :3].copy()
    dw = (rot(qpos[0, 3:7]) @ e.qvel[:, 3:6].T).T  # pelvis frame -> world
    half = slice(0, n // 2)
    for col, bound in enumerate((0.5, 0.5, 0.4)):
        assert np.abs(dv[half, col]).max() <= bound and np.abs(dv[half, col]).max() > 0.9 * bound
    for col, bound in enumerate((0.52, 0.52, 0.78)):
        assert np.abs(dw[half, col]).max() <= bound + 1e-12 and np.abs(dw[half, col]).max() > 0.9 * bound
    assert not e.qvel[n // 2:].any()
    assert np.all((e.push_time_left[half] >= 1.0) & (e.push_time_left[half] <= 3.0))
    obs, _ = e.observe()
    assert np.abs(obs[: n // 2, OBS_SLICES["base_lin_vel"]]).max() == 0  # the observation was not refreshed yet
    e.refresh()
    obs, _ = e.observe()
    assert np.abs(obs[: n // 2, OBS_SLICES["base_lin_vel"]]).max() > 0.3  # sensors recomputed by the push
    e.close()


def test_pushes_off_pushes_nobody_and_keeps_the_timers():
    """With `pushes` False (play mode) a due timer neither changes a velocity nor is redrawn."""
    e = _env(8, seed=10)
    qpos, qvel = _state(8)
    _set(e, qpos, qvel)
    e.pushes = False
    e.push_time_left[:] = 0.01
    e._push()
    assert not e.qvel.any() and np.all(e.push_time_left == 0.01)
    e.close()


# ------------------------------------------------------------------ batch


def test_a_batch_of_8_with_random_actions_stays_finite_and_resets_fallen_envs():
    """200 steps of uniform(-1, 1) actions: outputs finite, falls terminate and restart from the reset pose."""
    e = _env(8, seed=12, noise=True)
    rng = np.random.default_rng(4)
    fallen = 0
    for _ in range(200):
        res = e.step(rng.uniform(-1, 1, (8, 29)).astype(np.float32))
        for arr in (res.obs, res.critic, res.final_obs, res.final_critic, res.rewards):
            assert np.isfinite(arr).all()
        done = res.terminated
        if done.any():
            fallen += int(done.sum())
            assert np.all(res.final_critic[done, 8] > -math.cos(math.radians(70)))  # tilted beyond 70 degrees
            assert np.all(e._steps[done] == 0) and np.all((e.qpos[done, 2] >= 0.77) & (e.qpos[done, 2] <= 0.81))
            np.testing.assert_array_equal(e.qpos[done, 7:], np.tile(DEFAULT, (int(done.sum()), 1)))
            assert not res.obs[done][:, OBS_SLICES["actions"]].any()
    assert fallen >= 8
    e.close()


def test_step_async_gives_what_step_gives():
    """The substep loop runs the same on the background thread (step_async/step_wait) as in step()."""
    a, b = _env(4, seed=13, noise=True), _env(4, seed=13, noise=True)
    rng = np.random.default_rng(5)
    for _ in range(30):
        actions = rng.uniform(-1, 1, (4, 29)).astype(np.float32)
        ra = a.step(actions)
        b.step_async(actions)
        rb = b.step_wait()
        for name in ("obs", "critic", "rewards", "terminated", "final_obs"):
            np.testing.assert_array_equal(getattr(ra, name), getattr(rb, name))
    np.testing.assert_array_equal(a.self_collision_count, b.self_collision_count)
    a.close(), b.close()
