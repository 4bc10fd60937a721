"""g1_walk_flat (the seed's gait-clock G1 walk) against its definition, re-computed here from MuJoCo's own state."""

from __future__ import annotations

import copy
import math

import mujoco
import numpy as np
import pytest

from collector.envs import make_env
from collector.envs.g1.walk import ACTION_SCALE, DECIMATION, G1WalkFlat
from common.task_spec import task_spec

DT = 0.02
PHASE_STEP = 2 * math.pi * 1.5 * DT
POSE_W = np.array([0.01, 1, 5, 0.01, 5, 5] * 2 + [50] * 17, float)
WEIGHTS = {"tracking_lin_vel": 2.0, "tracking_ang_vel": 0.2, "feet_phase": 1.0, "lin_vel_z": -1.0,
           "ang_vel_xy": -0.25, "base_height": -500.0, "orientation": -5.0, "action_rate": -0.01, "pose": -0.1}


@pytest.fixture
def env():
    e = make_env("g1_walk_flat", num_envs=8, num_threads=1, seed=3)
    e.reset()
    yield e
    e.close()


def _swing_height(phase: np.ndarray) -> np.ndarray:
    """The seed's Bezier profile, written out: up over the first half of the shifted cycle, down over the second."""
    x = ((phase + math.pi) % (2 * math.pi)) / (2 * math.pi)
    out = np.empty_like(x)
    for i, xi in np.ndenumerate(x):
        t = 2 * xi if xi <= 0.5 else 2 * xi - 1
        b = t ** 3 + 3 * t ** 2 * (1 - t)
        out[i] = 0.09 * b if xi <= 0.5 else 0.09 - 0.09 * b
    return out


def _mujoco_reading(env, i: int, qpos=None, qvel=None, action=None) -> dict[str, np.ndarray]:
    """Env i's pelvis IMU velocity, torso gyro and up-vector and foot-site heights, from a fresh MjData: at its
    current state, or where a step from (qpos, qvel) with `action` stood when its last substep began (the
    sensors mj_step leaves behind, which the seed and the task read)."""
    m = copy.deepcopy(env.model)
    d = mujoco.MjData(m)
    if action is None:
        d.qpos[:], d.qvel[:] = env.qpos[i], env.qvel[i]
    else:
        m.actuator_gainprm[:, 0], m.actuator_biasprm[:, 1], m.actuator_biasprm[:, 2] = env.kp[i], -env.kp[i], -env.kd[i]
        d.qpos[:], d.qvel[:] = qpos, qvel
        d.ctrl[:] = env.default_joint_pos + ACTION_SCALE * action
        mujoco.mj_step(m, d, nstep=DECIMATION - 1)
    mujoco.mj_forward(m, d)
    vel = np.zeros(6)
    mujoco.mj_objectVelocity(m, d, mujoco.mjtObj.mjOBJ_SITE, m.site("imu_in_pelvis").id, vel, 1)
    linvel = vel[3:].copy()
    mujoco.mj_objectVelocity(m, d, mujoco.mjtObj.mjOBJ_SITE, m.site("imu_in_torso").id, vel, 1)
    return {"v": linvel, "w": vel[:3].copy(), "up": d.site("imu_in_torso").xmat.reshape(3, 3)[:, 2].copy(),
            "foot_z": np.array([d.site("left_foot").xpos[2], d.site("right_foot").xpos[2]])}


def test_spec_matches_the_seed():
    """Actor 98, critic 101, 29 actions at 50 Hz, 1,000-step episodes, the seed's 9 reward terms by name."""
    spec = task_spec("g1_walk_flat")
    assert (spec.obs_dim, spec.critic_dim, spec.act_dim, spec.max_episode_steps) == (98, 101, 29, 1000)
    assert spec.control_dt == pytest.approx(DT)
    assert set(spec.reward_terms) == set(WEIGHTS)


def test_every_reward_term_recomputed_from_the_simulation(env):
    """Each of the 9 terms equals weight x dt x its formula on MuJoCo's state: sensors (pelvis velocity, torso gyro
    and up vector, foot sites) where the step's last substep began, joint positions where the step ended."""
    env.noise = False
    rng = np.random.default_rng(0)
    prev = np.zeros((8, 29))
    checked = 0
    for _ in range(12):
        a = rng.normal(0.0, 0.5, (8, 29))
        before = env.qpos.copy(), env.qvel.copy()
        res = env.step(a)
        live = ~(res.terminated | res.truncated)
        for i in np.flatnonzero(live):
            s = _mujoco_reading(env, i, before[0][i], before[1][i], a[i])
            cmd, q = env.commands[i], env.qpos[i]
            expected = {
                "tracking_lin_vel": math.exp(-np.sum((cmd[:2] - s["v"][:2]) ** 2) / 0.25),
                "tracking_ang_vel": math.exp(-(cmd[2] - s["w"][2]) ** 2 / 0.25),
                "feet_phase": math.exp(-np.sum((s["foot_z"] - _swing_height(env.phase[i])) ** 2) / 0.008),
                "lin_vel_z": s["v"][2] ** 2,
                "ang_vel_xy": s["w"][0] ** 2 + s["w"][1] ** 2,
                "base_height": (q[2] - 0.754) ** 2,
                "orientation": s["up"][0] ** 2 + s["up"][1] ** 2,
                "action_rate": np.sum((a[i] - prev[i]) ** 2),
                "pose": np.sum(POSE_W * (q[7:] - env.default_joint_pos) ** 2),
            }
            for name, value in expected.items():
                assert res.terms[name][i] == pytest.approx(WEIGHTS[name] * DT * value, rel=1e-4, abs=1e-6), name
            assert res.rewards[i] == pytest.approx(sum(res.terms[n][i] for n in WEIGHTS), rel=1e-5, abs=1e-6)
            checked += 1
        prev = a.copy()
        prev[~live] = 0.0  # a reset clears the action history
    assert checked >= 60


def test_observation_layout_and_critic(env):
    """Actor: gyro, minus up-vector (both as the step's last substep began), joints relative to stand and their
    velocities (where the step ended), action, command, phase; critic + IMU v (as the last substep began)."""
    env.noise = False
    a = np.random.default_rng(1).normal(0.0, 0.3, (8, 29))
    before = env.qpos.copy(), env.qvel.copy()
    res = env.step(a)
    for i in np.flatnonzero(~(res.terminated | res.truncated)):
        s = _mujoco_reading(env, i, before[0][i], before[1][i], a[i])
        expected = np.concatenate([s["w"], -s["up"], env.qpos[i, 7:] - env.default_joint_pos, env.qvel[i, 6:], a[i],
                                   env.commands[i], env.phase[i]])
        np.testing.assert_allclose(res.obs[i], expected, rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(res.critic[i], np.concatenate([expected, s["v"]]), rtol=1e-5, atol=1e-5)


def test_actor_noise_is_uniform_within_the_seeds_bounds(env):
    """With noise on, actor - critic is within +-0.2 gyro, 0.05 gravity, 0.01 joint pos, 1.5 joint vel, 0 elsewhere."""
    res = env.step(np.zeros((8, 29)))
    diff = res.obs - res.critic[:, :98]
    bounds = np.zeros(98)
    bounds[0:3], bounds[3:6], bounds[6:35], bounds[35:64] = 0.2, 0.05, 0.01, 1.5
    assert np.all(np.abs(diff) <= bounds + 1e-6)
    assert np.all(diff[:, 64:] == 0.0)
    assert np.abs(diff[:, 35:64]).max() > 1.0 and np.abs(diff[:, 6:35]).max() > 0.005  # spread over the range


def test_gait_phase_advances_wraps_and_is_offset_by_pi(env):
    """Reset: right = left + pi; each step both advance by 2pi x 1.5 Hz x 0.02 s, wrapped to [0, 2pi)."""
    np.testing.assert_allclose(env.phase[:, 1] - env.phase[:, 0], math.pi, atol=1e-12)
    assert np.all((env.phase[:, 0] >= 0) & (env.phase[:, 0] < 2 * math.pi))
    env.noise = False
    wrapped = False
    for _ in range(40):  # 1.2 cycles: every env wraps at least once
        before = env.phase.copy()
        res = env.step(np.zeros((8, 29)))
        live = ~(res.terminated | res.truncated)
        np.testing.assert_allclose(env.phase[live], (before[live] + PHASE_STEP) % (2 * math.pi), atol=1e-9)
        assert np.all((env.phase >= 0) & (env.phase < 2 * math.pi + math.pi))
        wrapped |= bool(np.any(env.phase[live] < before[live]))
        np.testing.assert_allclose(res.obs[live, 96:98], env.phase[live], atol=1e-6)
        gap = (env.phase[live, 1] - env.phase[live, 0]) % (2 * math.pi)
        np.testing.assert_allclose(gap, math.pi, atol=1e-9)
    assert wrapped


def test_reset_draws_a_new_phase_command_and_gains(env):
    """A reset draws a new phase, command and per-actuator kp, kd scaled by U(0.9, 1.1) of the model's gains."""
    phase, cmd, kp = env.phase.copy(), env.commands.copy(), env.kp.copy()
    env.reset()
    assert not np.allclose(env.phase, phase) and not np.allclose(env.commands, cmd) and not np.allclose(env.kp, kp)
    ratios_p, ratios_d = [], []
    for _ in range(20):
        env.reset()
        ratios_p.append(env.kp / env.model.actuator_gainprm[:, 0])
        ratios_d.append(env.kd / -env.model.actuator_biasprm[:, 2])
    for r in (np.array(ratios_p), np.array(ratios_d)):
        assert r.min() >= 0.9 and r.max() <= 1.1
        assert r.min() < 0.905 and r.max() > 1.095  # the whole range is used
        assert len(np.unique(r[0, 0])) == 29  # per actuator, not one scale per env


def test_the_drawn_gains_and_action_scale_drive_mujoco(env):
    """One step of env i equals MuJoCo stepping i's state with its drawn kp, kd and ctrl = stand + 0.25 x action."""
    env.noise = False
    a = np.random.default_rng(2).normal(0.0, 0.5, (8, 29))
    i = 5
    ref = copy.copy(env.model)
    ref.actuator_gainprm[:, 0] = env.kp[i]
    ref.actuator_biasprm[:, 1] = -env.kp[i]
    ref.actuator_biasprm[:, 2] = -env.kd[i]
    d = mujoco.MjData(ref)
    d.qpos[:], d.qvel[:] = env.qpos[i], env.qvel[i]
    d.ctrl[:] = env.default_joint_pos + 0.25 * a[i]
    for _ in range(3):
        mujoco.mj_step(ref, d)
    env.step(a)
    np.testing.assert_allclose(env.qpos[i], d.qpos, atol=1e-8)
    np.testing.assert_allclose(env.qvel[i], d.qvel, atol=1e-6)


def test_command_ranges_and_planar_dead_zone():
    """vx in [-0.6, 1], vy in [-0.4, 0.4], yaw rate in [-0.8, 0.8]; a planar command of norm <= 0.2 is zeroed."""
    with make_env("g1_walk_flat", num_envs=512, num_threads=1, seed=7) as e:
        cmds = []
        for _ in range(4):
            e.reset()
            cmds.append(e.commands.copy())
    c = np.concatenate(cmds)
    assert c[:, 0].min() >= -0.6 and c[:, 0].max() <= 1.0 and np.abs(c[:, 1]).max() <= 0.4
    assert np.abs(c[:, 2]).max() <= 0.8 and np.abs(c[:, 2]).max() > 0.75
    planar = np.linalg.norm(c[:, :2], axis=1)
    zeroed = planar == 0.0
    assert np.all(planar[~zeroed] > 0.2)
    # P(|(vx, vy)| <= 0.2) under the uniform ranges: pi 0.2^2 / (1.6 x 0.8) = 0.098.
    assert 0.06 < zeroed.mean() < 0.14
    assert np.all(c[zeroed, 2] != 0.0)  # the yaw rate is kept


def test_reset_pose_and_twist_distribution():
    """Joints at stand and still; root xy within 0.5 of the origin at 0.754 m, any yaw, twist within 0.5 (world)."""
    with make_env("g1_walk_flat", num_envs=256, num_threads=1, seed=9) as e:
        e.reset()
        q, v = e.qpos.copy(), e.qvel.copy()
        stand = e.model.key("stand").qpos
    np.testing.assert_allclose(q[:, 7:], np.broadcast_to(stand[7:], q[:, 7:].shape))
    assert np.all(v[:, 6:] == 0.0)
    assert np.abs(q[:, :2]).max() <= 0.5 and np.allclose(q[:, 2], 0.754)
    yaw = 2 * np.arctan2(q[:, 6], q[:, 3])
    assert np.allclose(q[:, 4:6], 0.0) and np.ptp(np.mod(yaw, 2 * math.pi)) > 5.5
    assert np.abs(v[:, :3]).max() <= 0.5
    # qvel's angular part is in the pelvis frame: rotated back by the yaw it lies within the world box.
    c, s = np.cos(yaw), np.sin(yaw)
    w_world = np.stack([c * v[:, 3] - s * v[:, 4], s * v[:, 3] + c * v[:, 4], v[:, 5]], axis=1)
    assert np.abs(w_world).max() <= 0.5 + 1e-9 and np.abs(v[:, 3:5]).max() > 0.5  # world box, not body box


def test_terminations_tilt_25_degrees_and_pelvis_below_0_55(env):
    """Tilted 26 deg or with the pelvis at 0.54 m ends the episode; 24 deg or 0.56 m does not."""
    stand = env.model.key("stand").qpos
    qpos = np.tile(stand, (8, 1))
    for row, deg in ((0, 26.0), (1, 24.0), (2, -26.0)):
        half = math.radians(deg) / 2
        qpos[row, 3:7] = (math.cos(half), math.sin(half), 0.0, 0.0)  # about the pelvis x axis
    qpos[3, 2], qpos[4, 2] = 0.54, 0.56
    env.set_state(qpos, np.zeros((8, env.model.nv)))
    _, terminated = env.evaluate()
    assert terminated.tolist() == [True, False, True, True, False, False, False, False]


def test_time_out_is_a_truncation():
    """At the step limit an episode is truncated (bootstrapped), not terminated."""
    with make_env("g1_walk_flat", num_envs=4, num_threads=1, seed=1, max_episode_steps=5) as e:
        e.reset()
        stand = e.model.key("stand").qpos
        e.set_state(np.tile(stand, (4, 1)), np.zeros((4, e.model.nv)))
        for k in range(5):
            res = e.step(np.zeros((4, 29)))
            assert not res.terminated.any()
            assert res.truncated.all() == (k == 4)


def test_velocity_tracking_reports_command_and_imu(env):
    """appo-eval's hook: the command and (pelvis IMU vx, vy, torso gyro z) of every env."""
    res = env.step(np.zeros((8, 29)))
    commanded, measured = env.velocity_tracking()
    np.testing.assert_array_equal(commanded, env.commands)
    np.testing.assert_allclose(measured[:, :2], res.critic[:, 98:100], atol=1e-6)
    np.testing.assert_allclose(measured[:, 2], res.critic[:, 2], atol=1e-6)


def test_is_the_registered_task():
    """make_env builds this class for the seed's name."""
    with make_env("g1_walk_flat", num_envs=1, num_threads=1, seed=0) as e:
        assert isinstance(e, G1WalkFlat)
