"""The seed's G1 MJCF (g1_walk_flat's robot) against the seed's numbers, typed here from its g1.xml and scene."""

from __future__ import annotations

import json
from pathlib import Path

import mujoco
import numpy as np
import pytest

from collector.envs.g1 import model as g1_model
from collector.envs.g1 import walk_model

MJLAB = json.loads((Path(g1_model.__file__).parent / "g1_facts.json").read_text())
HINGES = [j for j in MJLAB["joints"] if j["type"] == "hinge"]
TOTAL_MASS = 33.341142
# Joint-name part -> (kp, kv, force limit), the seed's <position> actuators.
GAINS = {"hip_pitch": (40.179, 2.558, 88), "hip_yaw": (40.179, 2.558, 88), "waist_yaw": (40.179, 2.558, 88),
         "hip_roll": (99.098, 6.309, 139), "knee": (99.098, 6.309, 139),
         "ankle_pitch": (28.501, 1.814, 50), "ankle_roll": (28.501, 1.814, 50), "waist_roll": (28.501, 1.814, 50),
         "waist_pitch": (28.501, 1.814, 50), "shoulder_pitch": (14.251, 0.907, 25),
         "shoulder_roll": (14.251, 0.907, 25), "shoulder_yaw": (14.251, 0.907, 25), "elbow": (14.251, 0.907, 25),
         "wrist_roll": (14.251, 0.907, 25), "wrist_pitch": (16.778, 1.068, 5), "wrist_yaw": (16.778, 1.068, 5)}
# The 4 contact spheres of each foot in the ankle_roll_link frame.
FOOT_SPHERES = {0: (-0.05, 0.025, -0.03), 1: (-0.05, -0.025, -0.03), 2: (0.12, 0.03, -0.03), 3: (0.12, -0.03, -0.03)}
SITES = {"imu_in_pelvis": ("pelvis", (0.04525, 0, -0.08339)),
         "imu_in_torso": ("torso_link", (-0.03959, -0.00224, 0.14792)),
         "left_foot": ("left_ankle_roll_link", (0.04, 0, -0.037)),
         "right_foot": ("right_ankle_roll_link", (0.04, 0, -0.037))}
SENSORS = {"pelvis_local_linvel": (mujoco.mjtSensor.mjSENS_VELOCIMETER, "imu_in_pelvis"),
           "torso_gyro": (mujoco.mjtSensor.mjSENS_GYRO, "imu_in_torso"),
           "torso_upvector": (mujoco.mjtSensor.mjSENS_FRAMEZAXIS, "imu_in_torso"),
           "left_foot_pos": (mujoco.mjtSensor.mjSENS_FRAMEPOS, "left_foot"),
           "right_foot_pos": (mujoco.mjtSensor.mjSENS_FRAMEPOS, "right_foot")}
LEG = {"hip_pitch": -0.312, "knee": 0.669, "ankle_pitch": -0.363}


@pytest.fixture(scope="module")
def model() -> mujoco.MjModel:
    return walk_model.build_model()


def _part(joint: str) -> str:
    """left_hip_pitch_joint -> hip_pitch."""
    return joint.removeprefix("left_").removeprefix("right_").removesuffix("_joint")


def _colliding(model) -> dict[str, int]:
    return {model.geom(i).name: i for i in range(model.ngeom) if model.geom_contype[i] or model.geom_conaffinity[i]}


def test_options_are_the_seeds():
    """1/150 s implicitfast, MuJoCo's Newton solver with 100 / 50 iterations and the pyramidal cone."""
    opt = walk_model.build_model().opt
    assert opt.timestep == pytest.approx(1 / 150, abs=1e-15)
    assert opt.integrator == mujoco.mjtIntegrator.mjINT_IMPLICITFAST
    assert opt.solver == mujoco.mjtSolver.mjSOL_NEWTON
    assert (opt.iterations, opt.ls_iterations) == (100, 50)
    assert opt.cone == mujoco.mjtCone.mjCONE_PYRAMIDAL


def test_total_mass(model):
    """The robot weighs the seed's 33.341142 kg."""
    assert model.body_mass.sum() == pytest.approx(TOTAL_MASS, abs=1e-6)


def test_every_joint_armature_frictionloss_and_range(model):
    """Each of the 29 hinges has armature 0.01, friction loss 0.3, no damping and the G1's range, in qpos order."""
    assert [model.joint(i).name for i in range(1, model.njnt)] == [j["name"] for j in HINGES]
    for i, j in enumerate(HINGES, start=1):
        dof = model.jnt_dofadr[i]
        assert (model.dof_armature[dof], model.dof_frictionloss[dof], model.dof_damping[dof]) == (0.01, 0.3, 0.0), j
        np.testing.assert_allclose(model.jnt_range[i], j["range"], err_msg=j["name"])
    assert model.dof_armature[:6].tolist() == [0.0] * 6


def test_every_actuator_gains_and_force_range(model):
    """Action i drives joint i with the seed's kp, kv and force limit for its group; ctrl unlimited."""
    assert model.nu == 29
    for i in range(model.nu):
        joint = model.joint(model.actuator_trnid[i, 0]).name
        assert joint == HINGES[i]["name"]
        kp, kv, force = GAINS[_part(joint)]
        assert model.actuator_gainprm[i, 0] == kp, joint
        np.testing.assert_array_equal(model.actuator_biasprm[i, :3], [0.0, -kp, -kv], err_msg=joint)
        np.testing.assert_array_equal(model.actuator_forcerange[i], [-force, force], err_msg=joint)
        assert model.actuator_forcelimited[i] and not model.actuator_ctrllimited[i]


def test_every_colliding_geom(model):
    """mjlab's 33 primitives at condim 3 (foot capsules friction 0.6, priority 0) plus 4 contact spheres per foot."""
    colliding = _colliding(model)
    spheres = {f"{side}_foot_contact_{k}_geom" for side in ("left", "right") for k in FOOT_SPHERES}
    assert set(colliding) == {"floor"} | {g["name"] for g in MJLAB["collision_geoms"]} | spheres
    for g in MJLAB["collision_geoms"]:
        i = colliding[g["name"]]
        assert model.geom_condim[i] == 3 and model.geom_priority[i] == 0, g["name"]
        np.testing.assert_allclose(model.geom_size[i], g["size_mujoco_convention"], atol=1e-12, err_msg=g["name"])
        np.testing.assert_allclose(model.geom_pos[i], g["pos"], atol=1e-9, err_msg=g["name"])
        friction = 0.6 if "_foot" in g["name"] else 1.0
        assert model.geom_friction[i, 0] == friction, g["name"]
    feet = [g for g in MJLAB["collision_geoms"] if "_foot" in g["name"]]
    assert len(feet) == 14 and all(model.geom_size[colliding[g["name"]], 0] == 0.01 for g in feet)
    for name in spheres:
        i = colliding[name]
        side, k = name.split("_")[0], int(name.split("_")[3])
        assert model.body(model.geom_bodyid[i]).name == f"{side}_ankle_roll_link"
        assert model.geom_type[i] == mujoco.mjtGeom.mjGEOM_SPHERE and model.geom_size[i, 0] == 0.005
        np.testing.assert_allclose(model.geom_pos[i], FOOT_SPHERES[k], atol=1e-12)
        assert (model.geom_friction[i, 0], model.geom_condim[i], model.geom_priority[i]) == (0.6, 3, 1)


def test_contact_excludes(model):
    """Elbow-wrist_pitch and pelvis-hip_roll never collide, on each side."""
    pairs = set()
    for sig in model.exclude_signature:
        pairs.add(frozenset((model.body(int(sig) >> 16).name, model.body(int(sig) & 0xFFFF).name)))
    assert pairs == {frozenset(p) for side in ("left", "right")
                     for p in ((f"{side}_elbow_link", f"{side}_wrist_pitch_link"), ("pelvis", f"{side}_hip_roll_link"))}


def test_sites_and_sensors(model):
    """IMU and foot sites where the seed puts them, and the sensors the task reads attached to them."""
    for name, (body, pos) in SITES.items():
        site = model.site(name)
        assert model.body(site.bodyid[0]).name == body
        np.testing.assert_allclose(site.pos, pos, atol=1e-12)
    for name, (kind, site) in SENSORS.items():
        s = model.sensor(name)
        assert s.type[0] == kind and model.site(s.objid[0]).name == site, name


def test_sensors_read_what_they_claim(model):
    """At a random moving state: the velocimeter is the IMU site's own-frame velocity, up-vector and foot positions
    the site frames', the gyro the torso's angular velocity in its frame."""
    data = mujoco.MjData(model)
    rng = np.random.default_rng(0)
    mujoco.mj_resetDataKeyframe(model, data, model.key(walk_model.STAND).id)
    data.qpos[7:] += rng.uniform(-0.2, 0.2, 29)
    data.qvel[:] = rng.uniform(-0.5, 0.5, model.nv)
    mujoco.mj_forward(model, data)

    def read(name):
        s = model.sensor(name)
        return data.sensordata[s.adr[0]:s.adr[0] + s.dim[0]]

    vel = np.zeros(6)
    mujoco.mj_objectVelocity(model, data, mujoco.mjtObj.mjOBJ_SITE, model.site("imu_in_pelvis").id, vel, 1)
    np.testing.assert_allclose(read("pelvis_local_linvel"), vel[3:], atol=1e-9)
    mujoco.mj_objectVelocity(model, data, mujoco.mjtObj.mjOBJ_SITE, model.site("imu_in_torso").id, vel, 1)
    np.testing.assert_allclose(read("torso_gyro"), vel[:3], atol=1e-9)
    np.testing.assert_allclose(read("torso_upvector"), data.site("imu_in_torso").xmat.reshape(3, 3)[:, 2], atol=1e-12)
    for foot in ("left_foot", "right_foot"):
        np.testing.assert_allclose(read(f"{foot}_pos"), data.site(foot).xpos, atol=1e-12)


def test_stand_keyframe(model):
    """Root at (0, 0, 0.754) upright, legs bent, arms forward and out, ctrl = the joint angles."""
    key = model.key(walk_model.STAND)
    np.testing.assert_allclose(key.qpos[:7], [0, 0, 0.754, 1, 0, 0, 0])
    expected = []
    for j in HINGES:
        part, left = _part(j["name"]), j["name"].startswith("left_")
        value = LEG.get(part, 0.0)
        value = {"shoulder_pitch": 0.2, "elbow": 0.6, "shoulder_roll": 0.2 if left else -0.2}.get(part, value)
        expected.append(value)
    np.testing.assert_allclose(key.qpos[7:], expected)
    np.testing.assert_allclose(key.ctrl, expected)
    np.testing.assert_allclose(walk_model.default_joint_pos(), expected)


def test_feet_touch_the_floor_through_the_spheres_at_friction_0_6(model):
    """Dropped from the keyframe, the feet touch through the priority-1 spheres, each at friction 0.6, condim 3."""
    data = mujoco.MjData(model)
    mujoco.mj_resetDataKeyframe(model, data, model.key(walk_model.STAND).id)
    for _ in range(30):  # 0.2 s: the robot settles onto its feet
        mujoco.mj_step(model, data)
    floor = model.geom("floor").id
    spheres = {model.geom(f"{s}_foot_contact_{k}_geom").id for s in ("left", "right") for k in FOOT_SPHERES}
    on_floor = [c for c in data.contact[:data.ncon] if floor in (c.geom1, c.geom2)]
    touching = {int(c.geom1 if c.geom2 == floor else c.geom2) for c in on_floor}
    assert len(touching & spheres) >= 4
    for c in on_floor:
        other = int(c.geom1 if c.geom2 == floor else c.geom2)
        if other in spheres:
            assert c.friction[0] == pytest.approx(0.6) and c.dim == 3
