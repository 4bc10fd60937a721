"""MJCF of the Unitree Go2 on flat ground, generated from the numbers in go2_facts.json.

No mesh files exist here: the collision primitives of the facts carry the
physics, and visual-only copies of them (contype = conaffinity = 0, group 2,
coloured) draw the robot, while the collision geoms sit in group 3, hidden by
MuJoCo's default visible groups (0-2).  Bodies carry their explicit inertials,
so no geom contributes mass.

Choices the facts leave open, and why:
- Actuators are listed in joint (qpos) order FL, FR, RL, RR, not the facts'
  FR, FL, RR, RL, so that action i drives joint i and the observation's joint
  blocks line up with the action vector.
- Actuators are `general` PD servos: ctrl is the joint target, gain kp on ctrl
  and affine bias (0, -kp, -kd), i.e. a position actuator with damping kd.  The
  task gives every simulation its own kp/kd by expanding gainprm/biasprm per
  simulation (see task.py), so MuJoCo evaluates the exact per-env PD law at
  every substep.
- MuJoCo's default (semi-implicit Euler) integration, as the seed's own Go2 runs:
  implicitfast, used here before, moved joint velocities by up to 0.36 rad/s in one
  control step against the seed (benchmarks.vs_unilab --parity, BENCHMARKS.md).
- Foot sites (FL, FR, RL, RR) sit at the foot spheres' centres; the frame
  sensors of the facts refer to them and to the IMU site.
- Contact sensors report only `found` (matching contacts), which MuJoCo
  evaluates at the position stage, so they are current after a step that
  recomputes positions and velocities (mjSTAGE_VEL).
- One extra sensor beyond the facts: `world_z`, the world z axis in the IMU
  frame; its negation is the projected gravity the policy observes.
"""

from __future__ import annotations

from functools import lru_cache

import mujoco

from collector.envs.mjcf import ASSETS, collision_geom, home_keyframe, inertial, read_facts, site, vec, visual_geom

SIM_DT = 0.01  # docs/design.md#go2_joystick_flat (the facts' source used 0.02)
FEET = ("FL", "FR", "RL", "RR")  # leg order of qpos, actions and the gait phase
FOOT_RADIUS = 0.022
KP_NOMINAL = 35.0  # the facts' position-actuator gain
KD_NOMINAL = 0.5   # centre of the randomised range [0.45, 0.55]

_VISUAL_RGBA = {"base": "0.22 0.24 0.27 1", "hip": "0.75 0.76 0.78 1", "thigh": "0.62 0.64 0.67 1",
                "calf": "0.35 0.37 0.40 1", "foot": "0.08 0.08 0.08 1"}


@lru_cache(maxsize=1)
def load_facts() -> dict:
    """The robot facts shipped with this package (go2_facts.json beside this file)."""
    return read_facts(__package__, "go2_facts.json")


def joint_names() -> list[str]:
    """The 12 actuated joints in qpos order."""
    return [j["name"] for j in load_facts()["joints"] if j["type"] != "free"]


def default_joint_pos() -> list[float]:
    """The home keyframe's joint angles, in qpos order."""
    return load_facts()["home_keyframe"]["qpos"][7:]


def build_xml() -> str:
    """The flat-ground scene with the Go2 as one MJCF string."""
    facts = load_facts()
    option = facts["option"]
    return "\n".join([
        '<mujoco model="go2_flat">',
        '  <compiler angle="radian" autolimits="true"/>',
        f'  <option timestep="{SIM_DT!r}" cone="{option["cone"]}" impratio="{option["impratio"]!r}"/>',
        ASSETS,
        "  <worldbody>",
        '    <light name="sun" pos="0 0 4" dir="0 0 -1" directional="true" diffuse="0.7 0.7 0.7"/>',
        '    <light name="spot" pos="0 -2 3" dir="0 0.6 -1" diffuse="0.4 0.4 0.4" mode="trackcom"/>',
        _world_geoms(facts),
        _body_tree(facts, "world", indent=4),
        "  </worldbody>",
        _actuators(facts),
        _sensors(facts),
        home_keyframe(facts),
        "</mujoco>",
    ])


def build_model() -> mujoco.MjModel:
    return mujoco.MjModel.from_xml_string(build_xml())


# ----------------------------------------------------------------- sections


def _part(body_name: str, geom_name: str) -> str:
    if body_name == "base":
        return "base"
    if geom_name in FEET:
        return "foot"
    return body_name.split("_")[1]  # hip, thigh or calf


def _world_geoms(facts: dict) -> str:
    return "\n".join(collision_geom(g, 4, 'material="grid" group="0"')
                     for g in facts["collision_geoms"] if g["body"] == "world")


def _body_tree(facts: dict, parent: str, indent: int) -> str:
    lines = []
    pad = " " * indent
    for b in facts["bodies"]:
        if b["parent"] != parent:
            continue
        lines.append(f'{pad}<body name="{b["name"]}" pos="{vec(b["pos_in_parent"])}">')
        lines.append(inertial(b, indent + 2))
        lines += [_joint(j, indent + 2) for j in facts["joints"] if j["body"] == b["name"]]
        for g in facts["collision_geoms"]:
            if g["body"] == b["name"]:
                lines.append(collision_geom(g, indent + 2))
                lines.append(visual_geom(g, indent + 2, _VISUAL_RGBA[_part(b["name"], g["name"])]))
                if g["name"] in FEET:
                    lines.append(f'{pad}  <site name="{g["name"]}" pos="{vec(g["pos"])}" size="{FOOT_RADIUS!r}"'
                                 ' group="4"/>')
        lines += [site(s, indent + 2) for s in facts["sites"] if s["body"] == b["name"]]
        subtree = _body_tree(facts, b["name"], indent + 2)
        if subtree:
            lines.append(subtree)
        lines.append(f"{pad}</body>")
    return "\n".join(lines)


def _joint(j: dict, indent: int) -> str:
    pad = " " * indent
    if j["type"] == "free":
        return f'{pad}<freejoint name="{j["name"]}"/>'
    return (f'{pad}<joint name="{j["name"]}" type="hinge" axis="{vec(j["axis"])}" range="{vec(j["range"])}"'
            f' damping="{j["damping"]!r}" armature="{j["armature"]!r}" frictionloss="{j["frictionloss"]!r}"/>')


def _actuators(facts: dict) -> str:
    by_joint = {a["joint"]: a for a in facts["actuators"]}
    lines = ["  <actuator>"]
    for joint in joint_names():
        a = by_joint[joint]
        kp = a["kp"]
        lines.append(f'    <general name="{a["name"]}" joint="{joint}" gaintype="fixed" gainprm="{kp!r}"'
                     f' biastype="affine" biasprm="0 {-kp!r} {-KD_NOMINAL!r}" ctrllimited="false"'
                     f' forcelimited="true" forcerange="{vec(a["forcerange"])}"/>')
    lines.append("  </actuator>")
    return "\n".join(lines)


# Frame sensors of the facts: name -> (MJCF element, site).  Foot sensors are named
# after their foot site.
_FRAME_SENSORS = {"mjSENS_GYRO": "gyro", "mjSENS_ACCELEROMETER": "accelerometer",
                  "mjSENS_VELOCIMETER": "velocimeter", "mjSENS_FRAMEZAXIS": "framezaxis",
                  "mjSENS_FRAMEPOS": "framepos", "mjSENS_FRAMELINVEL": "framelinvel",
                  "mjSENS_FRAMEANGVEL": "frameangvel"}
_SITE_SENSORS = ("mjSENS_GYRO", "mjSENS_ACCELEROMETER", "mjSENS_VELOCIMETER")


def _sensors(facts: dict) -> str:
    lines = ["  <sensor>"]
    for s in facts["sensors"]:
        kind, name = s["kind"], s["name"]
        if kind == "mjSENS_CONTACT":
            lines.append(f'    <contact name="{name}" geom1="{_contact_geom(name)}" geom2="floor" num="1"'
                         ' data="found"/>')
            continue
        element = _FRAME_SENSORS[kind]
        site = name.split("_")[0] if name.split("_")[0] in FEET else "imu"
        if kind in _SITE_SENSORS:
            lines.append(f'    <{element} name="{name}" site="{site}"/>')
        else:
            lines.append(f'    <{element} name="{name}" objtype="site" objname="{site}"/>')
    lines.append('    <framezaxis name="world_z" objtype="body" objname="world" reftype="site" refname="imu"/>')
    lines.append("  </sensor>")
    return "\n".join(lines)


def _contact_geom(sensor_name: str) -> str:
    """The collision geom a facts contact sensor watches: FL_foot_contact -> FL, base1_contact -> base1,
    FL_hip_contact -> FL_hip_geom, FL_calf_contact2 -> FL_calf_geom2."""
    stem, _, tail = sensor_name.rpartition("_contact")
    if stem.endswith("_foot"):
        return stem[:-len("_foot")]
    if stem.startswith("base"):
        return stem
    return f"{stem}_geom{tail}"
