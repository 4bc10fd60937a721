"""g1_motion_tracking: the Unitree G1 humanoid tracking a reference motion clip on flat ground.

The task is mjlab 1.6.0's `Mjlab-Tracking-Flat-Unitree-G1` (a BeyondMimic re-implementation): motion
command with reference-state initialisation and adaptive start-frame sampling, observations, the nine
reward terms, terminations, pushes and startup randomisation, restated over N simulations in one native
batch.  Robot, actuators, action pipeline, self-collision counting, pushes and randomisation are shared
with g1_velocity_flat (G1Env, base.py).  Every number of the configuration is a constant below.

The clip (`motion_file`, the config's `task_options.motion_file`) is a `.npz` in the BeyondMimic layout,
loaded and checked by motion.load_clip: 50 fps, one frame per 0.02 s control step.  Choices the
configuration leaves open, and deviations:

- Frames: `frame` [N] is the clip frame the reference shows; the next step's reward, terminations and
  metrics compare the robot after that step's physics with it, then the frame advances by one (mjlab's
  order: rewards, resets, command update).  A (re)start draws a start frame s, places the robot at the
  reference state of s (with the initialisation noise) and shows frame s + 1, as mjlab's command update
  does right after a reset.  This also holds when the clip runs out mid-episode (frame + 1 reaches T):
  there mjlab shows the new frame s itself for one step; here every restart is alike.  The very first
  reset of an mjlab env shows s (its reset skips the command update); here it shows s + 1 like the rest.
  A start frame is at most T - 2, so s + 1 is a frame of the clip.
- Re-anchoring: each reference body is moved rigidly so that the reference anchor's xy is the robot
  anchor's (z stays the reference's) and turned by yaw(q_robot_anchor * q_ref_anchor^-1); the body
  position and orientation rewards and the end-effector termination use these bodies.  The global
  anchor terms and the velocity terms compare world-frame values as they are.
- Rotation errors are the angle of q_ref * q^-1 in [0, pi] (q and -q are one rotation).  The 6-number
  orientation observations are the first two columns of the rotation matrix, row by row
  (R00, R01, R10, R11, R20, R21), as mjlab's `matrix[..., :2].reshape(n, -1)`.
- Robot bodies are their frames (MuJoCo xpos, xquat: mjlab's body link frames); a body's linear velocity
  is that of its frame origin, world frame, from cvel at the subtree CoM; the clip's velocities are of
  the same points.  The base velocities are the pelvis IMU sensors, as in g1_velocity_flat.
- Adaptive sampling: envs that end by termination (not time-out) add a failure to the bin of the frame
  they were compared with; the per-bin score is an EMA, score = 0.001 * failures + 0.999 * score,
  applied once per step (before the next step's failures are counted, so every draw sees the score of
  the steps before it, as in mjlab).  Failures of one step add up (mjlab keeps the last batch counted
  within a step).  p(bin) is proportional to score + 0.1 / bins, smoothed by the normalised kernel
  0.8^i of size 1 (no smoothing), start frame = floor((bin + U(0, 1)) / bins * (T - 1)).  With
  EnvGroups each group keeps its own scores.  `sampling_mode = "start"` starts every episode at
  frame 0 (mjlab's play mode; set `init_noise` and `pushes` False too).
- Reference-state initialisation: root position + U(+-0.05, +-0.05, +-0.01), orientation pre-multiplied
  by the rotation of Euler angles (roll, pitch, yaw) U(+-0.1, +-0.1, +-0.2) composed as
  Rz(yaw) Ry(pitch) Rx(roll); root velocity + the world-frame ranges of the pushes (qvel's angular part
  is the pelvis frame, so R^T of the new orientation is applied); joint angles + U(+-0.1) and then
  clipped to the soft limits (always, as mjlab); joint velocities the clip's.  The action history is
  zeroed at an episode reset, not at a mid-episode restart (mjlab's action manager resets with the
  episode only).
- Self-collisions: counted as in g1_velocity_flat (substeps whose strongest self-contact exceeds 10 N).
- Termination also covers a non-finite state (never triggered by a healthy simulation).
- nconmax 35 and njmax 250 size mujoco_warp's fixed GPU buffers; CPU MuJoCo sizes its own arena.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from collector.envs.batched import non_finite
from collector.envs.g1.base import G1Env, count_self_collisions, noise_bounds, rotate, rotate_inv, sensor_slice
from collector.envs.g1.motion import ClipError, MotionClip, load_clip, quat_mul
from collector.envs.physics import STAGE_VEL

# Motion command "motion".
ANCHOR_BODY = "torso_link"
TRACKED_BODIES = ("pelvis", "left_hip_roll_link", "left_knee_link", "left_ankle_roll_link", "right_hip_roll_link",
                  "right_knee_link", "right_ankle_roll_link", "torso_link", "left_shoulder_roll_link",
                  "left_elbow_link", "left_wrist_yaw_link", "right_shoulder_roll_link", "right_elbow_link",
                  "right_wrist_yaw_link")
END_EFFECTORS = ("left_ankle_roll_link", "right_ankle_roll_link", "left_wrist_yaw_link", "right_wrist_yaw_link")
# Reference-state initialisation: root position x, y, z; orientation roll, pitch, yaw (pre-multiplied);
# root velocity (world) vx, vy, vz, wx, wy, wz; joint angle offset.
INIT_POS = ((-0.05, 0.05), (-0.05, 0.05), (-0.01, 0.01))
INIT_RPY = ((-0.1, 0.1), (-0.1, 0.1), (-0.2, 0.2))
INIT_VEL = ((-0.5, 0.5), (-0.5, 0.5), (-0.2, 0.2), (-0.52, 0.52), (-0.52, 0.52), (-0.78, 0.78))
INIT_JOINT_POS = (-0.1, 0.1)
# Adaptive sampling of start frames.
FRAMES_PER_BIN = 50  # bins = floor(T / 50) + 1: about one per second of clip
ADAPTIVE_ALPHA = 0.001
ADAPTIVE_UNIFORM_RATIO = 0.1
ADAPTIVE_KERNEL_SIZE = 1
ADAPTIVE_LAMBDA = 0.8
# Observation noise bounds (actor only): uniform in [-b, b].
NOISE = {"motion_anchor_pos_b": 0.25, "motion_anchor_ori_b": 0.05, "base_lin_vel": 0.5, "base_ang_vel": 0.2,
         "joint_pos": 0.01, "joint_vel": 0.5}
# Rewards (weights before the dt scaling) and the sigma of each exp(-error / sigma^2) kernel.
WEIGHTS = {
    "motion_global_root_pos": 0.5,
    "motion_global_root_ori": 0.5,
    "motion_body_pos": 1.0,
    "motion_body_ori": 1.0,
    "motion_body_lin_vel": 1.0,
    "motion_body_ang_vel": 1.0,
    "action_rate_l2": -0.1,
    "joint_limit": -10.0,
    "self_collisions": -10.0,
}
SIGMA = {"motion_global_root_pos": 0.3, "motion_global_root_ori": 0.4, "motion_body_pos": 0.3,
         "motion_body_ori": 0.4, "motion_body_lin_vel": 1.0, "motion_body_ang_vel": 3.14}
# Terminations.
ANCHOR_Z_THRESHOLD = 0.25  # m
ANCHOR_GRAVITY_Z_THRESHOLD = 0.8
END_EFFECTOR_Z_THRESHOLD = 0.25  # m
# Domain randomisation (foot friction U(0.3, 1.2) and the push interval U(1, 3) s: base.py).
ENCODER_BIAS = (-0.01, 0.01)
TORSO_COM_OFFSET = ((-0.025, 0.025), (-0.05, 0.05), (-0.05, 0.05))  # x, y, z
PUSH_VEL = INIT_VEL  # world v, w: the same ranges as the initialisation velocity noise

# Observation layout: actor (160), then critic (286).
OBS_SLICES = {
    "command": slice(0, 58),  # reference joint_pos (29), joint_vel (29)
    "motion_anchor_pos_b": slice(58, 61),
    "motion_anchor_ori_b": slice(61, 67),
    "base_lin_vel": slice(67, 70),
    "base_ang_vel": slice(70, 73),
    "joint_pos": slice(73, 102),
    "joint_vel": slice(102, 131),
    "actions": slice(131, 160),
}
CRITIC_SLICES = {
    "command": slice(0, 58),
    "motion_anchor_pos_b": slice(58, 61),
    "motion_anchor_ori_b": slice(61, 67),
    "body_pos": slice(67, 109),  # 14 bodies x (x, y, z) in the robot anchor frame
    "body_ori": slice(109, 193),  # 14 bodies x 6
    "base_lin_vel": slice(193, 196),
    "base_ang_vel": slice(196, 199),
    "joint_pos": slice(199, 228),
    "joint_vel": slice(228, 257),
    "actions": slice(257, 286),
}


class G1MotionTracking(G1Env):
    """G1 motion tracking on flat ground (mjlab's Tracking-Flat-Unitree-G1); see the module docstring.

    For evaluation, after each step (errors of the comparison the step's reward made; for an env that
    just reset, those of its finished episode's last step), float64 [N] unless said:
    `anchor_pos_error` |p_ref - p| of the torso_link anchor, world frame (m); `body_pos_error` the mean
    over the 14 tracked bodies of |p_ref - p| against the re-anchored reference (m), and
    `body_pos_error_per_body` [N, 14] those distances per body in TRACKED_BODIES order; `joint_pos_error`
    the norm over the 29 joints of q_ref - q (rad); `clip_progress` the compared frame / (T - 1), the
    fraction of the clip played (0 at the first frame, 1 at the last).
    """

    task = "g1_motion_tracking"
    uses_motion_file = True  # make_env passes the config's task_options.motion_file
    encoder_bias_range = ENCODER_BIAS
    torso_com_offset_range = TORSO_COM_OFFSET
    push_vel = PUSH_VEL

    def __init__(self, num_envs: int, num_threads: int, seed: int, max_episode_steps: int | None = None,
                 stepper=None, motion_file: str | Path | None = None, sim: str = "mujoco"):
        """motion_file: the reference clip (.npz, BeyondMimic layout, 50 fps); ClipError if missing or refused."""
        self.clip = load_motion_file(motion_file)  # before any simulation is built
        super().__init__(num_envs, num_threads, seed, max_episode_steps=max_episode_steps, stepper=stepper, sim=sim)
        n, m, clip = self.num_envs, self.model, self.clip
        self.init_noise = True  # reference-state initialisation noise; False for play/tests
        self.sampling_mode = "adaptive"  # or "start": every episode from frame 0 (play)
        # Reference arrays of the tracked bodies (clip body index = model body id - 1), float64.
        self.body_ids = np.array([m.body(b).id for b in TRACKED_BODIES])
        self.anchor = TRACKED_BODIES.index(ANCHOR_BODY)
        self.end_effectors = np.array([TRACKED_BODIES.index(b) for b in END_EFFECTORS])
        clip_ids = self.body_ids - 1
        self.ref_pos = clip.body_pos_w[:, clip_ids].astype(np.float64)
        self.ref_quat = clip.body_quat_w[:, clip_ids].astype(np.float64)
        self.ref_lin_vel = clip.body_lin_vel_w[:, clip_ids].astype(np.float64)
        self.ref_ang_vel = clip.body_ang_vel_w[:, clip_ids].astype(np.float64)
        self.ref_root = tuple(getattr(clip, k)[:, 0].astype(np.float64)
                              for k in ("body_pos_w", "body_quat_w", "body_lin_vel_w", "body_ang_vel_w"))
        self.ref_joint_pos = clip.joint_pos.astype(np.float64)
        self.ref_joint_vel = clip.joint_vel.astype(np.float64)
        self.num_frames = clip.num_frames
        self.frame = np.zeros(n, np.int64)
        # Adaptive sampling.
        self.num_bins = self.num_frames // FRAMES_PER_BIN + 1
        self.bin_scores = np.zeros(self.num_bins)
        self._bin_failures = np.zeros(self.num_bins)
        kernel = ADAPTIVE_LAMBDA ** np.arange(ADAPTIVE_KERNEL_SIZE)
        self._kernel = kernel / kernel.sum()
        self._restart_frames: np.ndarray | None = None
        # Evaluation metrics.
        self.anchor_pos_error = np.zeros(n)
        self.body_pos_error = np.zeros(n)
        self.body_pos_error_per_body = np.zeros((n, len(TRACKED_BODIES)))
        self.joint_pos_error = np.zeros(n)
        self.clip_progress = np.zeros(n)
        # Robot state outputs and observation buffers.
        self._xpos = self._sim.output("xpos")
        self._xquat = self._sim.output("xquat")
        self._cvel = self._sim.output("cvel")
        self._subtree_com = self._sim.output("subtree_com")
        self._imu = (sensor_slice(m, "imu_lin_vel"), sensor_slice(m, "imu_ang_vel"))
        self._noise_bound = noise_bounds(self.spec.obs_dim, NOISE, OBS_SLICES)
        self._blocks: dict[str, np.ndarray] = {}
        self._cmp: dict[str, np.ndarray] = {}

    # ------------------------------------------------------------------ public

    def sampling_probabilities(self) -> np.ndarray:
        """[bins] probability of each start-frame bin: score + 0.1 / bins, kernel-smoothed, normalised."""
        p = self.bin_scores + ADAPTIVE_UNIFORM_RATIO / self.num_bins
        padded = np.concatenate([p, np.full(ADAPTIVE_KERNEL_SIZE - 1, p[-1])])
        p = np.correlate(padded, self._kernel, mode="valid")
        return p / p.sum()

    def bin_of(self, frames: np.ndarray) -> np.ndarray:
        """The adaptive-sampling bin of clip frames: floor(frame * bins / T), within [0, bins - 1]."""
        return np.clip(np.asarray(frames) * self.num_bins // self.num_frames, 0, self.num_bins - 1)

    def reference_state(self, frames: np.ndarray, noise: bool) -> tuple[np.ndarray, np.ndarray]:
        """(qpos [n, 36], qvel [n, 35]) of the clip at `frames`, with the initialisation noise when `noise`."""
        frames = np.asarray(frames)
        n = len(frames)
        pos, quat, lin, ang = (a[frames].copy() for a in self.ref_root)
        joints = self.ref_joint_pos[frames].copy()
        if noise:
            rng = self.rng
            pose = rng.uniform(*np.array(INIT_POS + INIT_RPY).T, (n, 6))
            vel = rng.uniform(*np.array(INIT_VEL).T, (n, 6))
            pos += pose[:, :3]
            quat = quat_mul(quat_from_euler_xyz(pose[:, 3:]), quat)
            lin += vel[:, :3]
            ang += vel[:, 3:]
            joints += rng.uniform(*INIT_JOINT_POS, joints.shape)
        joints = np.clip(joints, self.soft_limits[:, 0], self.soft_limits[:, 1])
        qpos = np.concatenate([pos, quat, joints], axis=1)
        qvel = np.concatenate([lin, rotate_inv(quat, ang), self.ref_joint_vel[frames]], axis=1)
        return qpos, qvel

    # ------------------------------------------------------------- task hooks

    def _sample_reset(self, n):
        frames = self._sample_frames(n)
        self._restart_frames = frames + 1
        return self.reference_state(frames, self.init_noise)

    def _after_reset(self, ids):
        rows = slice(None) if ids is None else ids
        n = self.num_envs if ids is None else len(ids)
        if self._restart_frames is not None:  # None after set_state: the frame is left as it is
            self.frame[rows] = self._restart_frames
            self._restart_frames = None
        self._reset_actions_and_timers(rows, n)
        self._sim.forward(STAGE_VEL, ids)  # sensors and body frames of the state just written

    def _after_physics(self):
        self.self_collision_count[:] = count_self_collisions(np.linalg.norm(self._sub_self_force, axis=-1))

    def _fill_obs(self, out, rows):
        pos, quat, _, _ = self._robot_bodies(rows)
        anchor_pos, anchor_quat = pos[:, self.anchor], quat[:, self.anchor]
        frames = self.frame[rows]
        ref_anchor_pos, ref_anchor_quat = self.ref_pos[frames, self.anchor], self.ref_quat[frames, self.anchor]
        n = len(frames)
        sd = self._sensordata[rows]
        b = self._blocks = {
            "command": np.concatenate([self.ref_joint_pos[frames], self.ref_joint_vel[frames]], axis=1),
            "motion_anchor_pos_b": rotate_inv(anchor_quat, ref_anchor_pos - anchor_pos),
            "motion_anchor_ori_b": two_columns(quat_mul(quat_conj(anchor_quat), ref_anchor_quat)).reshape(n, 6),
            "body_pos": rotate_inv(anchor_quat[:, None], pos - anchor_pos[:, None]).reshape(n, -1),
            "body_ori": two_columns(quat_mul(quat_conj(anchor_quat)[:, None], quat)).reshape(n, -1),
            "base_lin_vel": sd[:, self._imu[0]],
            "base_ang_vel": sd[:, self._imu[1]],
            "joint_pos": self.qpos[rows, 7:] - self.default_joint_pos,
            "joint_vel": self.qvel[rows, 6:],
            "actions": self.last_actions[rows],
        }
        obs = np.empty((n, self.spec.obs_dim))
        for name, cols in OBS_SLICES.items():
            obs[:, cols] = b[name]
        obs[:, OBS_SLICES["joint_pos"]] += self.encoder_bias[rows]
        self._add_noise(obs, self._noise_bound)
        out[rows] = obs

    def _fill_critic(self, out, rows):
        for name, cols in CRITIC_SLICES.items():
            out[rows, cols] = self._blocks[name]  # the blocks _fill_obs just computed for these rows

    def _compute_terms(self, terms, terminated):
        self._rewards(terms)
        self._terminated(terminated)
        # The score update of the previous step, then this step's failures.
        self.bin_scores = ADAPTIVE_ALPHA * self._bin_failures + (1 - ADAPTIVE_ALPHA) * self.bin_scores
        self._bin_failures = np.bincount(self.bin_of(self.frame[terminated]), minlength=self.num_bins).astype(float)
        done = terminated | (self._steps + 1 >= self.max_episode_steps)  # these reset after this step
        self._advance(~done)
        self._push()

    # ---------------------------------------------------------------- rewards

    def _rewards(self, terms) -> None:
        """The weighted terms of the current state against the current frame (keeps the comparison for
        `_terminated` and the metrics)."""
        pos, quat, lin, ang = self._robot_bodies(slice(None))
        f = self.frame
        ref_pos, ref_quat = self.ref_pos[f], self.ref_quat[f]
        a = self.anchor
        rel_pos, rel_quat = reanchor(ref_pos, ref_quat, a, pos[:, a], quat[:, a])
        self._cmp = {"anchor_z": pos[:, a, 2], "ref_anchor_z": ref_pos[:, a, 2], "anchor_quat": quat[:, a],
                     "ref_anchor_quat": ref_quat[:, a], "rel_z": rel_pos[..., 2], "z": pos[..., 2]}
        errors = {
            "motion_global_root_pos": np.sum((ref_pos[:, a] - pos[:, a]) ** 2, axis=1),
            "motion_global_root_ori": quat_angle(ref_quat[:, a], quat[:, a]) ** 2,
            "motion_body_pos": np.mean(np.sum((rel_pos - pos) ** 2, axis=2), axis=1),
            "motion_body_ori": np.mean(quat_angle(rel_quat, quat) ** 2, axis=1),
            "motion_body_lin_vel": np.mean(np.sum((self.ref_lin_vel[f] - lin) ** 2, axis=2), axis=1),
            "motion_body_ang_vel": np.mean(np.sum((self.ref_ang_vel[f] - ang) ** 2, axis=2), axis=1),
        }
        for name, e in errors.items():
            np.exp(-e / SIGMA[name] ** 2, out=terms[name])
        self._action_rate(terms["action_rate_l2"])
        self._joint_limit_excess(terms["joint_limit"])
        np.copyto(terms["self_collisions"], self.self_collision_count, casting="unsafe")
        for name, value in terms.items():
            value *= WEIGHTS[name] * self.dt
        self.anchor_pos_error[:] = np.sqrt(errors["motion_global_root_pos"])
        self.body_pos_error_per_body[:] = np.linalg.norm(rel_pos - pos, axis=2)
        self.body_pos_error[:] = np.mean(self.body_pos_error_per_body, axis=1)
        self.joint_pos_error[:] = np.linalg.norm(self.ref_joint_pos[f] - self.qpos[:, 7:], axis=1)
        self.clip_progress[:] = f / (self.num_frames - 1)

    def termination_conditions(self) -> dict[str, np.ndarray]:
        """Each named reason an episode ends on by failure, [N] bool, of the current state."""
        c = self._cmp
        # Gravity (0, 0, -1) in a frame has z = -R22: compare the reference anchor's with the robot's.
        g_ref_z, g_z = -rotation_zz(c["ref_anchor_quat"]), -rotation_zz(c["anchor_quat"])
        ee = self.end_effectors
        return {
            f"anchor height off the reference by over {ANCHOR_Z_THRESHOLD:g} m":
                np.abs(c["ref_anchor_z"] - c["anchor_z"]) > ANCHOR_Z_THRESHOLD,
            "anchor orientation off the reference": np.abs(g_ref_z - g_z) > ANCHOR_GRAVITY_Z_THRESHOLD,
            f"end effector height off the reference by over {END_EFFECTOR_Z_THRESHOLD:g} m":
                np.any(np.abs(c["rel_z"][:, ee] - c["z"][:, ee]) > END_EFFECTOR_Z_THRESHOLD, axis=1),
            "non-finite state": non_finite(self.qpos, self.qvel),
        }

    # ---------------------------------------------------------------- command

    def _sample_frames(self, n: int) -> np.ndarray:
        """Start frames of n (re)starts: adaptive by failure bins, or 0 in "start" mode; at most T - 2."""
        if self.sampling_mode == "start":
            return np.zeros(n, np.int64)
        bins = self.rng.choice(self.num_bins, size=n, p=self.sampling_probabilities())
        frames = ((bins + self.rng.uniform(0.0, 1.0, n)) / self.num_bins * (self.num_frames - 1)).astype(np.int64)
        return np.minimum(frames, self.num_frames - 2)

    def _advance(self, running: np.ndarray) -> None:
        """Advance the frame of running envs; those whose clip ran out restart at a new reference state."""
        self.frame[running] += 1
        out = np.flatnonzero(running & (self.frame >= self.num_frames)).astype(np.int32)
        if not len(out):
            return
        frames = self._sample_frames(len(out))
        self._sim.set_state(out, *self.reference_state(frames, self.init_noise))
        self.frame[out] = frames + 1
        self._sim.forward(STAGE_VEL, out)

    # ---------------------------------------------------------------- robot

    def _robot_bodies(self, rows) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """World position, orientation, linear velocity (of the frame origin) and angular velocity of the
        tracked bodies [n, 14, 3 or 4], from the batch's body frames and cvel."""
        ids = self.body_ids
        pos = self._xpos[rows].reshape(-1, self.model.nbody, 3)[:, ids]
        quat = self._xquat[rows].reshape(-1, self.model.nbody, 4)[:, ids]
        cvel = self._cvel[rows].reshape(-1, self.model.nbody, 6)[:, ids]
        com = self._subtree_com[rows].reshape(-1, self.model.nbody, 3)[:, 1:2]  # the robot's root: pelvis
        ang = cvel[..., :3]
        lin = cvel[..., 3:] + np.cross(ang, pos - com)
        return pos, quat, lin, ang


# ------------------------------------------------------------------- helpers


def load_motion_file(motion_file: str | Path | None) -> MotionClip:
    """The checked clip, or ClipError naming the config field when it is not set or the clip is refused."""
    if not motion_file:
        raise ClipError("task g1_motion_tracking needs a reference motion: set task_options.motion_file to a "
                        ".npz clip (BeyondMimic layout, 50 fps; check one with `appo-motion check CLIP.npz`); "
                        "the config's default is the seed's clip, downloaded on first use (common/hub.py)")
    try:
        return load_clip(motion_file)
    except ClipError as exc:
        raise ClipError(f"task_options.motion_file: {exc}") from None


def reanchor(ref_pos: np.ndarray, ref_quat: np.ndarray, anchor: int, robot_anchor_pos: np.ndarray,
             robot_anchor_quat: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Reference bodies [n, b, 3], [n, b, 4] moved rigidly so that the reference anchor (body `anchor`) has the
    robot anchor's xy (z kept) and turned by yaw(q_robot_anchor * q_ref_anchor^-1)."""
    ref_anchor_pos, ref_anchor_quat = ref_pos[:, anchor], ref_quat[:, anchor]
    delta_pos = robot_anchor_pos.copy()
    delta_pos[:, 2] = ref_anchor_pos[:, 2]
    delta = yaw_quat(quat_mul(robot_anchor_quat, quat_conj(ref_anchor_quat)))[:, None]
    pos = delta_pos[:, None] + rotate(delta, ref_pos - ref_anchor_pos[:, None])
    return pos, quat_mul(delta, ref_quat)


def quat_conj(q: np.ndarray) -> np.ndarray:
    """Conjugate (inverse of a unit quaternion) of w, x, y, z quaternions [..., 4]."""
    return q * np.array([1.0, -1.0, -1.0, -1.0])


def quat_angle(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Rotation angle in [0, pi] of a * b^-1 (the error magnitude between orientations a and b)."""
    d = quat_mul(a, quat_conj(b))
    return 2.0 * np.arctan2(np.linalg.norm(d[..., 1:], axis=-1), np.abs(d[..., 0]))


def yaw_quat(q: np.ndarray) -> np.ndarray:
    """The rotation about world z by the heading of q (atan2(R10, R00)), as w, x, y, z [..., 4]."""
    w, x, y, z = np.moveaxis(q, -1, 0)
    half = 0.5 * np.arctan2(2 * (w * z + x * y), 1 - 2 * (y * y + z * z))
    zero = np.zeros_like(half)
    return np.stack([np.cos(half), zero, zero, np.sin(half)], axis=-1)


def quat_from_euler_xyz(rpy: np.ndarray) -> np.ndarray:
    """[n, 4] quaternion of Euler angles [n, 3] (roll, pitch, yaw): Rz(yaw) Ry(pitch) Rx(roll)."""
    half = 0.5 * rpy
    c, s = np.cos(half), np.sin(half)
    zero = np.zeros(len(rpy))
    qx = np.stack([c[:, 0], s[:, 0], zero, zero], axis=1)
    qy = np.stack([c[:, 1], zero, s[:, 1], zero], axis=1)
    qz = np.stack([c[:, 2], zero, zero, s[:, 2]], axis=1)
    return quat_mul(qz, quat_mul(qy, qx))


def two_columns(q: np.ndarray) -> np.ndarray:
    """[..., 3, 2] the first two columns of the rotation matrices of unit quaternions [..., 4]."""
    w, x, y, z = np.moveaxis(q, -1, 0)
    return np.stack([np.stack([1 - 2 * (y * y + z * z), 2 * (x * y - w * z)], axis=-1),
                     np.stack([2 * (x * y + w * z), 1 - 2 * (x * x + z * z)], axis=-1),
                     np.stack([2 * (x * z - w * y), 2 * (y * z + w * x)], axis=-1)], axis=-2)


def rotation_zz(q: np.ndarray) -> np.ndarray:
    """R22 of unit quaternions [..., 4]: the body z axis's world z."""
    return 1 - 2 * (q[..., 1] ** 2 + q[..., 2] ** 2)
