"""G1 reference motion clips in the BeyondMimic / mjlab `.npz` layout: load and check, summarise, build, write.

A clip holds T frames, one per 0.02 s control step, with these arrays (bodies and
joints in the model's order, the world body left out):

    fps             (1,)          frames per second; must be the control rate, 50
    joint_pos       (T, 29)       rad, the hinge angles in qpos order
    joint_vel       (T, 29)       rad/s
    body_pos_w      (T, 30, 3)    m, world position of each body's frame origin (MuJoCo xpos)
    body_quat_w     (T, 30, 4)    world orientation, w, x, y, z (MuJoCo xquat)
    body_lin_vel_w  (T, 30, 3)    m/s, world linear velocity of each body origin
    body_ang_vel_w  (T, 30, 3)    rad/s, angular velocity expressed in the world frame

The root (pelvis, body 0) gives the free joint: qpos[0:3] = body_pos_w[t, 0] and
qpos[3:7] = body_quat_w[t, 0].  `load_clip` refuses a clip that the tracking task
could not replay as written: wrong layout, another frame rate (nothing is
resampled), non-finite numbers, joints past the model's hard limits, or body
positions that are not the model's forward kinematics of the clip's own root pose
and joint angles.
"""

from __future__ import annotations

import math
import zipfile
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import mujoco
import numpy as np

from collector.envs.g1.model import build_model, load_facts

KEYS = ("fps", "joint_pos", "joint_vel", "body_pos_w", "body_quat_w", "body_lin_vel_w", "body_ang_vel_w")
JOINT_KEYS = ("joint_pos", "joint_vel")
BODY_KEYS = {"body_pos_w": 3, "body_quat_w": 4, "body_lin_vel_w": 3, "body_ang_vel_w": 3}  # components per body
FK_TOLERANCE = 0.01  # m: body positions further than this from the model's FK are refused
LIMIT_SLACK = 1e-5  # rad: a joint stored at its limit in float32 may round just past it
QUAT_NORM_TOLERANCE = 1e-3  # a body orientation must be a unit quaternion to this


class ClipError(ValueError):
    """A motion clip that is refused; the message names the problem and the file."""


@dataclass(frozen=True, eq=False)
class MotionClip:
    """One reference motion: per-frame joint and body states at the control rate, in the model's order."""

    fps: float
    joint_pos: np.ndarray
    joint_vel: np.ndarray
    body_pos_w: np.ndarray
    body_quat_w: np.ndarray
    body_lin_vel_w: np.ndarray
    body_ang_vel_w: np.ndarray

    @property
    def num_frames(self) -> int:
        """Number of frames T."""
        return int(self.joint_pos.shape[0])

    @property
    def duration(self) -> float:
        """Seconds the clip covers: one control step per frame."""
        return self.num_frames / self.fps

    def qpos(self) -> np.ndarray:
        """[T, 7 + joints] model qpos: the root pose from body 0, then the joint angles."""
        root = np.concatenate([self.body_pos_w[:, 0], self.body_quat_w[:, 0]], axis=1)
        return np.concatenate([root, self.joint_pos], axis=1).astype(np.float64)


@dataclass(frozen=True)
class ClipStats:
    """Summary figures of one clip."""

    frames: int
    duration: float  # s
    fps: float
    mean_root_speed: float  # m/s, horizontal, of the pelvis
    heading_change: float  # rad, pelvis yaw last minus first frame, wrapped to [-pi, pi)
    max_fk_error: float  # m, largest body distance from the model's forward kinematics


@lru_cache(maxsize=1)
def _default_model() -> mujoco.MjModel:
    """The G1 model, compiled once; only read here."""
    return build_model()


def control_rate() -> float:
    """Frames per second a clip must have: one frame per control step of the G1 tasks."""
    return 1.0 / load_facts()["mjlab_sim"]["control_dt"]


# ------------------------------------------------------------------ loading and checks


def load_clip(path: str | Path, model: mujoco.MjModel | None = None) -> MotionClip:
    """Read and check a clip; raise ClipError naming the problem and the file if it is refused."""
    model = model if model is not None else _default_model()
    try:
        clip = _from_arrays(_read_npz(path), model)
        check_clip(clip, model)
    except ClipError as exc:
        raise ClipError(f"{path}: {exc}") from None
    return clip


def check_clip(clip: MotionClip, model: mujoco.MjModel | None = None) -> None:
    """Raise ClipError if the clip's numbers cannot be replayed on the model (rate, finiteness, limits, FK)."""
    model = model if model is not None else _default_model()
    _check_fps(clip.fps)
    _check_finite(clip)
    _check_quaternions(clip.body_quat_w, model)
    _check_joint_limits(clip.joint_pos, model)
    _check_kinematics(clip, model)


def _read_npz(path: str | Path) -> dict[str, np.ndarray]:
    """The clip's arrays, or ClipError if the file is no readable npz or misses a key."""
    try:
        with np.load(path, allow_pickle=False) as npz:
            missing = [k for k in KEYS if k not in npz.files]
            if missing:
                raise ClipError(f"missing key(s) {', '.join(missing)}; a clip needs {', '.join(KEYS)}")
            return {k: npz[k] for k in KEYS}
    except ClipError:
        raise
    except AttributeError:
        # np.load returned a plain array: a .npy file, which has no context manager or keys
        raise ClipError("not a readable .npz archive (it is a single .npy array)") from None
    except (OSError, ValueError, EOFError, zipfile.BadZipFile) as exc:
        raise ClipError(f"not a readable .npz archive ({exc})") from None


def _from_arrays(arrays: dict[str, np.ndarray], model: mujoco.MjModel) -> MotionClip:
    """A MotionClip after checking every array's shape and dtype against the model."""
    fps = arrays["fps"]
    if fps.size != 1:
        raise ClipError(f"fps has shape {fps.shape}, expected (1,)")
    frames = _check_joint_arrays(arrays, model.nq - 7)
    _check_body_arrays(arrays, model.nbody - 1, frames)
    return MotionClip(fps=float(fps.reshape(())), **{k: arrays[k] for k in KEYS[1:]})


def _check_float(key: str, a: np.ndarray) -> None:
    """Refuse an array that does not hold floating-point numbers."""
    if not np.issubdtype(a.dtype, np.floating):
        raise ClipError(f"{key} has dtype {a.dtype}, expected floating point")


def _check_joint_arrays(arrays: dict[str, np.ndarray], joints: int) -> int:
    """Check joint_pos and joint_vel are [T, joints] with the same T >= 2; return T."""
    frames = arrays["joint_pos"].shape[0] if arrays["joint_pos"].ndim else 0
    for key in JOINT_KEYS:
        a = arrays[key]
        _check_float(key, a)
        if a.ndim != 2:
            raise ClipError(f"{key} has shape {a.shape}, expected (frames, {joints})")
        if a.shape[1] != joints:
            raise ClipError(f"{key} has {a.shape[1]} joints per frame, expected {joints} (the model's hinges)")
        if a.shape[0] != frames:
            raise ClipError(f"{key} has {a.shape[0]} frames, expected {frames} (as joint_pos)")
    if frames < 2:
        raise ClipError(f"the clip has {frames} frame(s), expected at least 2")
    return frames


def _check_body_arrays(arrays: dict[str, np.ndarray], bodies: int, frames: int) -> None:
    """Check every body array is [frames, bodies, components]."""
    for key, comps in BODY_KEYS.items():
        a = arrays[key]
        _check_float(key, a)
        if a.ndim != 3:
            raise ClipError(f"{key} has shape {a.shape}, expected ({frames}, {bodies}, {comps})")
        if a.shape[1] != bodies:
            raise ClipError(f"{key} has {a.shape[1]} bodies, expected {bodies} (the model's bodies below the world)")
        if a.shape[2] != comps:
            raise ClipError(f"{key} has {a.shape[2]} components per body, expected {comps}")
        if a.shape[0] != frames:
            raise ClipError(f"{key} has {a.shape[0]} frames, expected {frames} (as joint_pos)")


def _check_fps(fps: float) -> None:
    """Refuse any rate but the control rate: the task plays one frame per control step."""
    rate = control_rate()
    if not abs(fps - rate) <= 1e-6 * rate:
        raise ClipError(f"fps is {fps:g}, expected {rate:g} (one frame per {1 / rate:g} s control step); "
                        f"resample the clip to {rate:g} fps first, it is not resampled here")


def _check_finite(clip: MotionClip) -> None:
    """Refuse a NaN or inf anywhere, naming the array and the first frame that has one."""
    for key in KEYS[1:]:
        a = getattr(clip, key)
        bad = ~np.isfinite(a)
        if bad.any():
            index = tuple(int(i) for i in np.argwhere(bad)[0])
            kind = "NaN" if np.isnan(a[index]) else "inf"
            raise ClipError(f"{key} has a {kind} at frame {index[0]} (index {index})")


def _check_quaternions(quats: np.ndarray, model: mujoco.MjModel) -> None:
    """Refuse a body orientation that is not a unit quaternion."""
    err = np.abs(np.linalg.norm(quats, axis=2) - 1.0)
    frame, body = np.unravel_index(int(np.argmax(err)), err.shape)
    if err[frame, body] > QUAT_NORM_TOLERANCE:
        norm = float(np.linalg.norm(quats[frame, body]))
        raise ClipError(f"body_quat_w of body {model.body(int(body) + 1).name} at frame {frame} has norm {norm:.4g}, "
                        "expected a unit quaternion (w, x, y, z)")


def hinge_limits(model: mujoco.MjModel) -> np.ndarray:
    """[joints, 2] hard limits of the hinges in qpos order (infinite where a hinge is unlimited)."""
    hinges = np.arange(1, model.njnt)
    limits = model.jnt_range[hinges].copy()
    limits[model.jnt_limited[hinges] == 0] = (-np.inf, np.inf)
    return limits


def _check_joint_limits(joint_pos: np.ndarray, model: mujoco.MjModel) -> None:
    """Refuse joint angles past the hard limits, naming the worst joint, its frame and value."""
    limits = hinge_limits(model)
    past = np.maximum(limits[:, 0] - joint_pos, joint_pos - limits[:, 1])  # > 0 outside the range
    frame, joint = np.unravel_index(int(np.argmax(past)), past.shape)
    if past[frame, joint] > LIMIT_SLACK:
        lo, hi = limits[joint]
        count = int((past > LIMIT_SLACK).sum())
        raise ClipError(f"joint {model.joint(int(joint) + 1).name} is {joint_pos[frame, joint]:.4f} rad at frame "
                        f"{frame}, outside its limits [{lo:.4f}, {hi:.4f}] by {past[frame, joint]:.4f} rad "
                        f"({count} joint-frame(s) out of limits)")


def forward_kinematics(qpos: np.ndarray, model: mujoco.MjModel | None = None) -> tuple[np.ndarray, np.ndarray]:
    """World positions [T, bodies, 3] and orientations [T, bodies, 4] (w, x, y, z) of the bodies below the world."""
    model = model if model is not None else _default_model()
    data = mujoco.MjData(model)
    pos = np.empty((len(qpos), model.nbody - 1, 3))
    quat = np.empty((len(qpos), model.nbody - 1, 4))
    for t, q in enumerate(qpos):
        data.qpos[:] = q
        mujoco.mj_kinematics(model, data)  # positions only: no dynamics needed
        pos[t] = data.xpos[1:]
        quat[t] = data.xquat[1:]
    return pos, quat


def fk_errors(clip: MotionClip, model: mujoco.MjModel | None = None) -> np.ndarray:
    """[T, bodies] distance of each clip body position from the FK of the clip's root pose and joint angles."""
    pos, _ = forward_kinematics(clip.qpos(), model)
    return np.linalg.norm(clip.body_pos_w - pos, axis=2)


def _check_kinematics(clip: MotionClip, model: mujoco.MjModel) -> None:
    """Refuse body positions more than FK_TOLERANCE from the model's forward kinematics."""
    # The root pose is body 0's own, so a displaced pelvis shows up as every other body being off.
    err = fk_errors(clip, model)
    frame, body = np.unravel_index(int(np.argmax(err)), err.shape)
    if err[frame, body] > FK_TOLERANCE:
        raise ClipError(f"body {model.body(int(body) + 1).name} at frame {frame} is {err[frame, body]:.4f} m from "
                        f"the model's forward kinematics of the clip's root pose and joint positions "
                        f"(tolerance {FK_TOLERANCE} m)")


# ------------------------------------------------------------------ summary


def yaw(quat: np.ndarray) -> np.ndarray:
    """Heading (rotation about world z) of w, x, y, z quaternions [..., 4]."""
    w, x, y, z = np.moveaxis(quat, -1, 0)
    return np.arctan2(2.0 * (w * z + x * y), 1.0 - 2.0 * (y * y + z * z))


def wrap_angle(angle: float) -> float:
    """An angle wrapped to [-pi, pi)."""
    return (angle + math.pi) % (2.0 * math.pi) - math.pi


def clip_stats(clip: MotionClip, model: mujoco.MjModel | None = None) -> ClipStats:
    """Frames, duration, fps, mean pelvis horizontal speed, heading change and max FK error of a clip."""
    root_xy = clip.body_pos_w[:, 0, :2].astype(np.float64)
    step = np.linalg.norm(np.diff(root_xy, axis=0), axis=1)
    root_yaw = yaw(clip.body_quat_w[[0, -1], 0].astype(np.float64))
    return ClipStats(
        frames=clip.num_frames,
        duration=clip.duration,
        fps=clip.fps,
        mean_root_speed=float(step.mean() * clip.fps),
        heading_change=wrap_angle(float(root_yaw[1] - root_yaw[0])),
        max_fk_error=float(fk_errors(clip, model).max()),
    )


# ------------------------------------------------------------------ building and writing


def quat_mul(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Hamilton product of w, x, y, z quaternions [..., 4]."""
    aw, ax, ay, az = np.moveaxis(a, -1, 0)
    bw, bx, by, bz = np.moveaxis(b, -1, 0)
    return np.stack([aw * bw - ax * bx - ay * by - az * bz, aw * bx + ax * bw + ay * bz - az * by,
                     aw * by - ax * bz + ay * bw + az * bx, aw * bz + ax * by - ay * bx + az * bw], axis=-1)


def world_angular_velocity(quat: np.ndarray, dt: float) -> np.ndarray:
    """World-frame angular velocity [T, ..., 3] of quaternions [T, ..., 4]: central differences, one-sided at ends."""
    # The rotation between neighbours, q[t+1] * conj(q[t-1]), as an angle-axis vector over the time between them.
    ahead = np.concatenate([quat[1:], quat[-1:]])
    behind = np.concatenate([quat[:1], quat[:-1]])
    steps = np.full(len(quat), 2.0)
    steps[[0, -1]] = 1.0
    rel = quat_mul(ahead, behind * np.array([1.0, -1.0, -1.0, -1.0]))
    rel *= np.where(rel[..., :1] < 0, -1.0, 1.0)  # q and -q are one rotation: take the short way
    sin_half = np.linalg.norm(rel[..., 1:], axis=-1, keepdims=True)
    angle = 2.0 * np.arctan2(sin_half, rel[..., :1])
    axis = rel[..., 1:] / np.maximum(sin_half, 1e-12)
    return angle * axis / (steps * dt).reshape((-1,) + (1,) * (quat.ndim - 1))


def clip_from_qpos(qpos: np.ndarray, fps: float | None = None, model: mujoco.MjModel | None = None,
                   dtype=np.float32) -> MotionClip:
    """A clip from a qpos trajectory [T, nq]: bodies by forward kinematics, velocities by central differences."""
    model = model if model is not None else _default_model()
    fps = control_rate() if fps is None else float(fps)
    qpos = np.asarray(qpos, np.float64)
    pos, quat = forward_kinematics(qpos, model)
    dt = 1.0 / fps
    arrays = {"joint_pos": qpos[:, 7:], "joint_vel": np.gradient(qpos[:, 7:], dt, axis=0),
              "body_pos_w": pos, "body_quat_w": quat, "body_lin_vel_w": np.gradient(pos, dt, axis=0),
              "body_ang_vel_w": world_angular_velocity(quat, dt)}
    return MotionClip(fps=fps, **{k: v.astype(dtype) for k, v in arrays.items()})


def write_clip(path: str | Path, clip: MotionClip) -> None:
    """Write a clip in the same .npz layout (uncompressed, no pickled objects) at exactly `path`."""
    arrays = {k: np.asarray(getattr(clip, k)) for k in KEYS[1:]}
    with open(path, "wb") as f:  # a file object: np.savez would append .npz to a path without it
        np.savez(f, fps=np.array([clip.fps], np.float64), **arrays)
