"""go2_joystick_flat: the MJCF against the robot facts, and the task on real MuJoCo.

The task's spec is docs/design.md#go2_joystick_flat.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import mujoco
import numpy as np
import pytest
from rotations import quat, rot

from collector.envs import make_env
from collector.envs.go2 import model as go2_model
from collector.envs.go2.task import CRITIC_LINVEL, OBS_SLICES
from common.task_spec import TASK_SPECS

TASK = "go2_joystick_flat"
FACTS = json.loads((Path(go2_model.__file__).parent / "go2_facts.json").read_text())
DT = 0.02
HOME = np.array(FACTS["home_keyframe"]["qpos"])
IMU_POS = np.array(FACTS["sites"][0]["pos"])
OBS_ATOL = 1e-5  # the observation is float32


@pytest.fixture(scope="module")
def model() -> mujoco.MjModel:
    return go2_model.build_model()


@pytest.fixture
def env():
    e = make_env(TASK, 4, 2, seed=0)
    e.reset()
    yield e
    e.close()


def _state(n: int, z: float = 1.0, quat=(1, 0, 0, 0)) -> tuple[np.ndarray, np.ndarray]:
    """n copies of the home pose at height z (1 m: clear of the floor) with the given orientation, at rest."""
    qpos = np.tile(HOME, (n, 1))
    qpos[:, 2] = z
    qpos[:, 3:7] = quat
    return qpos, np.zeros((n, 18))


# ------------------------------------------------------------------- model


def test_model_compiles_with_the_facts_sizes_masses_and_inertias(model):
    """The MJCF compiles to nq=19, nv=18, nu=12 with every body's mass, COM and principal inertia of the facts."""
    assert (model.nq, model.nv, model.nu) == (19, 18, 12)
    total = sum(b["mass"] for b in FACTS["bodies"])
    assert model.body_subtreemass[1] == pytest.approx(total, rel=1e-12)
    assert model.body_mass.sum() == pytest.approx(total, rel=1e-12)
    for b in FACTS["bodies"]:
        body = model.body(b["name"])
        assert model.body(int(body.parentid[0])).name == ("world" if b["parent"] == "world" else b["parent"])
        np.testing.assert_allclose(body.pos, b["pos_in_parent"], atol=1e-12)
        assert body.mass[0] == pytest.approx(b["mass"], rel=1e-12)
        np.testing.assert_allclose(body.ipos, b["com_pos"], atol=1e-12)
        np.testing.assert_allclose(body.inertia, b["diag_inertia"], rtol=1e-9)
        q = np.array(b["inertia_quat"])
        np.testing.assert_allclose(body.iquat, q / np.linalg.norm(q), atol=1e-9)
    assert model.opt.timestep == 0.01
    assert model.opt.cone == mujoco.mjtCone.mjCONE_ELLIPTIC and model.opt.impratio == 100.0
    np.testing.assert_allclose(model.site("imu").pos, IMU_POS)
    assert model.site("imu").bodyid[0] == model.body("base").id


def test_model_joints_actuators_and_keyframe_match_the_facts(model):
    """Joint axes, ranges, damping, armature, frictionloss; actuator kp and force limits; the home keyframe."""
    for j in FACTS["joints"]:
        joint = model.joint(j["name"])
        assert model.body(int(joint.bodyid[0])).name == j["body"]
        if j["type"] == "free":
            assert joint.type[0] == mujoco.mjtJoint.mjJNT_FREE
            continue
        np.testing.assert_allclose(joint.axis, j["axis"])
        np.testing.assert_allclose(joint.range, j["range"])
        assert joint.limited[0]
        dof = int(joint.dofadr[0])
        assert model.dof_damping[dof] == j["damping"] and model.dof_armature[dof] == j["armature"]
        assert model.dof_frictionloss[dof] == j["frictionloss"]
    hinge_names = [j["name"] for j in FACTS["joints"] if j["type"] == "hinge"]
    for a in FACTS["actuators"]:
        act = model.actuator(a["name"])
        joint = model.joint(int(act.trnid[0]))
        assert joint.name == a["joint"]
        assert act.id == hinge_names.index(a["joint"])  # actuator i drives qpos joint i
        assert act.gainprm[0] == a["kp"] and act.biasprm[1] == -a["kp"]
        np.testing.assert_allclose(act.forcerange, a["forcerange"])
        assert act.forcelimited[0]
    np.testing.assert_allclose(model.key("home").qpos, FACTS["home_keyframe"]["qpos"])
    facts_ctrl = dict(zip([a["name"] for a in FACTS["actuators"]], FACTS["home_keyframe"]["ctrl"], strict=True))
    np.testing.assert_allclose(model.key("home").ctrl, [facts_ctrl[model.actuator(i).name] for i in range(12)])


def test_model_collision_geoms_sensors_and_visual_geometry(model):
    """Collision primitives keep the facts' contact parameters; the facts' sensors exist; visuals never collide."""
    sizes = {"sphere": 1, "capsule": 2, "cylinder": 2, "box": 3, "plane": 3}
    for g in FACTS["collision_geoms"]:
        geom = model.geom(g["name"])
        assert geom.type[0] == getattr(mujoco.mjtGeom, f"mjGEOM_{g['type'].upper()}")
        n = sizes[g["type"]]
        np.testing.assert_allclose(geom.size[:n], g["size_mujoco_convention"][:n])
        np.testing.assert_allclose(geom.pos, g["pos"], atol=1e-12)
        np.testing.assert_allclose(geom.friction, g["friction"])
        assert (geom.condim[0], geom.contype[0], geom.conaffinity[0]) == (g["condim"], g["contype"],
                                                                          g["conaffinity"])
        assert geom.priority[0] == g["priority"] and geom.margin[0] == g["margin"]
    collision = {g["name"] for g in FACTS["collision_geoms"]}
    visual = [i for i in range(model.ngeom) if model.geom(i).name not in collision]
    assert len(visual) >= 20  # every robot primitive has a drawn copy
    for i in visual:
        assert model.geom_contype[i] == 0 and model.geom_conaffinity[i] == 0 and model.geom_group[i] == 2
    for g in FACTS["collision_geoms"]:
        if g["body"] != "world":
            assert model.geom(g["name"]).group[0] == 3  # hidden by default: the visuals show the robot
    for s in FACTS["sensors"]:
        sensor = model.sensor(s["name"])
        assert sensor.type[0] == getattr(mujoco.mjtSensor, s["kind"]) and sensor.dim[0] == s["dim"]


# ------------------------------------------------------------- observation


def test_observation_gyro_and_projected_gravity_for_a_known_rotation():
    """Gyro is the body-frame angular velocity; "projected gravity" is the seed's -R (0, 0, 1), the base's z axis
    in the world negated (not R^T (0, 0, -1): the two differ in their horizontal part once the base is turned)."""
    e = make_env(TASK, 3, 1, seed=0)
    quats = [quat([1, 0, 0], math.radians(30)),            # roll: body z in the world (0, -0.5, 0.866)
             quat([0, 1, 0], math.radians(30)),            # pitch nose down: body z (0.5, 0, 0.866)
             quat([0.3, -0.5, 0.8], 1.1)]
    qpos, qvel = _state(3)
    qpos[:, 3:7] = quats
    qvel[:, 3:6] = [[0.3, -0.2, 0.1], [1.0, 0.0, 0.0], [-0.4, 0.7, 2.0]]  # free-joint angular velocity: body frame
    e.set_state(qpos, qvel)
    obs, _ = e.observe()
    np.testing.assert_allclose(obs[:2, OBS_SLICES["projected_gravity"]],
                               [[0, 0.5, -math.sqrt(3) / 2], [-0.5, 0, -math.sqrt(3) / 2]], atol=OBS_ATOL)
    np.testing.assert_allclose(obs[2, OBS_SLICES["projected_gravity"]], -rot(quats[2]) @ [0, 0, 1], atol=OBS_ATOL)
    assert np.abs(obs[2, OBS_SLICES["projected_gravity"]] - rot(quats[2]).T @ [0, 0, -1]).max() > 0.1
    np.testing.assert_allclose(obs[:, OBS_SLICES["gyro"]], qvel[:, 3:6], atol=OBS_ATOL)
    e.close()


def test_observation_joint_offsets_velocities_and_last_action(env):
    """Joint positions appear minus the home pose, joint velocities as they are, and the last (clipped) action."""
    qpos, qvel = _state(4)
    offsets = np.linspace(-0.3, 0.3, 12)
    qpos[:, 7:] += offsets
    qvel[:, 6:] = np.linspace(2.0, -2.0, 12)
    env.set_state(qpos, qvel)
    obs, _ = env.observe()
    np.testing.assert_allclose(obs[:, OBS_SLICES["joint_pos"]], np.tile(offsets, (4, 1)), atol=OBS_ATOL)
    np.testing.assert_allclose(obs[:, OBS_SLICES["joint_vel"]], qvel[:, 6:], atol=OBS_ATOL)
    assert not obs[:, OBS_SLICES["last_action"]].any()  # zero after a reset
    actions = np.tile(np.linspace(-1, 1, 12), (4, 1)).astype(np.float32)
    actions[3, 0] = 250.0
    res = env.step(actions)
    expected = actions.copy()
    expected[3, 0] = 100.0  # the action bound
    np.testing.assert_array_equal(res.obs[:, OBS_SLICES["last_action"]], expected)


def test_observation_command_and_gait_phase_at_known_times(env):
    """The set command is observed; the phase per foot is frac(2 Hz * t + (0, .5, .5, 0)) at t = steps * 0.02 s."""
    commands = np.array([[1.0, 0.0, 0.0], [-0.6, 0.4, -0.8], [0.2, -0.1, 0.5], [0.0, 0.0, 0.0]])
    env.set_state(*_state(4, z=HOME[2]))
    env.set_commands(commands)
    obs, _ = env.observe()
    np.testing.assert_allclose(obs[:, OBS_SLICES["command"]], commands, atol=OBS_ATOL)
    np.testing.assert_array_equal(obs[:, OBS_SLICES["gait_phase"]], np.tile([0, 0.5, 0.5, 0], (4, 1)))
    zero = np.zeros((4, 12), np.float32)
    for step in range(1, 18):
        res = env.step(zero)
        t = step * DT
        expected = (2.0 * t + np.array([0, 0.5, 0.5, 0])) % 1.0
        np.testing.assert_allclose(res.obs[:, OBS_SLICES["gait_phase"]], np.tile(expected, (4, 1)), atol=1e-6)
    np.testing.assert_allclose(res.obs[0, OBS_SLICES["gait_phase"]], [0.68, 0.18, 0.18, 0.68], atol=1e-6)
    np.testing.assert_allclose(res.obs[:, OBS_SLICES["command"]], commands, atol=OBS_ATOL)


def test_critic_adds_body_frame_linear_velocity_for_known_root_velocity_and_yaw():
    """The critic's extra 3 are the IMU's body-frame velocity: R^T v, plus w x r_imu when turning."""
    e = make_env(TASK, 3, 1, seed=0)
    qpos, qvel = _state(3)
    qpos[0, 3:7] = quat([0, 0, 1], math.pi / 2)
    qvel[0, :3] = [1.0, 0.0, 0.0]                    # world +x seen from a base facing +y: body -y
    qpos[1, 3:7] = quat([0, 0, 1], math.radians(-30))
    qvel[1, :3] = [0.5, 0.2, -0.3]
    qpos[2, 3:7] = quat([1, 2, 3], 0.7)
    qvel[2, :3] = [0.1, -0.4, 0.2]
    qvel[2, 3:6] = [0.5, -1.0, 1.5]
    e.set_state(qpos, qvel)
    obs, critic = e.observe()
    np.testing.assert_allclose(critic[0, CRITIC_LINVEL], [0, -1, 0], atol=OBS_ATOL)
    c, s = math.cos(math.radians(-30)), math.sin(math.radians(-30))
    np.testing.assert_allclose(critic[1, CRITIC_LINVEL], [c * 0.5 + s * 0.2, -s * 0.5 + c * 0.2, -0.3],
                               atol=OBS_ATOL)
    expected = rot(qpos[2, 3:7]).T @ qvel[2, :3] + np.cross(qvel[2, 3:6], IMU_POS)
    np.testing.assert_allclose(critic[2, CRITIC_LINVEL], expected, atol=OBS_ATOL)
    np.testing.assert_array_equal(critic[:, :49], obs)
    e.close()


def test_sensor_parts_of_a_step_lag_one_substep_as_the_seed_reads_them():
    """After a step, joint positions and velocities are the step's end, while gyro, up vector and velocimeter are
    the values mj_step left (computed one substep earlier), as the seed reads them; loaded afresh they are current."""
    a, b = make_env(TASK, 4, 2, seed=12), make_env(TASK, 4, 2, seed=13)
    a.reset()
    rng = np.random.default_rng(2)
    for _ in range(5):
        res = a.step(rng.uniform(-1, 1, (4, 12)).astype(np.float32))
    b.set_state(a.qpos, a.qvel)
    obs_b, critic_b = b.observe()
    for part in (OBS_SLICES["joint_pos"], OBS_SLICES["joint_vel"]):
        np.testing.assert_array_equal(res.obs[:, part], obs_b[:, part])
    for part in (OBS_SLICES["gyro"], OBS_SLICES["projected_gravity"]):
        assert np.abs(res.obs[:, part] - obs_b[:, part]).max() > 1e-3  # one substep of a moving robot
    assert np.abs(res.critic[:, CRITIC_LINVEL] - critic_b[:, CRITIC_LINVEL]).max() > 1e-3
    a.close(), b.close()


# ------------------------------------------------------------------ rewards


def test_velocity_height_and_posture_rewards_on_a_hand_built_state(env):
    """Tracking, lin_vel_z, ang_vel_xy, base_height, similar_to_default equal their formula * weight * dt."""
    yaw = 0.4
    qpos, qvel = _state(4, z=0.42, quat=quat([0, 0, 1], yaw))
    v_world, w_body = np.array([0.8, -0.3, 0.25]), np.array([0.3, -0.6, 0.7])
    qvel[:, :3], qvel[:, 3:6] = v_world, w_body
    dq = np.array([0.1, -0.2, 0.05, 0.0, 0.3, -0.1, 0.0, 0.0, 0.2, -0.05, 0.1, 0.0])
    qpos[:, 7:] += dq
    env.set_state(qpos, qvel)
    commands = np.array([[0.6, -0.4, 0.5], [1.0, 0.4, -0.8], [0.0, 0.0, 0.0], [-0.6, 0.0, 0.7]])
    env.set_commands(commands)
    terms, terminated = env.evaluate()
    c, s = math.cos(yaw), math.sin(yaw)
    v = np.array([c * v_world[0] + s * v_world[1], -s * v_world[0] + c * v_world[1], v_world[2]])
    v += np.cross(w_body, IMU_POS)  # the velocimeter sits at the IMU site
    lin = np.exp(-((commands[:, 0] - v[0]) ** 2 + (commands[:, 1] - v[1]) ** 2) / 0.25) * 1.0 * DT
    ang = np.exp(-(commands[:, 2] - w_body[2]) ** 2 / 0.25) * 0.2 * DT
    np.testing.assert_allclose(terms["tracking_lin_vel"], lin, rtol=1e-9)
    np.testing.assert_allclose(terms["tracking_ang_vel"], ang, rtol=1e-9)
    np.testing.assert_allclose(terms["lin_vel_z"], -5.0 * DT * v[2] ** 2, rtol=1e-9)
    np.testing.assert_allclose(terms["ang_vel_xy"], -0.1 * DT * (0.3 ** 2 + 0.6 ** 2), rtol=1e-9)
    np.testing.assert_allclose(terms["base_height"], -100.0 * DT * (0.42 - 0.3) ** 2, rtol=1e-9)
    np.testing.assert_allclose(terms["similar_to_default"], -0.1 * DT * np.abs(dq).sum(), rtol=1e-9)
    assert not terminated.any()


def test_action_rate_reward_from_two_consecutive_actions(env):
    """action_rate is -0.005 * dt * |a_t - a_{t-1}|^2 over the clipped actions (a_0 = 0 after a reset)."""
    env.set_state(*_state(4, z=HOME[2]))
    rng = np.random.default_rng(3)
    a1 = rng.uniform(-1, 1, (4, 12)).astype(np.float32)
    a2 = rng.uniform(-1, 1, (4, 12)).astype(np.float32)
    res = env.step(a1)
    np.testing.assert_allclose(res.terms["action_rate"], -0.005 * DT * (a1.astype(float) ** 2).sum(1), rtol=1e-6)
    a2[0, 5] = -300.0
    res = env.step(a2)
    a2c = np.clip(a2.astype(float), -100, 100)
    np.testing.assert_allclose(res.terms["action_rate"], -0.005 * DT * ((a2c - a1) ** 2).sum(1), rtol=1e-6)
    np.testing.assert_allclose(res.rewards, sum(res.terms.values()), rtol=1e-5, atol=1e-7)


def _foot_drop(thigh: float, calf: float) -> float:
    """Height of a foot sphere's centre below its hip (hip joint 0, base level), from the leg's link lengths."""
    knee = 0.213 * math.cos(thigh)
    a = thigh + calf
    return knee + 0.213 * math.cos(a) - 0.002 * math.sin(a)


def test_feet_contact_and_swing_height_rewards_follow_the_gait_phase(env):
    """Contact must match stance (phase < 0.6); swing feet earn exp(-(h-0.1)^2/0.01); both mean over 4 feet."""
    front, rear = (0.8, -1.5), (1.4, -2.2)
    z = _foot_drop(*front) + go2_model.FOOT_RADIUS - 0.0005  # front feet 0.5 mm into the floor
    h_rear = z - _foot_drop(*rear) - go2_model.FOOT_RADIUS
    qpos, qvel = _state(4, z=z)
    qpos[:, 7:] = [0, *front, 0, *front, 0, *rear, 0, *rear]  # FL, FR, RL, RR
    env.set_state(qpos, qvel)
    assert 0.05 < h_rear < 0.2
    # gait clock 0: every foot in stance (phases 0, .5, .5, 0);
    # gait clock 0.68: FL and RR swing (0.68), FR and RL stand (0.18).
    env.gait_clock[:] = np.float32([0, 0.68, 0.68, 0.68])
    terms, _ = env.evaluate()
    # Row 0: FL, FR touch in stance (match), RL, RR float in stance (miss); rows 1-3: FL touches in
    # swing (miss), FR touches in stance (match), RL floats in stance (miss), RR floats in swing (match).
    contact_match = np.array([2 / 4, 2 / 4, 2 / 4, 2 / 4])
    np.testing.assert_allclose(terms["feet_contact"], 0.24 * DT * contact_match, rtol=1e-12)
    h_front = -0.0005 + go2_model.FOOT_RADIUS  # the sphere centres' heights (the seed's foot framepos)
    h_rear += go2_model.FOOT_RADIUS
    swing = (math.exp(-(h_front - 0.1) ** 2 / 0.01) + math.exp(-(h_rear - 0.1) ** 2 / 0.01)) / 4
    np.testing.assert_allclose(terms["feet_swing_height"], 4.0 * DT * np.array([0, swing, swing, swing]),
                               rtol=1e-6)
    env.gait_clock[:] = np.float32(0.4)  # FL, RR at 0.4 (stance), FR, RL at 0.9 (swing): FR touches, RR does not
    terms, _ = env.evaluate()
    np.testing.assert_allclose(terms["feet_contact"], 0.24 * DT * 0.5, rtol=1e-12)
    swing = (math.exp(-(h_front - 0.1) ** 2 / 0.01) + math.exp(-(h_rear - 0.1) ** 2 / 0.01)) / 4
    np.testing.assert_allclose(terms["feet_swing_height"], 4.0 * DT * swing, rtol=1e-6)


def test_swing_reward_peaks_with_the_foot_centre_10cm_up(env):
    """A swinging foot whose sphere centre is 0.1 m above the floor earns the full exp(0) = 1 (the seed's
    framepos of the foot geom, not its lowest point)."""
    leg = (0.8, -1.5)
    qpos, qvel = _state(4, z=_foot_drop(*leg) + 0.1)
    qpos[:, 7:] = np.tile([0.0, *leg], 4)
    env.set_state(qpos, qvel)
    env.gait_clock[:] = np.float32(0.68)  # FL and RR swing
    terms, _ = env.evaluate()
    np.testing.assert_allclose(terms["feet_swing_height"], 4.0 * DT * 2 / 4, rtol=1e-6)
    np.testing.assert_allclose(terms["feet_contact"], 0.24 * DT * 2 / 4, rtol=1e-12)  # no foot touches


# -------------------------------------------------- termination and timing


def test_termination_beyond_60_degrees_of_tilt_and_not_below():
    """A base tilted 60.1 deg (about any horizontal axis) terminates; 59.9 deg does not, also after a step."""
    e = make_env(TASK, 4, 1, seed=0)
    qpos, qvel = _state(4)
    axes = [[1, 0, 0], [1, 1, 0], [0, 1, 0], [-1, 2, 0]]
    angles = [59.9, 59.9, 60.1, 60.1]
    qpos[:, 3:7] = [_yawed(quat(a, math.radians(d)), 1.0 + i)
                    for i, (a, d) in enumerate(zip(axes, angles, strict=True))]
    e.set_state(qpos, qvel)
    _, terminated = e.evaluate()
    np.testing.assert_array_equal(terminated, [False, False, True, True])
    qpos[:, 3:7] = [quat([1, 0, 0], math.radians(d)) for d in (45, 50, 75, 80)]
    e.set_state(qpos, qvel)
    res = e.step(np.zeros((4, 12), np.float32))
    np.testing.assert_array_equal(res.terminated, [False, False, True, True])
    assert not res.truncated.any()
    np.testing.assert_array_equal(e.clock, [1, 1, 0, 0])  # the terminated rows restarted
    assert abs(e.qpos[2, 2] - HOME[2]) < 1e-12 and res.final_obs[2, 5] > -0.5  # final_obs: still tilted
    e.close()


def _yawed(q: np.ndarray, yaw: float) -> np.ndarray:
    """q followed by a yaw about the world z axis (tilt unchanged)."""
    y = quat([0, 0, 1], yaw)
    w1, x1, y1, z1 = y
    w2, x2, y2, z2 = q
    return np.array([w1 * w2 - x1 * x2 - y1 * y2 - z1 * z2, w1 * x2 + x1 * w2 + y1 * z2 - z1 * y2,
                     w1 * y2 - x1 * z2 + y1 * w2 + z1 * x2, w1 * z2 + x1 * y2 - y1 * x2 + z1 * w2])


def test_truncation_at_1000_steps_then_a_fresh_episode():
    """A standing robot is truncated on step 1000 (20 s), not before, and restarts at clock 0."""
    e = make_env(TASK, 2, 1, seed=4)
    e.reset()
    zero = np.zeros((2, 12), np.float32)
    for step in range(1, 1000):
        res = e.step(zero)
        assert not res.truncated.any() and not res.terminated.any(), step
    res = e.step(zero)
    assert res.truncated.all() and not res.terminated.any()
    np.testing.assert_array_equal(e.clock, [0, 0])
    e.close()


def test_commands_are_uniform_in_range_and_resampled_every_20_seconds():
    """Commands are drawn uniformly in their box at reset and redrawn on step 1000 of a longer episode."""
    e = make_env(TASK, 2000, 2, seed=5)
    e.reset()
    lo, hi = np.array([-0.6, -0.4, -0.8]), np.array([1.0, 0.4, 0.8])
    assert np.all(e.commands >= lo) and np.all(e.commands <= hi)
    np.testing.assert_allclose(e.commands.mean(0), (lo + hi) / 2, atol=0.05)
    np.testing.assert_allclose(e.commands.std(0), (hi - lo) / math.sqrt(12), rtol=0.06)
    e.close()
    e = make_env(TASK, 2, 1, seed=6, max_episode_steps=1500)
    e.reset()
    first = e.commands.copy()
    zero = np.zeros((2, 12), np.float32)
    for _ in range(999):
        e.step(zero)
    np.testing.assert_array_equal(e.commands, first)
    res = e.step(zero)
    assert not (res.truncated.any() or res.terminated.any())
    assert np.all(e.commands != first)
    np.testing.assert_allclose(res.obs[:, OBS_SLICES["command"]], e.commands, atol=OBS_ATOL)
    e.close()


def test_home_pose_with_zero_action_stands_for_5_seconds():
    """From the reset distribution, zero actions keep every robot upright and its base within 3 cm of 0.3 m."""
    # 3 cm: at the keyframe the feet sit ~3 cm into the floor and the PD joints sag under the
    # 15 kg body, so the base settles ~1 cm above 0.3 m after a +-1 cm bounce from the random
    # root velocities; a robot that sits down or falls ends far below 0.27 m.
    e = make_env(TASK, 32, 2, seed=7)
    e.reset()
    zero = np.zeros((32, 12), np.float32)
    for _ in range(250):
        res = e.step(zero)
        assert not res.terminated.any() and not res.truncated.any()
        assert np.all(np.abs(e.qpos[:, 2] - 0.3) < 0.03)
        assert np.all(res.obs[:, 5] < -0.97)  # gravity stays along -z of the body: < 14 deg of tilt
    e.close()


# ------------------------------------------------------ reset, gains, specs


def test_reset_distribution_and_randomised_pd_gains():
    """Reset: home joints, x/y and root velocities in +-0.5, uniform yaw, kp in [31.5, 38.5], kd in [.45, .55]."""
    n = 1000
    e = make_env(TASK, n, 2, seed=8)
    e.reset()
    q, v = e.qpos, e.qvel
    np.testing.assert_array_equal(q[:, 7:], np.tile(HOME[7:], (n, 1)))
    assert np.all(q[:, 2] == HOME[2]) and np.all(np.abs(q[:, :2]) <= 0.5)
    assert np.all(np.abs(q[:, 4:6]) < 1e-12)  # yaw only
    yaw = 2 * np.arctan2(q[:, 6], q[:, 3])
    assert np.abs(np.mean(np.cos(yaw))) < 0.1 and np.abs(np.mean(np.sin(yaw))) < 0.1
    assert np.all(np.abs(v[:, :6]) <= 0.5) and np.abs(v[:, :6]).mean() == pytest.approx(0.25, rel=0.05)
    assert not v[:, 6:].any()
    for gains, (lo, hi) in ((e.kp, (31.5, 38.5)), (e.kd, (0.45, 0.55))):
        assert np.all(gains >= lo) and np.all(gains <= hi)
        assert gains.std() == pytest.approx((hi - lo) / math.sqrt(12), rel=0.08)
    gain = e._sim.expand("actuator_gainprm").reshape(n, 12, -1)
    bias = e._sim.expand("actuator_biasprm").reshape(n, 12, -1)
    assert e.kp.shape == e.kd.shape == (n, 12) and np.all(e.kp.std(axis=1) > 0)  # one draw per actuator
    np.testing.assert_array_equal(gain[:, :, 0], e.kp)
    np.testing.assert_array_equal(bias[:, :, 1], -e.kp)
    np.testing.assert_array_equal(bias[:, :, 2], -e.kd)
    e.close()


def test_each_env_runs_its_own_pd_gains_exactly(model):
    """An env's trajectory equals plain MuJoCo stepping the same model with that env's kp and kd (bit for bit)."""
    e = make_env(TASK, 3, 2, seed=9)
    e.reset()
    start_q, start_v = e.qpos.copy(), e.qvel.copy()
    rng = np.random.default_rng(0)
    actions = rng.uniform(-1, 1, (10, 3, 12)).astype(np.float32)
    for a in actions:
        e.step(a)
    assert len({tuple(k) for k in e.kp}) == 3 and all(len(set(k)) == 12 for k in e.kp)  # per env and actuator
    obs, _ = e.observe()
    for i in range(3):
        m = go2_model.build_model()
        m.actuator_gainprm[:, 0] = e.kp[i]
        m.actuator_biasprm[:, 1] = -e.kp[i]
        m.actuator_biasprm[:, 2] = -e.kd[i]
        d = mujoco.MjData(m)
        d.qpos[:], d.qvel[:] = start_q[i], start_v[i]
        for a in actions[:, i]:
            d.ctrl[:] = HOME[7:] + 0.25 * a.astype(np.float64)
            mujoco.mj_step(m, d, nstep=2)
        np.testing.assert_array_equal(e.qpos[i], d.qpos)
        np.testing.assert_array_equal(e.qvel[i], d.qvel)
        # the sensors are those mj_step left behind (the seed's reads), not recomputed at the new state
        gyro = d.sensordata[m.sensor_adr[m.sensor("gyro").id]:][:3]
        np.testing.assert_allclose(obs[i, OBS_SLICES["gyro"]], gyro, atol=OBS_ATOL)
    e.close()


def test_shapes_dtypes_and_determinism_match_the_task_spec():
    """Outputs have the TaskSpec's dims and dtypes, rewards sum the terms, and 1 or 2 threads agree bit for bit."""
    spec = TASK_SPECS[TASK]
    assert (spec.obs_dim, spec.critic_dim, spec.act_dim, spec.max_episode_steps) == (49, 52, 12, 1000)

    def run(threads: int) -> list[np.ndarray]:
        e = make_env(TASK, 6, threads, seed=11, max_episode_steps=15)
        assert e.spec == spec and e.dt == pytest.approx(spec.control_dt)
        obs, critic = e.reset()
        assert obs.shape == (6, 49) and obs.dtype == np.float32
        assert critic.shape == (6, 52) and critic.dtype == np.float32
        rng = np.random.default_rng(1)
        out = [obs]
        for _ in range(20):
            res = e.step(rng.standard_normal((6, 12)).astype(np.float32))
            for arr, shape, dtype in ((res.obs, (6, 49), np.float32), (res.critic, (6, 52), np.float32),
                                      (res.final_obs, (6, 49), np.float32),
                                      (res.final_critic, (6, 52), np.float32), (res.rewards, (6,), np.float32),
                                      (res.terminated, (6,), np.bool_), (res.truncated, (6,), np.bool_)):
                assert arr.shape == shape and arr.dtype == dtype
            assert tuple(res.terms) == spec.reward_terms
            assert all(t.shape == (6,) and t.dtype == np.float32 for t in res.terms.values())
            np.testing.assert_allclose(res.rewards, sum(res.terms.values()), rtol=1e-5, atol=1e-7)
            out += [res.obs.copy(), res.critic.copy(), res.rewards.copy(), res.truncated.copy()]
        e.close()
        return out

    a, b = run(1), run(2)
    assert sum(x.sum() for x in a[4::4]) > 0  # a truncation reset happened
    for x, y in zip(a, b, strict=True):
        np.testing.assert_array_equal(x, y)


def test_gait_clock_runs_on_across_episodes_in_the_seeds_float32_sums():
    """The gait clock is the seed's: float32 fmod(clock + 0.04, 1) per control step (as its torch terms compute
    it), the same in every env and not restarted when an episode ends; a whole-env reset restarts it."""
    import torch

    e = make_env(TASK, 3, 1, seed=4, max_episode_steps=7)
    e.reset()
    ref = torch.zeros(3, dtype=torch.float32)
    for _ in range(40):
        e.step(np.zeros((3, 12), np.float32))
        ref = torch.fmod(ref + 2.0 * 0.02 * torch.ones(3, dtype=torch.bool), 1.0)
    np.testing.assert_array_equal(e.gait_clock, ref.numpy())  # bit for bit, through 5 time-outs
    assert np.all(e.clock == 40 % 7)  # the episode clock did restart
    phase = e.gait_phase()
    np.testing.assert_array_equal(phase, torch.remainder(ref[:, None] + torch.tensor([0, .5, .5, 0]), 1.0).numpy())
    e.reset()
    assert not e.gait_clock.any()
    e.close()
