"""MJCF of the Unitree G1 (29 dof) on flat ground, generated from the numbers in g1_facts.json.

As for the Go2, no mesh files exist here: the 33 collision primitives of the
facts carry the physics, and visual-only copies of them (contype = conaffinity
= 0, group 2, coloured) draw the robot, while the collision geoms sit in group
3, hidden by MuJoCo's default visible groups (0-2).  Bodies carry their
explicit inertials, so no geom contributes mass.

Choices the facts leave open, and why:
- The simulation options are the ones mjlab applies at run time (the facts'
  `mjlab_sim`: 0.005 s step, implicitfast, Newton with 10/20 iterations,
  pyramidal cone, impratio 1), not the XML's 0.002 s MuJoCo default, because
  the G1 tasks (control dt 0.02 s = 4 substeps) are defined with them.
- njmax / nconmax differ between the two G1 tasks (300 / 250 constraints), so
  the model leaves MuJoCo's own arena sizing; a task may set them.
- Actuators are `general` PD servos exactly as MuJoCo compiles mjlab's
  `<position kp kv>`: ctrl is the joint target, gain kp on ctrl and affine bias
  (0, -kp, -kd), force limited to the effort limit, ctrl unlimited.  They are
  listed in joint (qpos) order, as the facts list them, not in mjlab's
  group-by-group ctrl order, so that action i drives joint i.
- Joint damping and frictionloss are the facts' (0); the PD damping kd is in
  the actuator, which implicitfast integrates implicitly.
- The ground is the facts' plane: MuJoCo's default friction (1, 0.005, 0.0001),
  condim 3, priority 0, so the feet's priority 1 and friction 0.6 decide
  foot contacts.
- The home keyframe is mjlab's KNEES_BENT_KEYFRAME (the facts' home_keyframe),
  with ctrl set to its joint angles so a zero action holds the pose.
- The six sites of the facts (IMU in pelvis and torso, feet, palms) are drawn
  in group 4 (hidden by default); the sensors refer to them as the facts say.
"""

from __future__ import annotations

import re
from functools import lru_cache

import mujoco

from collector.envs.mjcf import ASSETS, collision_geom, home_keyframe, inertial, read_facts, site, vec, visual_geom

FEET = ("left_foot", "right_foot")  # the facts' foot sites, left first as in the joint order

# Colours by body part; the part is the collision geom's name without side, index and suffix.
_DARK, _SILVER, _LIGHT, _BLACK = "0.20 0.22 0.25 1", "0.66 0.68 0.71 1", "0.82 0.83 0.85 1", "0.08 0.08 0.08 1"
_VISUAL_RGBA = {"pelvis": _DARK, "hip": _DARK, "thigh": _SILVER, "shin": _SILVER, "linkage_brace": _DARK,
                "foot": _BLACK, "torso": _LIGHT, "head": _DARK, "shoulder_yaw": _SILVER, "elbow_yaw": _LIGHT,
                "wrist": _DARK, "hand": _BLACK}


@lru_cache(maxsize=1)
def load_facts() -> dict:
    """The robot facts shipped with this package (g1_facts.json beside this file)."""
    return read_facts(__package__, "g1_facts.json")


def joint_names() -> list[str]:
    """The 29 actuated joints in qpos order."""
    return [j["name"] for j in load_facts()["joints"] if j["type"] != "free"]


def default_joint_pos() -> list[float]:
    """The home (knees-bent) keyframe's joint angles, in qpos order."""
    return load_facts()["home_keyframe"]["qpos"][7:]


def build_xml() -> str:
    """The flat-ground scene with the G1 as one MJCF string."""
    facts = load_facts()
    return scene_xml(facts, "g1_flat", facts["mjlab_sim"])


def scene_xml(facts: dict, model_name: str, sim: dict, floor_size: float = 0.01, key_name: str = "home") -> str:
    """A flat-ground scene with the G1 of `facts` (bodies, joints, geoms, actuators, sensors) and options `sim`."""
    return "\n".join([
        f'<mujoco model="{model_name}">',
        '  <compiler angle="radian" autolimits="true"/>',
        _option(sim),
        ASSETS,
        "  <worldbody>",
        '    <light name="sun" pos="0 0 4" dir="0 0 -1" directional="true" diffuse="0.7 0.7 0.7"/>',
        '    <light name="spot" pos="1 -2 3" dir="-0.3 0.6 -1" diffuse="0.4 0.4 0.4" mode="trackcom"/>',
        # The facts' ground: an infinite plane with MuJoCo's default contact parameters.
        f'    <geom name="floor" type="plane" size="0 0 {floor_size!r}" friction="1 0.005 0.0001" condim="3"'
        ' priority="0" material="grid"/>',
        _body_tree(facts, "world", indent=4),
        "  </worldbody>",
        _contact(facts),
        _actuators(facts),
        _sensors(facts),
        home_keyframe(facts, key_name),
        "</mujoco>",
    ])


def build_model() -> mujoco.MjModel:
    """The compiled G1 flat-ground model."""
    return mujoco.MjModel.from_xml_string(build_xml())


# ----------------------------------------------------------------- sections


def _option(sim: dict) -> str:
    """The <option> of a simulation settings dict (a setting it lacks stays MuJoCo's default)."""
    attrs = [f'timestep="{sim["timestep"]!r}"', f'integrator="{sim["integrator"]}"', f'cone="{sim["cone"]}"',
             f'impratio="{sim["impratio"]!r}"', f'solver="{sim["solver"].capitalize()}"',
             f'iterations="{sim["iterations"]}"', f'ls_iterations="{sim["ls_iterations"]}"',
             f'tolerance="{sim["tolerance"]!r}"', f'ls_tolerance="{sim["ls_tolerance"]!r}"',
             f'gravity="{vec(sim["gravity"])}"']
    if "ccd_iterations" in sim:
        attrs.append(f'ccd_iterations="{sim["ccd_iterations"]}"')
    return f'  <option {" ".join(attrs)}/>'


def _part(geom_name: str) -> str:
    """left_foot3_collision -> foot, left_foot_contact_0_geom -> foot, torso_collision -> torso."""
    stem = re.sub(r"^(left|right)_", "", geom_name.removesuffix("_collision"))
    return "foot" if stem.startswith("foot") else stem.rstrip("0123456789")


def _body_tree(facts: dict, parent: str, indent: int) -> str:
    """The bodies below `parent`, depth first in the facts' order (the motion clips' body order)."""
    lines = []
    pad = " " * indent
    for b in facts["bodies"]:
        if b["parent"] != parent:
            continue
        lines.append(f'{pad}<body name="{b["name"]}" pos="{vec(b["pos_in_parent"])}"'
                     f' quat="{vec(b["quat_in_parent"])}">')
        lines.append(inertial(b, indent + 2))
        lines += [_joint(j, indent + 2) for j in facts["joints"] if j["body"] == b["name"]]
        for g in facts["collision_geoms"]:
            if g["body"] == b["name"]:
                lines.append(collision_geom(g, indent + 2))
                lines.append(visual_geom(g, indent + 2, _VISUAL_RGBA[_part(g["name"])]))
        lines += [site(s, indent + 2) for s in facts["sites"] if s["body"] == b["name"]]
        subtree = _body_tree(facts, b["name"], indent + 2)
        if subtree:
            lines.append(subtree)
        lines.append(f"{pad}</body>")
    return "\n".join(lines)


def _joint(j: dict, indent: int) -> str:
    """The free root or a hinge with the facts' axis, range, damping, armature and frictionloss."""
    pad = " " * indent
    if j["type"] == "free":
        return f'{pad}<freejoint name="{j["name"]}"/>'
    return (f'{pad}<joint name="{j["name"]}" type="hinge" pos="{vec(j["pos_in_body"])}" axis="{vec(j["axis"])}"'
            f' range="{vec(j["range"])}" damping="{j["damping"]!r}" armature="{j["armature"]!r}"'
            f' frictionloss="{j["frictionloss"]!r}"/>')


def _contact(facts: dict) -> str:
    """The facts' body-pair exclusions (parent-child pairs are already filtered by MuJoCo)."""
    lines = ["  <contact>"]
    lines += [f'    <exclude body1="{a}" body2="{b}"/>' for a, b in facts["contact_excludes"]]
    lines.append("  </contact>")
    return "\n".join(lines)


def _actuators(facts: dict) -> str:
    """One PD servo per joint, in qpos order, with the facts' kp, kd and effort limit."""
    by_joint = {a["joint"]: a for a in facts["actuators"]}
    lines = ["  <actuator>"]
    for joint in joint_names():
        a = by_joint[joint]
        kp, kd = a["kp"], a["kd"]
        lines.append(f'    <general name="{a["name"]}" joint="{joint}" gaintype="fixed" gainprm="{kp!r}"'
                     f' biastype="affine" biasprm="0 {-kp!r} {-kd!r}" ctrllimited="false"'
                     f' forcelimited="true" forcerange="{vec(a["forcerange"])}"/>')
    lines.append("  </actuator>")
    return "\n".join(lines)


# Sensor kinds of the facts -> MJCF element.  Site sensors name their site; frame sensors an
# object and a reference frame; subtree sensors a body.
_SENSOR_ELEMENTS = {"mjSENS_GYRO": "gyro", "mjSENS_VELOCIMETER": "velocimeter",
                    "mjSENS_ACCELEROMETER": "accelerometer", "mjSENS_FRAMEZAXIS": "framezaxis",
                    "mjSENS_FRAMEPOS": "framepos", "mjSENS_SUBTREEANGMOM": "subtreeangmom"}


def _objtype(facts_type: str) -> str:
    """mjOBJ_SITE -> site."""
    return facts_type.removeprefix("mjOBJ_").lower()


def _sensors(facts: dict) -> str:
    """The facts' sensors (IMU, frame and angular-momentum kinds), with a cutoff where the facts give one."""
    lines = ["  <sensor>"]
    for s in facts["sensors"]:
        element = _SENSOR_ELEMENTS[s["kind"]]
        (objtype, objname) = s["object"]
        if element == "subtreeangmom":
            target = f'body="{objname}"'
        elif "reference" in s:
            reftype, refname = s["reference"]
            target = (f'objtype="{_objtype(objtype)}" objname="{objname}"'
                      f' reftype="{_objtype(reftype)}" refname="{refname}"')
        elif element.startswith("frame"):  # a frame sensor without reference: in the world frame
            target = f'objtype="{_objtype(objtype)}" objname="{objname}"'
        else:
            target = f'site="{objname}"'
        cutoff = f' cutoff="{s["cutoff"]!r}"' if s.get("cutoff") else ""
        lines.append(f'    <{element} name="{s["name"]}" {target}{cutoff}/>')
    lines.append("  </sensor>")
    return "\n".join(lines)
