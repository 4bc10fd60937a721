"""MJCF pieces shared by the robots generated from facts files (go2/, g1/): scene, geoms, inertials, keyframe."""

from __future__ import annotations

import json
from importlib import resources

# Small textures: the batch copies the model, and a gradient needs few texels.
ASSETS = "\n".join([
    "  <asset>",
    '    <texture name="sky" type="skybox" builtin="gradient" rgb1="0.45 0.62 0.80" rgb2="0.05 0.08 0.12"'
    ' width="32" height="192"/>',
    '    <texture name="grid" type="2d" builtin="checker" mark="edge" rgb1="0.20 0.30 0.40"'
    ' rgb2="0.12 0.20 0.28" markrgb="0.8 0.8 0.8" width="64" height="64"/>',
    '    <material name="grid" texture="grid" texrepeat="4 4" texuniform="true" reflectance="0.15"/>',
    "  </asset>",
])

# Collision geoms sit in group 3, hidden by MuJoCo's default visible groups (0-2).
COLLISION_LOOK = 'group="3" rgba="0.9 0.3 0.3 0.5"'


def read_facts(package: str, filename: str) -> dict:
    """A robot's facts file shipped inside `package`."""
    return json.loads(resources.files(package).joinpath(filename).read_text())


def vec(values) -> str:
    """Numbers as an MJCF list, at full precision."""
    return " ".join(repr(float(v)) for v in values)


def trim_size(g: dict) -> list[float]:
    """The leading size numbers a geom type reads (the facts pad every size to 3)."""
    n = {"sphere": 1, "capsule": 2, "cylinder": 2, "box": 3, "plane": 3}[g["type"]]
    return g["size_mujoco_convention"][:n]


def geom_attrs(g: dict) -> str:
    """Shape and pose attributes shared by a collision geom and its visual copy."""
    return f'type="{g["type"]}" size="{vec(trim_size(g))}" pos="{vec(g["pos"])}" quat="{vec(g["quat"])}"'


def collision_geom(g: dict, indent: int, look: str = COLLISION_LOOK) -> str:
    """A collision primitive with the facts' contact settings."""
    return (" " * indent + f'<geom name="{g["name"]}" {geom_attrs(g)} friction="{vec(g["friction"])}"'
            f' condim="{g["condim"]}" contype="{g["contype"]}" conaffinity="{g["conaffinity"]}"'
            f' priority="{g["priority"]}" margin="{g["margin"]!r}" {look}/>')


def visual_geom(g: dict, indent: int, rgba: str) -> str:
    """A massless, non-colliding coloured copy of a collision primitive, drawn in group 2."""
    return (" " * indent + f'<geom name="{g["name"]}_visual" {geom_attrs(g)} contype="0" conaffinity="0"'
            f' group="2" density="0" rgba="{rgba}"/>')


def inertial(b: dict, indent: int) -> str:
    """A body's explicit inertial from the facts (so no geom contributes mass)."""
    return (" " * indent + f'<inertial pos="{vec(b["com_pos"])}" quat="{vec(b["inertia_quat"])}"'
            f' mass="{b["mass"]!r}" diaginertia="{vec(b["diag_inertia"])}"/>')


def site(s: dict, indent: int) -> str:
    """A facts site, drawn in the hidden group 4."""
    return " " * indent + f'<site name="{s["name"]}" pos="{vec(s["pos"])}" size="0.01" group="4"/>'


def home_keyframe(facts: dict, name: str = "home") -> str:
    """The facts' home keyframe; ctrl is its joint angles, the PD targets of a zero action (actuators in qpos order)."""
    home = facts["home_keyframe"]
    return "\n".join(["  <keyframe>",
                      f'    <key name="{name}" qpos="{vec(home["qpos"])}" ctrl="{vec(home["qpos"][7:])}"/>',
                      "  </keyframe>"])
