"""The G1 MJCF against the robot facts (g1_facts.json), read here independently of the model builder.

No stand test: with the facts' soft gains a PD hold of the default pose tips over (TASKS.md, section 3).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import mujoco
import numpy as np
import pytest

from collector.envs.g1 import model as g1_model

FACTS = json.loads((Path(g1_model.__file__).parent / "g1_facts.json").read_text())
HINGES = [j for j in FACTS["joints"] if j["type"] == "hinge"]
HOME = np.array(FACTS["home_keyframe"]["qpos"])
# The facts' lowest foot-capsule bottom (centre z - radius) at the keyframe, written to 5 decimals.
SOLE_Z = FACTS["home_keyframe"]["lowest_sole_z_at_keyframe"]
LEG_CHAIN = ("hip_pitch_link", "hip_roll_link", "hip_yaw_link", "knee_link", "ankle_pitch_link", "ankle_roll_link")


@pytest.fixture(scope="module")
def model() -> mujoco.MjModel:
    return g1_model.build_model()


@pytest.fixture
def home(model) -> mujoco.MjData:
    """MjData at the home keyframe, positions computed."""
    data = mujoco.MjData(model)
    mujoco.mj_resetDataKeyframe(model, data, model.key("home").id)
    mujoco.mj_forward(model, data)
    return data


def test_compiles_with_free_root_29_hinges_30_bodies_and_the_facts_sim_options(model):
    """nq = 7 + 29, nv = 6 + 29, nu = 29, 30 robot bodies under the world; the 0.005 s step and mjlab's solver."""
    assert len(HINGES) == 29 and len(FACTS["bodies"]) == 30
    assert (model.nq, model.nv, model.nu, model.nbody) == (36, 35, 29, 31)
    assert model.jnt_type[0] == mujoco.mjtJoint.mjJNT_FREE and model.body(int(model.jnt_bodyid[0])).name == "pelvis"
    assert all(t == mujoco.mjtJoint.mjJNT_HINGE for t in model.jnt_type[1:])
    sim = FACTS["mjlab_sim"]
    assert model.opt.timestep == sim["timestep"] == 0.005
    assert model.opt.integrator == mujoco.mjtIntegrator.mjINT_IMPLICITFAST
    assert model.opt.cone == mujoco.mjtCone.mjCONE_PYRAMIDAL and model.opt.impratio == sim["impratio"]
    assert model.opt.solver == mujoco.mjtSolver.mjSOL_NEWTON
    assert (model.opt.iterations, model.opt.ls_iterations) == (sim["iterations"], sim["ls_iterations"])
    np.testing.assert_allclose(model.opt.gravity, sim["gravity"])


def test_bodies_tree_and_inertials_equal_the_facts(model):
    """Every body's parent, pose in its parent, mass, COM and principal inertia are the facts'."""
    for b in FACTS["bodies"]:
        body = model.body(b["name"])
        assert model.body(int(body.parentid[0])).name == b["parent"]
        np.testing.assert_allclose(body.pos, b["pos_in_parent"], atol=1e-12)
        q = np.array(b["quat_in_parent"])
        np.testing.assert_allclose(body.quat, q / np.linalg.norm(q), atol=1e-9)
        assert body.mass[0] == pytest.approx(b["mass"], rel=1e-12)
        np.testing.assert_allclose(body.ipos, b["com_pos"], atol=1e-12)
        np.testing.assert_allclose(body.inertia, b["diag_inertia"], rtol=1e-9)
    # Body order is the motion clips' body order (depth first).
    assert [model.body(i).name for i in range(1, model.nbody)] == FACTS["motion_clip_layout"]["body_order_model"]


def test_total_mass_is_33_341_kg(model):
    """The robot's mass equals the facts' total (33.341142 kg) and the sum of the facts' body masses to 1e-3 kg."""
    total = model.body_subtreemass[model.body("pelvis").id]
    assert total == pytest.approx(33.341, abs=1e-3)
    assert total == pytest.approx(FACTS["total_mass"], abs=1e-3)
    assert total == pytest.approx(sum(b["mass"] for b in FACTS["bodies"]), abs=1e-3)
    assert model.body_mass.sum() == pytest.approx(total, abs=1e-12)  # visual geoms add nothing


def test_joint_names_order_ranges_and_dof_parameters_equal_the_facts(model):
    """Hinge names in qpos order, axes, ranges (limited), armature, damping and frictionloss are the facts'."""
    names = [j["name"] for j in HINGES]
    assert [model.joint(i).name for i in range(1, model.njnt)] == names == g1_model.joint_names()
    assert names == FACTS["motion_clip_layout"]["joint_order_model"]
    for j in HINGES:
        joint = model.joint(j["name"])
        assert model.body(int(joint.bodyid[0])).name == j["body"]
        np.testing.assert_allclose(joint.axis, j["axis"])
        np.testing.assert_allclose(joint.range, j["range"])
        assert joint.limited[0]
        dof = int(joint.dofadr[0])
        assert model.dof_armature[dof] == j["armature"]
        assert model.dof_damping[dof] == j["damping"] and model.dof_frictionloss[dof] == j["frictionloss"]


def test_each_actuator_is_a_pd_servo_with_the_facts_kp_kd_and_force_limit(model):
    """Actuator i drives hinge i with gain kp, bias (0, -kp, -kd), force limit +-effort, ctrl unlimited."""
    names = [j["name"] for j in HINGES]
    assert len(FACTS["actuators"]) == model.nu == 29
    for a in FACTS["actuators"]:
        act = model.actuator(a["name"])
        assert model.joint(int(act.trnid[0])).name == a["joint"]
        assert act.id == names.index(a["joint"])
        assert act.gainprm[0] == a["kp"]
        np.testing.assert_array_equal(act.biasprm[:3], [0.0, -a["kp"], -a["kd"]])
        assert act.forcelimited[0] and not act.ctrllimited[0]
        np.testing.assert_allclose(act.forcerange, a["forcerange"])
        # The facts' actuator armature is the one on its joint.
        assert model.dof_armature[int(model.joint(a["joint"]).dofadr[0])] == a["armature"]


def test_home_keyframe_is_the_facts_default_pose(model):
    """The keyframe's qpos is the facts' knees-bent pose at root height 0.76; ctrl holds its joint angles."""
    key = model.key("home")
    np.testing.assert_array_equal(key.qpos, HOME)
    assert key.qpos[2] == FACTS["home_keyframe"]["base_pos"][2] == 0.76
    by_name = FACTS["home_keyframe"]["joint_pos"]
    np.testing.assert_array_equal(key.qpos[7:], [by_name[j["name"]] for j in HINGES])
    np.testing.assert_array_equal(key.ctrl, FACTS["home_keyframe"]["ctrl"])
    np.testing.assert_array_equal(g1_model.default_joint_pos(), key.qpos[7:])


def test_collision_geoms_keep_the_facts_contact_settings_and_visuals_never_collide(model):
    """Each of the 33 primitives has the facts' shape, pose, friction, condim, contype/conaffinity and priority."""
    sizes = {"sphere": 1, "capsule": 2}
    assert len(FACTS["collision_geoms"]) == 33
    for g in FACTS["collision_geoms"]:
        geom = model.geom(g["name"])
        assert model.body(int(geom.bodyid[0])).name == g["body"]
        assert geom.type[0] == getattr(mujoco.mjtGeom, f"mjGEOM_{g['type'].upper()}")
        n = sizes[g["type"]]
        np.testing.assert_allclose(geom.size[:n], g["size_mujoco_convention"][:n])
        np.testing.assert_allclose(geom.pos, g["pos"], atol=1e-12)
        np.testing.assert_allclose(geom.friction, g["friction"])
        assert (geom.condim[0], geom.contype[0], geom.conaffinity[0]) == (g["condim"], g["contype"], g["conaffinity"])
        assert geom.priority[0] == g["priority"] and geom.margin[0] == g["margin"]
        assert geom.group[0] == 3  # hidden: the coloured copies show the robot
    for foot in FACTS["feet"]["geoms"]:
        assert (model.geom(foot).condim[0], model.geom(foot).priority[0], model.geom(foot).friction[0]) == (3, 1, 0.6)
    floor = model.geom("floor")
    assert floor.type[0] == mujoco.mjtGeom.mjGEOM_PLANE and floor.condim[0] == 3
    np.testing.assert_allclose(floor.friction, [1.0, 0.005, 0.0001])
    robot = [i for i in range(model.ngeom) if model.geom_bodyid[i] != 0]
    visual = [i for i in robot if model.geom(i).name.endswith("_visual")]
    assert len(visual) == len(robot) - 33 == 33
    for i in visual:
        assert model.geom_contype[i] == 0 and model.geom_conaffinity[i] == 0 and model.geom_group[i] == 2


def test_contact_excludes_are_present(model):
    """Each of the facts' excluded body pairs is in the model's exclude list (and nothing else is)."""
    pairs = {tuple(sorted((model.body(int(s >> 16)).name, model.body(int(s & 0xFFFF)).name)))
             for s in model.exclude_signature}
    assert pairs == {tuple(sorted(p)) for p in FACTS["contact_excludes"]}
    assert len(pairs) == 4


def test_sites_and_sensors_of_the_facts_exist(model):
    """The six sites (feet among them) sit on their bodies; the five sensors have the facts' kind and size."""
    for s in FACTS["sites"]:
        site = model.site(s["name"])
        assert model.body(int(site.bodyid[0])).name == s["body"]
        np.testing.assert_allclose(site.pos, s["pos"])
    assert FACTS["feet"]["sites"] == ["left_foot", "right_foot"] == list(g1_model.FEET)
    for foot, body in zip(FACTS["feet"]["sites"], FACTS["feet"]["contact_bodies"], strict=True):
        assert model.body(int(model.site(foot).bodyid[0])).name == body
    assert model.nsensor == len(FACTS["sensors"]) == 5
    for s in FACTS["sensors"]:
        sensor = model.sensor(s["name"])
        assert sensor.type[0] == getattr(mujoco.mjtSensor, s["kind"]) and sensor.dim[0] == s["dim"]
        objtype, objname = s["object"]
        assert sensor.objtype[0] == getattr(mujoco.mjtObj, objtype)
        assert mujoco.mj_id2name(model, sensor.objtype[0], sensor.objid[0]) == objname


def test_home_pose_feet_rest_on_the_ground(model, home):
    """At the keyframe the soles are 3.54 mm up (the facts' figure), nothing touches the floor, foot sites are low.

    The facts give the lowest foot-capsule bottom (centre z - radius) as 0.00354 m to 5 decimals, so 1e-5 is
    their rounding.  The foot is pitched by the keyframe's net 6 mrad, so a capsule's end dips below that, but
    stays above z = 0: no contact at spawn.
    """
    feet = [model.geom(n).id for n in FACTS["feet"]["geoms"]]
    bottoms = [home.geom_xpos[i][2] - model.geom_size[i][0] for i in feet]
    assert min(bottoms) == pytest.approx(SOLE_Z, abs=1e-5)
    lowest = [home.geom_xpos[i][2] - abs(home.geom_xmat[i][8]) * model.geom_size[i][1] - model.geom_size[i][0]
              for i in feet]
    assert 0.0 < min(lowest) <= SOLE_Z
    assert home.ncon == 0
    for site in FACTS["feet"]["sites"]:
        # The foot sites are 2 mm below the soles in the foot frame: between the ground and the sole height.
        assert 0.0 < home.site(site).xpos[2] < SOLE_Z


def test_home_pose_is_upright(model, home):
    """Pelvis at 0.76 m, level; each leg descends pelvis > hip > knee > ankle; torso and head above; feet lowest."""
    pelvis = home.body("pelvis")
    assert pelvis.xpos[2] == pytest.approx(0.76)
    np.testing.assert_allclose(pelvis.xmat.reshape(3, 3)[:, 2], [0, 0, 1], atol=1e-12)
    for side in ("left", "right"):
        zs = [home.body(f"{side}_{link}").xpos[2] for link in LEG_CHAIN]
        assert pelvis.xpos[2] > zs[0] and zs[1] > zs[3] > zs[5], (side, zs)  # hip_pitch/roll share a height
    assert home.body("torso_link").xpos[2] > pelvis.xpos[2]
    # Pelvis above every leg body; the head the highest robot geom, the feet the lowest.
    legs = [home.body(f"{side}_{link}").xpos[2] for side in ("left", "right") for link in LEG_CHAIN]
    assert pelvis.xpos[2] > max(legs)
    robot = [i for i in range(model.ngeom) if model.geom_bodyid[i] != 0 and model.geom_contype[i]]
    top = home.geom_xpos[robot, 2] + model.geom_rbound[robot]
    assert model.geom(robot[int(np.argmax(top))]).name == "head_collision"
    assert top.max() > 1.2  # a ~1.3 m humanoid
    bottom_body = model.geom_bodyid[robot[int(np.argmin(home.geom_xpos[robot, 2]))]]
    assert model.body(int(bottom_body)).name in FACTS["feet"]["contact_bodies"]


@pytest.mark.parametrize("target", ["home", "zero"])
def test_pd_steps_from_the_keyframe_stay_finite(model, home, target):
    """300 physics steps (1.5 s) of the PD servos from the keyframe, targets the home pose or all zeros, no NaN."""
    home.ctrl[:] = HOME[7:] if target == "home" else 0.0
    for _ in range(300):
        mujoco.mj_step(model, home)
    assert np.isfinite(home.qpos).all() and np.isfinite(home.qvel).all() and np.isfinite(home.qacc).all()
    assert home.warning[mujoco.mjtWarning.mjWARN_BADQACC].number == 0
    assert home.qpos[2] > 0.1  # it may fall, but it does not pass through the floor


# In a child process, so that MUJOCO_GL=egl takes effect whatever this process imported first.
_RENDER_SCRIPT = textwrap.dedent("""
    import sys
    import mujoco
    import numpy as np
    from collector.envs.g1.model import build_model
    model = build_model()
    data = mujoco.MjData(model)
    mujoco.mj_resetDataKeyframe(model, data, 0)
    mujoco.mj_forward(model, data)
    try:
        renderer = mujoco.Renderer(model, 240, 240)
    except Exception as exc:
        print(f"EGL rendering unavailable: {exc}")
        sys.exit(3)
    camera = mujoco.MjvCamera()
    camera.type = mujoco.mjtCamera.mjCAMERA_FREE
    camera.lookat[:] = (0.0, 0.0, 0.65)
    camera.distance, camera.azimuth, camera.elevation = 3.0, 180.0, 0.0  # level, from the front
    renderer.enable_segmentation_rendering()
    renderer.update_scene(data, camera=camera)
    seg = renderer.render()
    renderer.disable_segmentation_rendering()
    renderer.update_scene(data, camera=camera)
    rgb = renderer.render()
    np.savez(sys.argv[1], seg=seg, rgb=rgb)
""")


def test_home_pose_renders_as_a_standing_figure(tmp_path):
    """An EGL render from the front: the robot's pixels form a box taller than wide (a standing figure)."""
    out = tmp_path / "frame.npz"
    env = {**os.environ, "MUJOCO_GL": "egl"}
    proc = subprocess.run([sys.executable, "-c", _RENDER_SCRIPT, str(out)], env=env, capture_output=True, text=True,
                          timeout=120, cwd=Path(__file__).resolve().parents[2])
    if proc.returncode == 3:
        pytest.skip(proc.stdout.strip())
    assert proc.returncode == 0, proc.stderr
    frames = np.load(out)
    seg, rgb = frames["seg"], frames["rgb"]
    model = g1_model.build_model()
    # Segmentation gives (object id, object type) per pixel; the robot is every geom not on the world body.
    is_geom = seg[..., 1] == mujoco.mjtObj.mjOBJ_GEOM
    ids = np.where(is_geom, seg[..., 0], 0)
    robot = is_geom & (model.geom_bodyid[ids] != 0)
    rows, cols = np.nonzero(robot)
    assert rows.size > 500, "the robot is hardly visible"
    height, width = rows.max() - rows.min() + 1, cols.max() - cols.min() + 1
    assert height > 1.5 * width, (height, width)
    assert rows.max() < seg.shape[0] - 1 and rows.min() > 0  # the whole figure is in frame
    # The colour image shows the same figure: it differs from the background where the robot is.
    assert rgb[robot].std() > 0 and rgb.shape == (240, 240, 3)
