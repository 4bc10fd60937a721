"""G1 clips with and without self-penetration, built here from the model's home pose, and geometry to measure them.

The reaching clip walks the pelvis forward with the joints at home, except the right arm: shoulder roll
-0.1 rad and shoulder pitch swinging forward and back (a raised cosine from 0.2 to 0.5 rad and back),
which pushes the right hand, and nothing else, into the right hip capsule for the middle frames.
`capsule_depth` measures that independently of MuJoCo's collision code: the closest points of the two
capsule axes, from the geoms' world poses, less the two radii.
"""

from __future__ import annotations

import mujoco
import numpy as np

from collector.envs.g1.model import build_model, joint_names

FPS = 50.0
SPEED = 0.5  # m/s along world x
HEIGHT = 0.76  # m, the home pose's pelvis height (the floor is under the feet)
PITCH_REST, PITCH_REACH = 0.2, 0.5  # rad, right shoulder pitch at rest and at the deepest frame
ROLL = -0.1  # rad, right shoulder roll while reaching: only the hand meets the hip
HAND, HIP = "right_hand_collision", "right_hip_collision"
ARM_JOINTS = [n for n in joint_names() if n.split("_")[1] in ("shoulder", "elbow", "wrist")]


def home_joints() -> np.ndarray:
    """[29] the home keyframe's joint angles."""
    return build_model().key_qpos[0, 7:].copy()


def walking_qpos(frames: int) -> np.ndarray:
    """[frames, 36] pelvis moving along x at SPEED, upright, joints at home."""
    t = np.arange(frames) / FPS
    root = np.column_stack([SPEED * t, 0 * t, np.full(frames, HEIGHT), np.ones(frames), 0 * t, 0 * t, 0 * t])
    return np.concatenate([root, np.tile(home_joints(), (frames, 1))], axis=1)


def reaching_qpos(frames: int, start: int, stop: int) -> np.ndarray:
    """walking_qpos with the right shoulder pitch raised to PITCH_REACH and back between frames start and stop."""
    qpos = walking_qpos(frames)
    names = joint_names()
    qpos[:, 7 + names.index("right_shoulder_roll_joint")] = ROLL
    phase = np.clip((np.arange(frames) - start) / (stop - start), 0.0, 1.0)
    qpos[:, 7 + names.index("right_shoulder_pitch_joint")] = (
        PITCH_REST + (PITCH_REACH - PITCH_REST) * 0.5 * (1 - np.cos(2 * np.pi * phase)))
    return qpos


def crossed_legs_qpos(frames: int) -> np.ndarray:
    """walking_qpos with both hip rolls turned 0.3 rad inwards: thighs and shins inside each other, arms clear."""
    qpos = walking_qpos(frames)
    names = joint_names()
    qpos[:, 7 + names.index("left_hip_roll_joint")] = -0.3
    qpos[:, 7 + names.index("right_hip_roll_joint")] = 0.3
    return qpos


def _point_segment_distance(p: np.ndarray, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Distances [n] of points p [n, 3] from the segment a-b."""
    ab = b - a
    s = np.clip((p - a) @ ab / (ab @ ab), 0.0, 1.0)
    return np.linalg.norm(p - (a + s[:, None] * ab), axis=1)


def capsule_depth(model: mujoco.MjModel, qpos: np.ndarray, geom1: str, geom2: str) -> float:
    """How deep two capsules overlap at a pose (r1 + r2 minus the axes' closest distance; negative when apart)."""
    data = mujoco.MjData(model)
    data.qpos[:] = qpos
    mujoco.mj_kinematics(model, data)
    ends, radii = [], []
    for name in (geom1, geom2):
        g = model.geom(name).id
        axis = data.geom_xmat[g].reshape(3, 3)[:, 2] * model.geom_size[g, 1]
        ends.append((data.geom_xpos[g] - axis, data.geom_xpos[g] + axis))
        radii.append(model.geom_size[g, 0])
    # Dense points on the first axis against the exact point-segment distance to the second: under 0.1 mm apart.
    (a0, a1), (b0, b1) = ends
    points = a0 + np.linspace(0.0, 1.0, 2001)[:, None] * (a1 - a0)
    return float(sum(radii) - _point_segment_distance(points, b0, b1).min())
