"""MotrixSim behind the physics interface (collector/envs/physics/motrix.py), with MuJoCo as the independent reference.

Two kinds of parity.  From one state, every output a task reads (sensors, body frames, observations) is
MuJoCo's to float32 precision.  Over time, the engines differ in their contact and constraint solvers
(MotrixSim ignores MuJoCo's cone, impratio and integrator options), so trajectories from the same state
with the same actions drift apart slowly; each trajectory check states its tolerances on base height,
base orientation, joint angles and base velocity (and the IMU's up vector, which the policy observes),
about twice the deviation measured here, and the fault tests show that a wrong gain, mass, contact or
sensor frame on the MotrixSim side breaks them.

Trajectories are 1 s from the task's standing pose on 2 envs (yaw 0 and 2 rad): standing with the
default-pose targets, a joint-target step after 0.1 s, and a trained policy, run deterministically here in
NumPy from the actor and observation normaliser of a run's checkpoint: the Go2 walking
(tests/data/go2_walk_actor.npz, a go2_joystick_flat run at iteration 150) and the seed's G1 walker
(tests/data/g1_walk_actor.npz, g1_walk_flat on tuning seed 1 with desired_kl 0.02 at 8 M env steps, which
stands rather than walks; its weights stored in float16, computed in float32).
"""

from __future__ import annotations

import re
from pathlib import Path

import mujoco
import numpy as np
import pytest
from test_g1_tracking import trajectory  # the tracking tests' kinematic clip

import collector.envs.batched as batched
from collector.envs import make_env
from collector.envs.g1.motion import clip_from_qpos, write_clip
from collector.envs.physics import STAGE_VEL, Physics, make_physics
from collector.envs.physics.motrix import MotrixPhysics

ACTORS = {task: Path(__file__).parents[1] / "data" / name for task, name in
          (("go2_joystick_flat", "go2_walk_actor.npz"), ("g1_walk_flat", "g1_walk_actor.npz"))}
STEPS = 50  # 1 s of control at 50 Hz
YAWS = np.array([0.0, 2.0])
# Tolerances: largest deviation from MuJoCo over the second (velocity: RMS over steps and envs).
GO2_OPEN_LOOP = {"height": 0.004, "orientation": 0.015, "joints": 0.05, "velocity": 0.03, "up": 0.02}
GO2_POLICY = {"height": 0.02, "orientation": 0.15, "joints": 0.3, "velocity": 0.15, "up": 0.05}
G1_OPEN_LOOP = {"height": 0.004, "orientation": 0.015, "joints": 0.07, "velocity": 0.015, "up": 0.02}
G1_POLICY = {"height": 0.002, "orientation": 0.02, "joints": 0.03, "velocity": 0.03, "up": 0.01}
# The up-vector sensors (the policy's projected gravity) of each task.
UP_SENSORS = {"go2_joystick_flat": ("upvector", "world_z"), "g1_walk_flat": ("torso_upvector",),
              "g1_velocity_flat": ("imu_upvector", "torso_upvector")}


# ------------------------------------------------------------------ helpers


def trained_policy(task: str, obs: np.ndarray) -> np.ndarray:
    """The task's trained actor's mean action: normalised observation through the ELU MLP, in float32."""
    w = {k: v.astype(np.float32) for k, v in np.load(ACTORS[task]).items()}
    x = np.clip((obs - w["obs_mean"]) / np.sqrt(w["obs_var"] + 1e-8), -10, 10).astype(np.float32)
    layers = sum(k.startswith("w") for k in w)
    for i in range(layers):
        x = x @ w[f"w{i}"].T + w[f"b{i}"]
        if i < layers - 1:
            x = np.where(x > 0, x, np.expm1(np.minimum(x, 0)))
    return x.astype(np.float64)


def _actions(env, scenario: str, t: int, obs: np.ndarray) -> np.ndarray:
    """The scenario's actions at control step t (2 envs)."""
    if scenario == "policy":
        return trained_policy(env.task, obs)
    a = np.zeros((2, env.spec.act_dim))
    if scenario == "step" and t >= 5:
        if env.task == "go2_joystick_flat":
            a[:, [1, 4, 7, 10]], a[:, [2, 5, 8, 11]] = -1.2, 1.2  # thigh targets -0.3 rad, calves +0.3 rad
        else:  # shoulder pitch targets -0.25 rad, elbows +0.25 rad (the legs hold the stand pose)
            scale = np.broadcast_to(getattr(env, "action_scale", 0.25), (env.spec.act_dim,))
            a[:, [15, 22]], a[:, [18, 25]] = -0.25 / scale[15], 0.25 / scale[18]
    return a


def rollout(task: str, sim: str, scenario: str, gain_scale: float = 1.0) -> dict[str, np.ndarray]:
    """1 s of `scenario` from the standing pose: qpos, qvel and the up-vector sensors per step [T, 2, ...]."""
    env = make_env(task, 2, 1, 0, sim=sim)
    try:
        env.noise = False
        env.pushes = False
        env.reset()
        qpos = np.tile(env.init_qpos, (2, 1))
        qpos[:, 3:7] = np.stack([np.cos(YAWS / 2), 0 * YAWS, 0 * YAWS, np.sin(YAWS / 2)], axis=1)
        env.set_state(qpos, np.zeros((2, env.model.nv)))
        if task == "go2_joystick_flat":
            env.set_gains(np.full((2, 12), 35.0 * gain_scale), np.full((2, 12), 0.5))
            env.set_commands(np.array([[0.8, 0.0, 0.0], [0.3, 0.2, 0.5]]))
        elif task == "g1_walk_flat":
            env.set_gains(env.nominal_kp * gain_scale, env.nominal_kd)
        obs = env.observe()[0]
        sensors = env._sim.output("sensordata")
        up = [slice(int(env.model.sensor(s).adr[0]), int(env.model.sensor(s).adr[0]) + 3) for s in UP_SENSORS[task]]
        out = {"qpos": [], "qvel": [], "up": [], "found": [], "foot_force": []}
        for t in range(STEPS):
            result = env.step(_actions(env, scenario, t, obs))
            assert not (result.terminated | result.truncated).any(), "an episode ended: the scenario left the task"
            obs = result.obs
            out["qpos"].append(env.qpos.copy())
            out["qvel"].append(env.qvel.copy())
            out["up"].append(np.concatenate([sensors[:, s] for s in up], axis=1))
            if task == "g1_velocity_flat":
                out["found"].append(env._sub_found.copy())
                out["foot_force"].append(env.foot_force.copy())
        return {k: np.array(v) for k, v in out.items()}
    finally:
        env.close()


def deviations(ref: dict, run: dict) -> dict[str, float]:
    """The tolerance quantities of `run` against the reference `ref`."""
    dot = np.abs(np.sum(ref["qpos"][..., 3:7] * run["qpos"][..., 3:7], axis=-1))
    dv = ref["qvel"][..., :3] - run["qvel"][..., :3]
    return {"height": float(np.abs(ref["qpos"][..., 2] - run["qpos"][..., 2]).max()),
            "orientation": float((2 * np.arccos(np.clip(dot, 0.0, 1.0))).max()),
            "joints": float(np.abs(ref["qpos"][..., 7:] - run["qpos"][..., 7:]).max()),
            "velocity": float(np.sqrt(np.mean(np.sum(dv ** 2, axis=-1)))),
            "up": float(np.abs(ref["up"] - run["up"]).max())}


def outside(dev: dict[str, float], tolerance: dict[str, float]) -> dict[str, float]:
    """The quantities that exceed their tolerance."""
    return {k: v for k, v in dev.items() if v > tolerance[k]}


_REFERENCE: dict[tuple[str, str], dict] = {}


def reference(task: str, scenario: str) -> dict:
    """MuJoCo's rollout (computed once per module)."""
    key = (task, scenario)
    if key not in _REFERENCE:
        _REFERENCE[key] = rollout(task, "mujoco", scenario)
    return _REFERENCE[key]


@pytest.fixture
def motrix_xml_fault(monkeypatch):
    """Install an edit of the MJCF that MotrixSim alone loads (MuJoCo keeps the task's model)."""
    def install(edit):
        def make(sim, model, nsim, nthread, persistent=False, stepper=None, xml=None):
            if sim == "motrix":
                edited = edit(xml)
                assert edited != xml, "the fault changed nothing"
                xml = edited
            return make_physics(sim, model, nsim, nthread, persistent, stepper, xml)
        monkeypatch.setattr(batched, "make_physics", make)
    return install


def _random_states(model: mujoco.MjModel, n: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """n states off the ground: random base orientation, joints about the keyframe, random velocities."""
    rng = np.random.default_rng(seed)
    qpos = np.tile(model.key_qpos[0], (n, 1))
    qpos[:, 2] += 0.3
    q = rng.normal(size=(n, 4))
    qpos[:, 3:7] = q / np.linalg.norm(q, axis=1, keepdims=True)
    qpos[:, 7:] += rng.uniform(-0.2, 0.2, (n, model.nq - 7))
    return qpos, rng.normal(size=(n, model.nv))


# ---------------------------------------------------------- one state, same outputs


@pytest.mark.parametrize("task", ["go2_joystick_flat", "g1_walk_flat", "g1_velocity_flat"])
def test_outputs_from_one_state_are_mujocos(task):
    """From the same state, every position/velocity sensor and body frame equals MuJoCo's to float32 precision
    (including the sensors computed here: world-body frame axes, subtree angular momentum), the CoM moved by a
    per-env body_ipos row and a base quaternion off unit norm included."""
    envs = {sim: make_env(task, 3, 1, 0, sim=sim) for sim in ("mujoco", "motrix")}
    try:
        model = envs["mujoco"].model
        qpos, qvel = _random_states(model, 3, seed=1)
        qpos[2, 3:7] *= 1.01  # off unit norm: MuJoCo's kinematics normalise it (MotrixSim would refuse it)
        names = ("sensordata", "xpos", "xquat", "cvel", "subtree_com")
        outputs = {sim: {k: e._sim.output(k) for k in names} for sim, e in envs.items()}
        for e in envs.values():
            physics = e._sim
            assert isinstance(physics, Physics)
            ipos = physics.field("body_ipos").reshape(3, model.nbody, 3)
            ipos[1, 1] += (0.02, -0.01, 0.03)  # env 1's root CoM moved
            physics.reset(None)
            physics.set_state(None, qpos, qvel)
            physics.forward(STAGE_VEL)
        ref, got = outputs["mujoco"], outputs["motrix"]
        checked = [i for i in range(model.nsensor) if model.sensor_type[i] not in
                   (mujoco.mjtSensor.mjSENS_ACCELEROMETER, mujoco.mjtSensor.mjSENS_CONTACT)]  # acceleration stage
        assert len(checked) >= 9
        for i in checked:
            cols = slice(model.sensor_adr[i], model.sensor_adr[i] + model.sensor_dim[i])
            np.testing.assert_allclose(got["sensordata"][:, cols], ref["sensordata"][:, cols], atol=2e-5, rtol=1e-5,
                                       err_msg=model.sensor(i).name)
        for name in ("xpos", "cvel", "subtree_com"):
            np.testing.assert_allclose(got[name], ref[name], atol=2e-5, rtol=1e-5, err_msg=name)
        q_ref, q_got = ref["xquat"].reshape(3, -1, 4), got["xquat"].reshape(3, -1, 4)
        np.testing.assert_allclose(np.abs(np.sum(q_ref * q_got, axis=-1)), 1.0, atol=1e-6)  # q and -q: one rotation
        assert np.abs(ref["subtree_com"][1] - ref["subtree_com"][0]).max() > 1e-3  # the moved CoM shows
        qpos[2, 3:7] /= 1.01
        np.testing.assert_allclose(envs["motrix"].qpos, qpos, atol=1e-6)
        np.testing.assert_allclose(envs["motrix"].qvel, qvel, atol=1e-5)
    finally:
        for e in envs.values():
            e.close()


@pytest.fixture
def clip(tmp_path) -> Path:
    """The tracking tests' kinematic clip, written for g1_motion_tracking."""
    path = tmp_path / "clip.npz"
    write_clip(path, clip_from_qpos(trajectory()))
    return path


def test_motion_tracking_observation_from_one_state_is_mujocos(clip):
    """g1_motion_tracking's observation and critic of a reference-state start (body frames, cvel, subtree CoM
    in the task's own conventions) equal MuJoCo's to float32 precision."""
    obs = {}
    for sim in ("mujoco", "motrix"):
        env = make_env("g1_motion_tracking", 2, 1, 3, motion_file=str(clip), sim=sim)
        env.noise = env.init_noise = env.pushes = False
        env.reset()
        obs[sim] = env.observe()
        env.close()
    for ref, got in zip(obs["mujoco"], obs["motrix"], strict=True):
        np.testing.assert_allclose(got, ref, atol=2e-5, rtol=1e-5)


# ------------------------------------------------------------ Go2 trajectories


@pytest.mark.parametrize("scenario", ["stand", "step"])
def test_go2_open_loop_trajectory_is_mujocos(scenario):
    """go2_joystick_flat standing, and a thigh/calf target step, over 1 s: base height within 4 mm, orientation
    within 0.015 rad, joints within 0.05 rad, base velocity within 0.03 m/s RMS, IMU up vectors within 0.02
    (measured at most: 1.7 mm, 0.0084 rad, 0.031 rad, 0.022 m/s, 0.0086)."""
    dev = deviations(reference("go2_joystick_flat", scenario), rollout("go2_joystick_flat", "motrix", scenario))
    assert not outside(dev, GO2_OPEN_LOOP), dev


def test_go2_walking_policy_trajectory_is_mujocos():
    """The trained walking policy over 1 s (closed loop, so the deviations feed back through its observations):
    height within 2 cm, orientation within 0.15 rad, joints within 0.3 rad, base velocity within 0.15 m/s
    RMS, up vectors within 0.05 (measured: 1.0 cm, 0.093 rad, 0.13 rad, 0.08 m/s, 0.019); and it walks
    (> 0.3 m forward in both engines)."""
    ref = reference("go2_joystick_flat", "policy")
    run = rollout("go2_joystick_flat", "motrix", "policy")
    dev = deviations(ref, run)
    assert not outside(dev, GO2_POLICY), dev
    for r in (ref, run):
        assert r["qpos"][-1, 0, 0] - r["qpos"][0, 0, 0] > 0.3


def _heavier(body: str):
    """An edit giving `body` 1.3 times its mass."""
    return lambda xml: re.sub(rf'(<body name="{body}".*?<inertial [^>]*mass=")([0-9.]+)',
                              lambda m: m.group(1) + repr(1.3 * float(m.group(2))), xml, count=1, flags=re.S)


def _turned(site: str, angle: float):
    """An edit turning `site` (the frame its sensors read) by `angle` rad about y."""
    return lambda xml: re.sub(rf'(<site name="{site}" )', rf'\g<1>euler="0 {angle} 0" ', xml)


def _frictionless_feet(xml: str) -> str:
    return re.sub(r'(<geom name="(?:FL|FR|RL|RR)" [^>]*friction=")[^"]*"', r'\g<1>0 0 0"', xml)


def _raised_floor(xml: str) -> str:
    return re.sub(r'(<geom name="floor" [^>]*pos=")0.0 0.0 0.0"', r'\g<1>0.0 0.0 0.02"', xml)


@pytest.mark.parametrize("fault, edit, broken", [
    ("base mass x 1.3", _heavier("base"), "height"),
    ("no foot friction", _frictionless_feet, "height"),
    ("floor 2 cm higher", _raised_floor, "height"),
    ("IMU site turned 0.2 rad", _turned("imu", 0.2), "up"),
])
def test_go2_model_faults_on_motrixsim_break_the_parity(motrix_xml_fault, fault, edit, broken):
    """Each fault in the MJCF MotrixSim loads takes the step response outside the open-loop tolerance it
    bears on (a mass or contact fault the base height, a turned sensor site the up vectors)."""
    motrix_xml_fault(edit)
    dev = deviations(reference("go2_joystick_flat", "step"), rollout("go2_joystick_flat", "motrix", "step"))
    assert broken in outside(dev, GO2_OPEN_LOOP), (fault, dev)


def test_go2_gain_fault_breaks_the_parity_and_the_tasks_gains_reach_motrixsim(motrix_xml_fault):
    """MotrixSim servos with kp x 1.5 leave the step response's height and joint tolerances (measured: 2.4 cm,
    0.18 rad); the task's per-env gains (actuator_gainprm/biasprm rows) override the model's, so kp x 1.5 in
    the MJCF alone changes nothing."""
    ref = reference("go2_joystick_flat", "step")
    dev = deviations(ref, rollout("go2_joystick_flat", "motrix", "step", gain_scale=1.5))
    assert {"height", "joints"} <= set(outside(dev, GO2_OPEN_LOOP)), dev
    motrix_xml_fault(lambda xml: re.sub(r'gainprm="35.0" biastype="affine" biasprm="0 -35.0',
                                        'gainprm="52.5" biastype="affine" biasprm="0 -52.5', xml))
    dev = deviations(ref, rollout("go2_joystick_flat", "motrix", "step"))
    assert not outside(dev, GO2_OPEN_LOOP), dev


# ------------------------------------------------------------- G1 trajectories


@pytest.mark.parametrize("task", ["g1_walk_flat", "g1_velocity_flat"])
@pytest.mark.parametrize("scenario", ["stand", "step"])
def test_g1_open_loop_trajectory_is_mujocos(task, scenario):
    """The G1 standing, and an arm target step (shoulder pitch -0.25 rad, elbow +0.25 rad), over 1 s, with
    each task's per-env gains, foot friction and torso CoM: base height within 4 mm, orientation within
    0.015 rad, joints within 0.07 rad, base velocity within 0.015 m/s RMS, up vectors within 0.02 (measured
    at most: 1.7 mm, 0.0063 rad, 0.035 rad, 0.0076 m/s, 0.0077)."""
    dev = deviations(reference(task, scenario), rollout(task, "motrix", scenario))
    assert not outside(dev, G1_OPEN_LOOP), dev


def test_g1_walker_policy_trajectory_is_mujocos():
    """The seed's G1 walker under a trained policy over 1 s (closed loop): height within 2 mm, orientation within
    0.02 rad, joints within 0.03 rad, base velocity within 0.03 m/s RMS, up vector within 0.01 (measured: 0.46 mm,
    0.0089 rad, 0.015 rad, 0.014 m/s, 0.0040); the policy moves its joints (over 0.1 rad) on both engines."""
    ref = reference("g1_walk_flat", "policy")
    run = rollout("g1_walk_flat", "motrix", "policy")
    dev = deviations(ref, run)
    assert not outside(dev, G1_POLICY), dev
    for r in (ref, run):
        assert np.abs(r["qpos"][..., 7:] - r["qpos"][0, :, 7:]).max() > 0.1


def _g1_raised_floor(xml: str) -> str:
    return re.sub(r'(<geom name="floor" )', r'\g<1>pos="0 0 0.02" ', xml)


@pytest.mark.parametrize("fault, edit, broken", [
    ("torso mass x 1.3", _heavier("torso_link"), "height"),
    ("floor 2 cm higher", _g1_raised_floor, "height"),
    ("torso IMU site turned 0.1 rad", _turned("imu_in_torso", 0.1), "up"),
])
def test_g1_model_faults_on_motrixsim_break_the_parity(motrix_xml_fault, fault, edit, broken):
    """On the G1 walker too, each fault in the MJCF MotrixSim loads takes the arm-step response outside the
    open-loop tolerance it bears on: the parity tests above can see a wrong mass, floor or sensor frame
    (measured: height 4.9 mm, 23 mm; up vector 0.10, against 4 mm and 0.02)."""
    motrix_xml_fault(edit)
    dev = deviations(reference("g1_walk_flat", "step"), rollout("g1_walk_flat", "motrix", "step"))
    assert broken in outside(dev, G1_OPEN_LOOP), (fault, dev)


def test_g1_gain_fault_breaks_the_parity():
    """The G1 walker's servos at kp x 1.5 on MotrixSim leave the arm-step response's joint tolerance
    (measured: 0.105 rad against 0.07)."""
    dev = deviations(reference("g1_walk_flat", "step"), rollout("g1_walk_flat", "motrix", "step", gain_scale=1.5))
    assert "joints" in outside(dev, G1_OPEN_LOOP), dev


def test_g1_velocity_foot_contacts_and_forces_are_mujocos():
    """g1_velocity_flat standing: the per-substep foot contact flags agree with MuJoCo's on >= 97% of the
    substeps, and the mean net foot force (MuJoCo's sign and world frame) within 5% of its weight share
    (measured: 99.9%, 1.3%)."""
    ref, run = reference("g1_velocity_flat", "stand"), rollout("g1_velocity_flat", "motrix", "stand")
    assert np.mean((ref["found"] > 0) == (run["found"] > 0)) >= 0.97
    mean_ref, mean_run = ref["foot_force"].mean(axis=(0, 1)), run["foot_force"].mean(axis=(0, 1))  # [2 feet, 3]
    assert (mean_ref[:, 2] < -100).all()  # the foot pushes the floor down: MuJoCo's sign
    np.testing.assert_allclose(mean_run, mean_ref, atol=0.05 * np.abs(mean_ref[:, 2]).max())


def test_g1_per_env_foot_friction_reaches_motrixsim():
    """Foot friction rows of 0.05 and 1.2 (the geom_friction field) under a 1 m/s forward kick: in 0.5 s the
    slippery feet slide back and the others do not, the mean foot x displacement of each env within 2 cm of
    MuJoCo's (measured: -3.9 and +3.6 cm on MuJoCo, -3.2 and +3.7 cm on MotrixSim; with the rows ignored,
    MotrixSim's feet move +4.2 cm in both envs)."""
    moved = {}
    for sim in ("mujoco", "motrix"):
        env = make_env("g1_velocity_flat", 2, 1, 0, sim=sim)
        env.noise = env.pushes = False
        env.reset()
        friction = env._sim.field("geom_friction").reshape(2, env.model.ngeom, 3)
        friction[:, env.foot_geoms, 0] = np.array([[0.05], [1.2]])
        qvel = np.zeros((2, env.model.nv))
        qvel[:, 0] = 1.0
        env.set_state(np.tile(env.init_qpos, (2, 1)), qvel)
        feet_x = env._cols["foot_z"] - 2
        start = env._sim.output("sensordata")[:, feet_x].copy()
        for _ in range(25):
            assert not env.step(np.zeros((2, 29))).terminated.any()
        moved[sim] = (env._sim.output("sensordata")[:, feet_x] - start).mean(axis=1)
        env.close()
    assert moved["mujoco"][0] < -0.03 and moved["mujoco"][1] > 0.0
    np.testing.assert_allclose(moved["motrix"], moved["mujoco"], atol=0.02)


def test_g1_self_collisions_are_counted_as_on_mujoco():
    """An arm pushed through the torso counts a self-contact over 10 N in all 4 substeps, as on MuJoCo; the
    home pose counts none."""
    counts = {}
    for sim in ("mujoco", "motrix"):
        env = make_env("g1_velocity_flat", 2, 1, 0, sim=sim)
        env.noise = env.pushes = False
        env.reset()
        qpos = np.tile(env.init_qpos, (2, 1))
        qpos[1, env.model.joint("left_shoulder_roll_joint").qposadr[0]] = -1.0  # the left arm through the torso
        env.set_state(qpos, np.zeros((2, env.model.nv)))
        env.step(np.zeros((2, 29)))
        counts[sim] = env.self_collision_count.copy()
        env.close()
    np.testing.assert_array_equal(counts["mujoco"], [0, 4])
    np.testing.assert_array_equal(counts["motrix"], counts["mujoco"])


def test_g1_motion_tracking_replay_is_mujocos(clip):
    """Replaying the clip's joint targets from its first frame for 0.2 s: base height within 4 mm, joints within
    0.05 rad, the four pose terms within 1% of their maximum of MuJoCo's and the two velocity terms within 10%
    (measured: 1.0 mm, 0.016 rad, 0.54%, 6.9%: the velocity terms differ most in the first steps' landing)."""
    runs = {}
    for sim in ("mujoco", "motrix"):
        env = make_env("g1_motion_tracking", 2, 1, 0, motion_file=str(clip), sim=sim)
        env.noise = env.init_noise = env.pushes = False
        env.sampling_mode = "start"
        env.reset()
        qpos, terms = [], []
        for _ in range(10):
            result = env.step((env.ref_joint_pos[env.frame] - env.default_joint_pos) / env.action_scale)
            qpos.append(env.qpos.copy())
            terms.append(np.stack([result.terms[k] / (w * env.dt) for k, w in
                                   (("motion_global_root_pos", 0.5), ("motion_global_root_ori", 0.5),
                                    ("motion_body_pos", 1.0), ("motion_body_ori", 1.0),
                                    ("motion_body_lin_vel", 1.0), ("motion_body_ang_vel", 1.0))]))
        runs[sim] = np.array(qpos), np.array(terms)
        env.close()
    (q_ref, t_ref), (q_run, t_run) = runs["mujoco"], runs["motrix"]
    assert np.abs(q_ref[..., 2] - q_run[..., 2]).max() < 0.004
    assert np.abs(q_ref[..., 7:] - q_run[..., 7:]).max() < 0.05
    assert np.abs(t_ref[:, :4] - t_run[:, :4]).max() < 0.01
    assert np.abs(t_ref[:, 4:] - t_run[:, 4:]).max() < 0.1


# -------------------------------------------------------------- the interface


def _go2(n: int = 2):
    env = make_env("go2_joystick_flat", n, 1, 0, sim="motrix")
    env.reset()
    return env


def test_a_reset_or_state_write_of_one_row_leaves_the_others_untouched():
    """Resetting env 1 mid-run leaves env 0's trajectory bit-identical to a run without that reset; a step of
    row 1 alone leaves row 0 where it was."""
    runs = []
    for reset in (False, True):
        env = _go2()
        rng = np.random.default_rng(0)
        for t in range(20):
            if reset and t == 10:
                env._reset_rows(np.array([1], np.int32))
            env.step(rng.normal(size=(2, 12)))
        runs.append(env.qpos.copy())
        env.close()
    np.testing.assert_array_equal(runs[0][0], runs[1][0])
    assert not np.array_equal(runs[0][1], runs[1][1])
    env = _go2()
    qpos = env.qpos.copy()
    env._sim.step(2, ids=np.array([1], np.int32))  # a step of row 1 only
    np.testing.assert_array_equal(env.qpos[0], qpos[0])
    assert not np.array_equal(env.qpos[1], qpos[1])
    env.close()


def test_a_push_written_into_qvel_rows_reaches_motrixsim_as_on_mujoco():
    """G1Env's push (a direct write to qvel rows, then forward of those rows) gives the pushed row MuJoCo's
    sensors and next step, and leaves the other row as it was."""
    sensors, states = {}, {}
    for sim in ("mujoco", "motrix"):
        env = make_env("g1_velocity_flat", 2, 1, 0, sim=sim)
        env.noise = env.pushes = False
        env.reset()
        env.set_state(np.tile(env.init_qpos, (2, 1)), np.zeros((2, env.model.nv)))
        before = env._sim.output("sensordata").copy()
        env.qvel[1, :6] += (0.4, -0.3, 0.2, 0.5, -0.4, 0.3)
        env._sim.forward(STAGE_VEL, np.array([1], np.int32))
        after = env._sim.output("sensordata")
        np.testing.assert_array_equal(after[0], before[0])
        velocity = [env.model.sensor(k) for k in ("imu_lin_vel", "imu_ang_vel", "root_angmom", "torso_angvel")]
        sensors[sim] = np.concatenate([after[1, s.adr[0]:s.adr[0] + 3] for s in velocity])
        env.step(np.zeros((2, 29)))
        states[sim] = env.qvel.copy()
        env.close()
    assert np.abs(sensors["mujoco"]).min() > 0.01  # every component moved by the push
    np.testing.assert_allclose(sensors["motrix"], sensors["mujoco"], atol=1e-4)
    np.testing.assert_allclose(states["motrix"][1, :6], states["mujoco"][1, :6], atol=0.02)
    assert np.abs(states["mujoco"][1, :6] - states["mujoco"][0, :6]).max() > 0.2


def test_step_async_and_per_substep_reads_match_step():
    """step_async + wait gives what step gives; after_substep(k) runs after each substep with that substep's
    sensors (MuJoCo's timing: the last one's are the step's)."""
    physics = {k: _go2()._sim for k in ("sync", "async", "hook")}
    rng = np.random.default_rng(1)
    seen: list[tuple[int, np.ndarray]] = []
    hook = physics["hook"]
    for _ in range(5):
        ctrl = rng.normal(size=(2, 12)) * 0.3 + physics["sync"].qpos[:, 7:]
        for p in physics.values():
            p.ctrl[:] = ctrl
        physics["sync"].step(2)
        physics["async"].step_async(2)
        physics["async"].wait()
        seen.clear()
        hook.step(2, after_substep=lambda k: seen.append((k, hook.output("sensordata").copy())))
    assert [k for k, _ in seen] == [0, 1]
    assert not np.array_equal(seen[0][1], seen[1][1])
    for p in ("async", "hook"):
        np.testing.assert_array_equal(physics[p].qpos, physics["sync"].qpos)
        np.testing.assert_array_equal(physics[p].output("sensordata"), physics["sync"].output("sensordata"))
    np.testing.assert_array_equal(seen[-1][1], physics["sync"].output("sensordata"))
    for p in physics.values():
        p.close()


def test_randomisation_motrixsim_cannot_apply_is_refused():
    """A per-env field MotrixSim cannot express raises at the next call instead of being ignored; so do an
    unknown field or output."""
    env = _go2()
    try:
        gain = env._sim.field("actuator_gainprm").reshape(2, 12, -1)
        gain[1, 3, 1] = 2.0  # a gain parameter beyond the fixed gain
        with pytest.raises(NotImplementedError, match="FR_hip"):
            env.step(np.zeros((2, 12)))
        with pytest.raises(ValueError, match="body_mass"):
            env._sim.field("body_mass")
        with pytest.raises(ValueError, match="qfrc_actuator"):
            env._sim.output("qfrc_actuator")
    finally:
        env.close()


def test_motrixsim_refuses_what_it_cannot_load_by_name():
    """A sensor MotrixSim has no counterpart for is refused at construction, naming it."""
    xml = """<mujoco><worldbody><body name="b"><freejoint/><geom size="0.1"/><site name="s"/></body></worldbody>
    <sensor><framequat name="q" objtype="site" objname="s" reftype="body" refname="world"/></sensor></mujoco>"""
    model = mujoco.MjModel.from_xml_string(xml)
    with pytest.raises(NotImplementedError, match="'q'"):
        MotrixPhysics(model, xml, 2, 1)
