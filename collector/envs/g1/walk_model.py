"""MJCF of the seed's G1 (UniLab's `g1_walk_flat` robot), generated from g1_walk_facts.json on top of g1_facts.json.

The seed's g1.xml is mjlab's G1 with other joint, actuator and contact
settings: its bodies, inertials, joint axes and ranges and its 33 collision
primitives are g1_facts.json's numbers (the facts file says how that was
checked), so only what differs is in g1_walk_facts.json:

- options: 1/150 s implicitfast with MuJoCo's default Newton solver (100 / 50
  iterations), where mjlab runs 0.005 s with 10 / 20;
- every hinge joint: armature 0.01 and friction loss 0.3;
- position servos with the seed's rounded kp / kv and force ranges per joint group;
- contacts: condim 3 on every capsule, the 14 foot capsules at priority 0, and
  4 contact spheres per foot (radius 0.005, friction 0.6, priority 1) that win
  against the floor's friction;
- the sensors the task reads: pelvis velocimeter, torso gyro and up-vector,
  foot-site positions in the world frame (the seed's gyro cutoff kept);
- the `stand` keyframe (root at 0.754 m), the default pose of the task.

As for the other robots, no mesh is read: the seed's meshes are visual only
(group 2, no contact), and coloured copies of the collision primitives draw
the robot.
"""

from __future__ import annotations

import copy
import re
from functools import lru_cache

import mujoco

from collector.envs.g1 import model as g1_model
from collector.envs.mjcf import read_facts

STAND = "stand"  # the keyframe's name in the seed's scene
_FOOT_CAPSULE = re.compile(r"^(left|right)_foot\d+_collision$")


@lru_cache(maxsize=1)
def load_facts() -> dict:
    """What the seed's robot changes of g1_facts.json (g1_walk_facts.json beside this file)."""
    return read_facts(__package__, "g1_walk_facts.json")


def default_joint_pos() -> list[float]:
    """The stand keyframe's 29 joint angles, in qpos order."""
    return load_facts()["stand_keyframe"]["qpos"][7:]


@lru_cache(maxsize=1)
def robot_facts() -> dict:
    """g1_facts.json with the seed's joints, actuators, contacts, sites, sensors and keyframe put in."""
    base, seed = g1_model.load_facts(), load_facts()
    facts = copy.deepcopy({k: base[k] for k in ("bodies", "joints")})
    defaults = seed["joint_defaults"]
    for j in facts["joints"]:
        if j["type"] == "hinge":
            j.update(armature=defaults["armature"], frictionloss=defaults["frictionloss"], damping=defaults["damping"])
    facts["actuators"] = [{"name": joint, "joint": joint, "kp": g["kp"], "kd": g["kv"], "forcerange": g["forcerange"]}
                          for g in seed["actuator_groups"] for joint in g["joints"]]
    facts["collision_geoms"] = _collision_geoms(base["collision_geoms"], seed)
    facts["contact_excludes"] = seed["contact_excludes"]
    facts["sites"] = seed["sites"]
    facts["sensors"] = [{"name": s["name"], "kind": "mjSENS_" + s["kind"].upper(), "object": ["mjOBJ_SITE", s["site"]],
                         "cutoff": s["cutoff"]} for s in seed["sensors"]]
    facts["home_keyframe"] = {"qpos": seed["stand_keyframe"]["qpos"]}
    return facts


def build_xml() -> str:
    """The seed's flat-ground scene with its G1, as one MJCF string."""
    seed = load_facts()
    return g1_model.scene_xml(robot_facts(), "g1_walk_flat", seed["option"], floor_size=seed["floor"]["size"][2],
                              key_name=STAND)


def build_model() -> mujoco.MjModel:
    """The compiled model of the seed's G1 on flat ground."""
    return mujoco.MjModel.from_xml_string(build_xml())


def _collision_geoms(base: list[dict], seed: dict) -> list[dict]:
    """mjlab's primitives with the seed's contact settings; each foot's spheres go before its capsules, as in g1.xml."""
    policy = seed["collision_policy"]
    spheres = {}
    for s in seed["foot_spheres"]:
        spheres.setdefault(s["body"], []).append({
            "name": s["name"], "body": s["body"], "type": "sphere", "size_mujoco_convention": [s["radius"], 0.0, 0.0],
            "pos": s["pos"], "quat": [1.0, 0.0, 0.0, 0.0], "friction": s["friction"], "condim": s["condim"],
            "contype": 1, "conaffinity": 1, "priority": s["priority"], "margin": 0.0})
    out = []
    for g in base:
        g = dict(g)
        foot = _FOOT_CAPSULE.match(g["name"])
        if foot:
            out += spheres.pop(g["body"], [])
            g.update(condim=policy["foot_capsules"]["condim"], priority=policy["foot_capsules"]["priority"],
                     friction=policy["foot_capsules"]["friction"])
        else:
            g.update(condim=policy["capsules"]["condim"], priority=policy["capsules"]["priority"])
        g.update(contype=policy["capsules"]["contype"], conaffinity=policy["capsules"]["conaffinity"])
        out.append(g)
    if spheres:
        raise ValueError(f"g1_walk_facts.json: foot spheres on bodies without foot capsules: {sorted(spheres)}")
    return out
