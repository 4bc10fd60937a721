"""Remove arm self-penetration from G1 motion clips with small, smooth changes of the arm joints.

Retargeted human motion often puts the hands or wrists inside the hips or thighs, which the tracking
task's self-collision penalty makes expensive to track.  `clean_clip` moves the shoulder, elbow and
wrist joints only:

1. per penetrating frame, damped least squares on the contact normals (mj_jac at each contact point)
   pushes the arm out to `clearance`, repeated until clear, within the joints' hard limits;
2. the per-frame corrections are spread in time, each joint's largest correction within +-2 sigma
   held (a signed max filter) and then Gaussian-smoothed, so a correction ramps in and out;
3. the smoothed result is checked again, as written (float32); frames where an arm penetrates, or
   comes closer than half the clearance in a frame that penetrated at first, get more correction and
   steps 2-3 repeat.

The clip is rebuilt from the new joint angles: the arm bodies by forward kinematics and their
velocities and the arm joints' velocities by central differences, as the clip format defines them,
in the frames the correction touched (and their neighbours for the differences).  Every other array
element, legs, pelvis and torso included, is copied bit for bit.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import mujoco
import numpy as np

from collector.envs.g1.motion import MotionClip, forward_kinematics, hinge_limits, world_angular_velocity
from tools.motion_contacts import Contact, SelfContacts, SelfPenetration

ARM_ROOTS = ("left_shoulder_pitch_link", "right_shoulder_pitch_link")  # each arm is the subtree of one
CLEARANCE = 0.005  # m: the distance a corrected frame keeps, so float32 rounding cannot bring contact back
SMOOTH_SIGMA = 0.06  # s: the Gaussian that spreads corrections in time
DAMPING = 1e-4  # m^2: damped least squares, keeps steps finite near singular arm poses
MAX_STEP = 0.2  # rad: largest joint step of one linearised push, so the linearisation holds
FRAME_ITERATIONS = 50  # pushes per frame before giving up
SMOOTH_ITERATIONS = 30  # smoothing rounds before giving up
OVERSHOOT = 0.001  # m: pushes aim this far past the clearance so that they end in finitely many steps


class CleanError(RuntimeError):
    """The arm joints cannot clear a penetration (limits, or a pose the pushes cannot leave)."""


@dataclass(frozen=True)
class CleanResult:
    """A cleaned clip and what changed: the arm joints' corrections and the penetration before and after."""

    clip: MotionClip
    change: np.ndarray  # [T, joints] rad, new minus old joint angles (zero off the arm joints)
    before: SelfPenetration
    after: SelfPenetration
    rounds: int  # smoothing rounds used

    @property
    def frames_touched(self) -> np.ndarray:
        """[T] bool, frames whose joint angles changed."""
        return np.any(self.change != 0, axis=1)


class ArmCleaner:
    """Pushes G1 arms out of the body, frame by frame and smoothly over a clip."""

    def __init__(self, model: mujoco.MjModel | None = None, clearance: float = CLEARANCE,
                 sigma: float = SMOOTH_SIGMA):
        self.contacts = SelfContacts(model, clearance)
        self.clearance = clearance
        self.sigma = sigma
        m = self.contacts.model
        self.arm_bodies = arm_bodies(m)
        self.arm_joints = arm_joints(m)  # hinge indices, qpos order without the root
        self.arm_dofs = m.jnt_dofadr[self.arm_joints + 1]
        self.limits = hinge_limits(m)[self.arm_joints]
        self._jacp = np.zeros((3, m.nv))

    def arm_contacts(self, qpos: np.ndarray, closer_than: float) -> list[Contact]:
        """Self-contacts of the pose with an arm geom on either side (what moving the arms can separate)."""
        body = self.contacts.model.geom_bodyid
        return [c for c in self.contacts.contacts(qpos) if c.dist < closer_than
                and (body[c.geom1] in self.arm_bodies or body[c.geom2] in self.arm_bodies)]

    # -------------------------------------------------------------- one frame

    def push_out(self, qpos: np.ndarray) -> np.ndarray:
        """qpos [nq] with the arm joints moved as little as damped least squares finds so that every
        self-contact of an arm is at least `clearance` apart; CleanError if that fails."""
        q = qpos.astype(np.float64).copy()
        for _ in range(FRAME_ITERATIONS):
            close = self.arm_contacts(q, self.clearance)
            if not close:
                return q
            rows = np.array([self._distance_gradient(c) for c in close])
            need = np.array([self.clearance + OVERSHOOT - c.dist for c in close])
            arm = q[7 + self.arm_joints]
            arm += self._step(rows, need, arm)
            q[7 + self.arm_joints] = np.clip(arm, self.limits[:, 0], self.limits[:, 1])
        worst = min(self.arm_contacts(q, self.clearance), key=lambda c: c.dist)
        raise CleanError(f"the arm joints cannot clear {self.contacts.geom_name(worst.geom1)} / "
                         f"{self.contacts.geom_name(worst.geom2)} (distance {worst.dist:.4f} m after "
                         f"{FRAME_ITERATIONS} pushes)")

    def _distance_gradient(self, contact: Contact) -> np.ndarray:
        """d(contact distance)/d(arm joint angles): the normal part of the two bodies' relative point velocity."""
        m, d = self.contacts.model, self.contacts.data
        rel = np.zeros(m.nv)
        for geom, sign in ((contact.geom2, 1.0), (contact.geom1, -1.0)):
            mujoco.mj_jac(m, d, self._jacp, None, contact.pos, int(m.geom_bodyid[geom]))
            rel += sign * contact.normal @ self._jacp
        return rel[self.arm_dofs]

    def _step(self, rows: np.ndarray, need: np.ndarray, arm: np.ndarray) -> np.ndarray:
        """The damped least-squares joint step that raises each contact's distance by `need`, joints held
        at a limit they would pass, and scaled to MAX_STEP."""
        free = np.ones(len(arm), bool)
        step = np.zeros(len(arm))
        for _ in range(len(arm)):
            a = rows[:, free]
            step[:] = 0.0
            step[free] = a.T @ np.linalg.solve(a @ a.T + DAMPING * np.eye(len(need)), need)
            blocked = free & (((arm <= self.limits[:, 0]) & (step < 0)) | ((arm >= self.limits[:, 1]) & (step > 0)))
            if not blocked.any():
                break
            free &= ~blocked
        largest = np.abs(step).max(initial=0.0)
        return step * min(1.0, MAX_STEP / largest) if largest > 0 else step

    # -------------------------------------------------------------- a clip

    def clean(self, clip: MotionClip) -> CleanResult:
        """The clip with arm self-penetration removed; unchanged (the same arrays) when there is none."""
        before = self.contacts_of(clip)
        qpos = clip.qpos()
        correction = np.zeros((clip.num_frames, len(self.arm_joints)))
        rounds, current, after = 0, clip, before
        while True:
            bad = self._frames_to_push(current, before.frames)
            if not bad.size:
                break
            if rounds == SMOOTH_ITERATIONS:
                raise CleanError(f"{bad.size} frame(s) still penetrate after {rounds} smoothing rounds "
                                 f"(first {int(bad[0])}); try a smaller --smooth")
            trial = current.qpos()
            for t in bad:
                correction[t] += (self.push_out(trial[t]) - trial[t])[7 + self.arm_joints]
            rounds += 1
            current = self.rebuild(clip, qpos, self.smooth(correction, clip.fps))
            after = self.contacts_of(current)
        change = current.joint_pos.astype(np.float64) - clip.joint_pos
        return CleanResult(clip=current, change=change, before=before, after=after, rounds=rounds)

    def contacts_of(self, clip: MotionClip) -> SelfPenetration:
        """The clip's self-penetration, as check sees it (the clip's own float32 numbers)."""
        return self.contacts.penetration(clip.qpos())

    def _frames_to_push(self, clip: MotionClip, penetrated: np.ndarray) -> np.ndarray:
        """Frames where an arm penetrates something, or, in frames that penetrated at first, comes closer than
        half the clearance (smoothing may have shaved the push there; other frames are only pushed if they touch)."""
        gap = np.where(penetrated, 0.5 * self.clearance, 0.0)
        return np.array([t for t, q in enumerate(clip.qpos()) if self.arm_contacts(q, gap[t])], int)

    def smooth(self, correction: np.ndarray, fps: float) -> np.ndarray:
        """[T, arm joints] corrections held over +-2 sigma (largest magnitude wins) and Gaussian-smoothed."""
        sigma = self.sigma * fps  # frames
        if sigma <= 0:
            return correction.copy()
        return gaussian_filter(signed_max_filter(correction, int(np.ceil(2 * sigma))), sigma)

    def rebuild(self, clip: MotionClip, qpos: np.ndarray, correction: np.ndarray) -> MotionClip:
        """The clip with arm angles qpos + correction (clipped to limits, float32); arm bodies and velocities
        recomputed where the angles changed, every other element copied."""
        joints = clip.joint_pos.copy()
        arm = np.clip(qpos[:, 7 + self.arm_joints] + correction, self.limits[:, 0], self.limits[:, 1])
        joints[:, self.arm_joints] = arm.astype(joints.dtype)
        touched = np.any(joints != clip.joint_pos, axis=1)
        if not touched.any():
            return clip
        near = touched.copy()  # and their neighbours: central differences reach one frame either way
        near[1:] |= touched[:-1]
        near[:-1] |= touched[1:]
        new_q = qpos.copy()
        new_q[:, 7:] = joints
        pos, quat = forward_kinematics(new_q[touched], self.contacts.model)
        bodies = self.arm_bodies - 1  # clip arrays leave the world body out
        out = {k: getattr(clip, k).copy() for k in ("joint_vel", "body_pos_w", "body_quat_w", "body_lin_vel_w",
                                                   "body_ang_vel_w")}
        out["body_pos_w"][np.ix_(touched, bodies)] = pos[:, bodies]
        out["body_quat_w"][np.ix_(touched, bodies)] = quat[:, bodies]
        dt = 1.0 / clip.fps
        joint_vel = np.gradient(joints[:, self.arm_joints].astype(np.float64), dt, axis=0)
        out["joint_vel"][np.ix_(near, self.arm_joints)] = joint_vel[near]
        arm_pos = out["body_pos_w"][:, bodies].astype(np.float64)
        out["body_lin_vel_w"][np.ix_(near, bodies)] = np.gradient(arm_pos, dt, axis=0)[near]
        arm_quat = out["body_quat_w"][:, bodies].astype(np.float64)
        out["body_ang_vel_w"][np.ix_(near, bodies)] = world_angular_velocity(arm_quat, dt)[near]
        return dataclasses.replace(clip, joint_pos=joints, **out)


def arm_bodies(model: mujoco.MjModel) -> np.ndarray:
    """Model body ids of both arms (the subtrees of the shoulder pitch links)."""
    roots = [model.body(name).id for name in ARM_ROOTS]
    return np.array([b for b in range(model.nbody) if _ancestor_in(model, b, roots)], int)


def arm_joints(model: mujoco.MjModel) -> np.ndarray:
    """Hinge indices (qpos order, root left out) of the shoulder, elbow and wrist joints."""
    bodies = arm_bodies(model)
    return np.array([j - 1 for j in range(1, model.njnt) if model.jnt_bodyid[j] in bodies], int)


def _ancestor_in(model: mujoco.MjModel, body: int, roots: list[int]) -> bool:
    """Whether the body is one of `roots` or below one."""
    while body > 0:
        if body in roots:
            return True
        body = int(model.body_parentid[body])
    return False


def signed_max_filter(x: np.ndarray, radius: int) -> np.ndarray:
    """[T, k]: per column, the value of largest magnitude within +-radius frames."""
    if radius <= 0:
        return x.copy()
    padded = np.pad(x, ((radius, radius), (0, 0)))
    windows = np.lib.stride_tricks.sliding_window_view(padded, 2 * radius + 1, axis=0)  # [T, k, window]
    pick = np.abs(windows).argmax(axis=-1)
    return np.take_along_axis(windows, pick[..., None], axis=-1)[..., 0]


def gaussian_filter(x: np.ndarray, sigma: float) -> np.ndarray:
    """[T, k] smoothed along time by a Gaussian of `sigma` frames cut at 3 sigma, the end frames repeated."""
    radius = int(np.ceil(3 * sigma))
    kernel = np.exp(-0.5 * (np.arange(-radius, radius + 1) / sigma) ** 2)
    kernel /= kernel.sum()
    # Edge padding: the motion goes on past the clip's ends, so a correction there need not ramp out.
    padded = np.pad(x, ((radius, radius), (0, 0)), mode="edge")
    return np.stack([np.convolve(col, kernel, "valid") for col in padded.T], axis=1)


def clean_clip(clip: MotionClip, model: mujoco.MjModel | None = None, clearance: float = CLEARANCE,
               sigma: float = SMOOTH_SIGMA) -> CleanResult:
    """The clip with its arm self-penetration removed (see the module docstring)."""
    return ArmCleaner(model, clearance, sigma).clean(clip)
