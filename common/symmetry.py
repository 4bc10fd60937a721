"""Left-right mirror maps of the tasks that have one, for training on mirrored rollouts (algo.algorithm.symmetry).

Mirroring reflects the world in its x-z plane (y -> -y).  A vector v becomes S v with
S = diag(1, -1, 1), in the world frame and in a body frame alike (the body's frame is
reflected too); an angular velocity, a pseudo-vector, becomes -S w = (-x, y, -z).  A
joint swaps with its left/right partner; a roll or yaw joint (axis x or z, the same axis
on both sides) also changes sign, a pitch joint (axis y) keeps it.  Each map is a signed
permutation, so applying it twice gives the input back.  The joint order is part of the
task's contract, like its sizes in common/task_spec.py: tests/collector/test_g1_symmetry.py
checks it against the robot model and steps a mirrored state beside the original in MuJoCo.

g1_velocity_flat and g1_walk_flat have maps; the walker's two gait phases swap (the mirrored left foot takes
the right foot's phase), which its continuous clock reaches, since the feet are half a cycle apart.
g1_motion_tracking's mirror image would track the mirrored clip, which is not the task's; the Go2's gait
clock (25 steps per cycle) cannot shift by the half cycle that
swapping its left and right feet needs, so a mirrored Go2 state is not one the task reaches.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

# The G1's 29 actuated joints in qpos (and action) order, "_joint" left off.
G1_JOINTS = (
    *(f"left_{j}" for j in ("hip_pitch", "hip_roll", "hip_yaw", "knee", "ankle_pitch", "ankle_roll")),
    *(f"right_{j}" for j in ("hip_pitch", "hip_roll", "hip_yaw", "knee", "ankle_pitch", "ankle_roll")),
    "waist_yaw", "waist_roll", "waist_pitch",
    *(f"left_{j}" for j in ("shoulder_pitch", "shoulder_roll", "shoulder_yaw", "elbow", "wrist_roll",
                            "wrist_pitch", "wrist_yaw")),
    *(f"right_{j}" for j in ("shoulder_pitch", "shoulder_roll", "shoulder_yaw", "elbow", "wrist_roll",
                             "wrist_pitch", "wrist_yaw")),
)
VECTOR = (1.0, -1.0, 1.0)         # a position, velocity, force or gravity direction
PSEUDO_VECTOR = (-1.0, 1.0, -1.0)  # an angular velocity


@dataclass(frozen=True)
class SignedPermutation:
    """mirrored[..., i] = sign[i] * x[..., index[i]] over the last axis; its own inverse."""

    index: tuple[int, ...]
    sign: tuple[float, ...]

    def __post_init__(self):
        n = len(self.index)
        if len(self.sign) != n or sorted(self.index) != list(range(n)):
            raise ValueError("a signed permutation needs a permutation of 0..n-1 and n signs")

    def apply(self, x: np.ndarray) -> np.ndarray:
        """The mirror of `x` along its last axis."""
        x = np.asarray(x)
        return x[..., list(self.index)] * np.asarray(self.sign, dtype=x.dtype)


@dataclass(frozen=True)
class TaskMirror:
    """The mirror maps of one task's actor observation, critic observation and action."""

    obs: SignedPermutation
    critic: SignedPermutation
    actions: SignedPermutation


def with_angle_columns(p: SignedPermutation, angles: tuple[int, ...]) -> SignedPermutation:
    """`p` on the networks' view of an observation whose `angles` columns are sines, with their cosines appended.

    A mirrored angle is sign * the partner angle: its sine takes the raw column's map, its cosine is the
    partner's cosine unsigned.  A ValueError if `p` sends an angle column to a column that is not one.
    """
    where = {column: k for k, column in enumerate(angles)}
    n = len(p.index)
    cos_index = []
    for column in angles:
        partner = p.index[column]
        if partner not in where:
            raise ValueError(f"the mirror map sends angle column {column} to column {partner}, which is not an angle")
        cos_index.append(n + where[partner])
    return SignedPermutation((*p.index, *cos_index), (*p.sign, *(1.0,) * len(angles)))


def _blocks(*blocks: tuple[list[int], list[float]]) -> SignedPermutation:
    """One signed permutation from consecutive blocks, each (index within the block, sign)."""
    index: list[int] = []
    sign: list[float] = []
    start = 0
    for idx, sgn in blocks:
        index += [start + i for i in idx]
        sign += list(sgn)
        start += len(idx)
    return SignedPermutation(tuple(index), tuple(sign))


def _same(signs) -> tuple[list[int], list[float]]:
    return list(range(len(signs))), list(signs)


def _swap_pair(width: int, signs) -> tuple[list[int], list[float]]:
    """Two side-by-side blocks of `width` (left then right) swapped, each entry times signs."""
    return [*range(width, 2 * width), *range(width)], [*signs, *signs]


def _joint_mirror(joints: tuple[str, ...]) -> tuple[list[int], list[float]]:
    """Each joint's left/right partner (itself on the midline) and -1 for roll and yaw joints."""
    def partner(name: str) -> str:
        for a, b in (("left_", "right_"), ("right_", "left_")):
            if name.startswith(a):
                return b + name[len(a):]
        return name

    pos = {name: i for i, name in enumerate(joints)}
    index = [pos[partner(name)] for name in joints]
    sign = [-1.0 if name.endswith(("_roll", "_yaw")) else 1.0 for name in joints]
    return index, sign


def _g1_velocity() -> TaskMirror:
    joints = _joint_mirror(G1_JOINTS)
    # base_lin_vel, base_ang_vel, projected_gravity, joint_pos, joint_vel, actions, command (vx, vy, wz).
    actor = [_same(VECTOR), _same(PSEUDO_VECTOR), _same(VECTOR), joints, joints, joints, _same((1.0, -1.0, -1.0))]
    # The critic adds per foot (left, right): height, air time, contact, then the contact forces (xyz each).
    per_foot = _swap_pair(1, [1.0])
    critic = [*actor, per_foot, per_foot, per_foot, _swap_pair(3, VECTOR)]
    return TaskMirror(_blocks(*actor), _blocks(*critic), _blocks(joints))


def _g1_walk() -> TaskMirror:
    joints = _joint_mirror(G1_JOINTS)
    # torso gyro, projected gravity, joint_pos, joint_vel, actions, command (vx, vy, wz), gait phase (left, right).
    actor = [_same(PSEUDO_VECTOR), _same(VECTOR), joints, joints, joints, _same((1.0, -1.0, -1.0)),
             _swap_pair(1, [1.0])]
    # The critic adds the pelvis IMU's linear velocity.
    return TaskMirror(_blocks(*actor), _blocks(*actor, _same(VECTOR)), _blocks(joints))


MIRRORS: dict[str, TaskMirror] = {"g1_velocity_flat": _g1_velocity(), "g1_walk_flat": _g1_walk()}


def task_mirror(task: str) -> TaskMirror:
    """The task's mirror maps; a ValueError naming the tasks that have one otherwise."""
    try:
        return MIRRORS[task]
    except KeyError:
        raise ValueError(f"task {task!r} has no left-right mirror map (algo.algorithm.symmetry, "
                         "mirror_loss_coef); "
                         f"tasks with one: {', '.join(sorted(MIRRORS))}") from None
