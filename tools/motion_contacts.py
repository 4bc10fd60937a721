"""Self-penetration of G1 poses and motion clips: the robot's contacts with itself, floor left out.

"Self-contact" means what the tracking task penalises: its `self_collision` contact sensor
(collector/envs/g1/base.py) matches every contact between two collision geoms of the pelvis
subtree, that is of the robot, after MuJoCo's own filters (parent-child body pairs and the facts'
excluded body pairs are never tested).  Here the pose is set, MuJoCo's kinematics and collision
detection run, and a contact with negative distance is a penetration of depth -dist.  The floor is
switched off in a private copy of the model, so only the robot's own geoms can touch.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import NamedTuple

import mujoco
import numpy as np

from collector.envs.g1.model import build_model

ROBOT_ROOT = "pelvis"  # the subtree the task's self-collision sensor watches (against itself)


class Contact(NamedTuple):
    """One contact of two robot geoms: distance (negative inside), world point and normal from geom1 to geom2."""

    geom1: int
    geom2: int
    dist: float
    pos: np.ndarray
    normal: np.ndarray


@dataclass(frozen=True)
class SelfPenetration:
    """Per-frame self-penetration of a clip: the deepest self-contact and the depth of each geom pair."""

    depth: np.ndarray  # [T] m, the deepest self-contact of each frame, 0 where none penetrates
    pairs: dict[tuple[str, str], np.ndarray]  # (geom, geom) -> [T] m, that pair's depth, 0 where apart
    bodies: dict[str, str]  # geom -> the body it belongs to, for the geoms in `pairs`

    @property
    def frames(self) -> np.ndarray:
        """[T] bool, the frames with any penetration."""
        return self.depth > 0

    @property
    def share(self) -> float:
        """Share of frames with any penetration."""
        return float(self.frames.mean()) if len(self.depth) else 0.0

    @property
    def max_depth(self) -> float:
        """The deepest penetration of the clip, m."""
        return float(self.depth.max(initial=0.0))

    @property
    def typical_depth(self) -> float:
        """Median over the penetrating frames of their deepest penetration, m (0 without any)."""
        return float(np.median(self.depth[self.frames])) if self.frames.any() else 0.0


class SelfContacts:
    """Collision detection of single G1 poses against the robot itself, on a model copy without the floor."""

    def __init__(self, model: mujoco.MjModel | None = None, clearance: float = 0.0):
        # A copy: the floor's contact bits and the margin are changed here and nowhere else.
        self.model = copy.deepcopy(model) if model is not None else build_model()
        self.data = mujoco.MjData(self.model)
        m = self.model
        robot = m.body_rootid[m.geom_bodyid] == m.body(ROBOT_ROOT).id
        m.geom_contype[~robot] = 0
        m.geom_conaffinity[~robot] = 0
        # With a margin MuJoCo also reports pairs closer than `clearance`, with dist >= 0.
        m.geom_margin[robot] = np.maximum(m.geom_margin[robot], clearance)

    def geom_name(self, geom: int) -> str:
        """The geom's name (its index when unnamed)."""
        return self.model.geom(geom).name or f"geom {geom}"

    def body_name(self, geom: int) -> str:
        """The name of the body the geom belongs to."""
        return self.model.body(self.model.geom_bodyid[geom]).name

    def contacts(self, qpos: np.ndarray) -> list[Contact]:
        """Self-contacts of one pose qpos [nq]; model data is left at this pose (kinematics and com)."""
        m, d = self.model, self.data
        d.qpos[:] = qpos
        mujoco.mj_kinematics(m, d)
        mujoco.mj_comPos(m, d)  # cdof for mj_jac at this pose
        mujoco.mj_collision(m, d)
        return [Contact(int(c.geom1), int(c.geom2), float(c.dist), c.pos.copy(), c.frame[:3].copy())
                for c in d.contact[:d.ncon]]

    def penetration(self, qpos: np.ndarray) -> SelfPenetration:
        """Per-frame self-penetration of a qpos trajectory [T, nq]."""
        depth = np.zeros(len(qpos))
        pairs: dict[tuple[str, str], np.ndarray] = {}
        bodies: dict[str, str] = {}
        for t, q in enumerate(qpos):
            for c in self.contacts(q):
                if c.dist >= 0:
                    continue
                key = (self.geom_name(c.geom1), self.geom_name(c.geom2))
                bodies.update({self.geom_name(g): self.body_name(g) for g in (c.geom1, c.geom2)})
                pair = pairs.setdefault(key, np.zeros(len(qpos)))
                pair[t] = max(pair[t], -c.dist)
                depth[t] = max(depth[t], -c.dist)
        return SelfPenetration(depth=depth, pairs=pairs, bodies=bodies)


def self_penetration(qpos: np.ndarray, model: mujoco.MjModel | None = None) -> SelfPenetration:
    """Per-frame self-penetration of a qpos trajectory [T, nq] (a clip's `qpos()`), floor left out."""
    return SelfContacts(model).penetration(np.asarray(qpos, np.float64))


def report_lines(pen: SelfPenetration) -> list[str]:
    """`name: value` lines: share of frames, max and typical depth, then each pair's frames and depth."""
    frames, total = int(pen.frames.sum()), len(pen.depth)
    if not frames:
        return [f"self-penetration: none (0 of {total} frames)"]
    lines = [f"self-penetration: {frames} of {total} frames ({100 * pen.share:.1f}%)",
             f"max penetration depth: {pen.max_depth:.4f} m",
             f"typical penetration depth: {pen.typical_depth:.4f} m (median of the penetrating frames)"]
    for (a, b), depth in sorted(pen.pairs.items(), key=lambda kv: -int((kv[1] > 0).sum())):
        inside = depth > 0
        lines.append(f"penetrating pair {a} ({pen.bodies[a]}) / {b} ({pen.bodies[b]}): {int(inside.sum())} frames, "
                     f"max {depth.max():.4f} m, median {np.median(depth[inside]):.4f} m")
    return lines
