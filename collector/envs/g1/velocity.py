"""g1_velocity_flat: the Unitree G1 humanoid following velocity commands on flat ground.

The task is mjlab 1.6.0's `Mjlab-Velocity-Flat-Unitree-G1` (robot, actuators, action pipeline,
observations, command, curriculum, rewards, terminations, resets, domain randomisation), restated
over N simulations in one native batch; everything per step is whole-array NumPy over the N rows.
Every number of that configuration is a constant below.  Choices it leaves open, and deviations:

- Substeps: the 4 physics substeps of a control step run as 4 native batch calls of one mj_step
  each (BatchedEnv's `_after_substep` hook; `step` and `step_async` both run it), so the contact
  sensors are read after every substep, as mjlab's sensors with history are.  A value read
  after mj_step describes the state at the start of that substep (mj_step runs mj_forward,
  sensors included, before integrating), as in mjlab.  The last call ends with
  mjSTAGE_VEL at the new state, so positions, velocities and their sensors are current.
- Contacts: foot contact (`found` > 0), air time, contact time and the net foot contact force
  (world frame, MuJoCo's contact-sensor sign with the foot subtree as first object, as mjlab's
  `feet_ground_contact` sensor) come from the substep reads; the observed foot contact and force
  are those of the last substep.  Air and contact times count substeps of 0.005 s, so "touched
  down within the last step" (mjlab's first contact) is exact: contact began in one of this step's
  4 substeps.  All are zero after a reset (the reset pose holds the feet 1-5 cm above the floor).
- Self-collisions: sensor `self_collision` is the pelvis subtree against itself with reduce
  `maxforce`, so a substep counts when its strongest self-contact exceeds 10 N, i.e. when any
  self-contact does (mjlab's sensor slot layout is not in our reference; this reads "a
  self-contact force exceeded 10 N" literally).
- Foot height (critic, foot_clearance, foot_swing_height): on the flat plane every one of mjlab's
  7 downward rays from the foot site hits the plane at the site's height, so the foot site's z
  stands in for the ray-cast height scan.
- The foot swing peak height is tracked at the control rate (end-of-step height while the foot is
  off the ground), as mjlab's reward term tracks it, and cleared at touchdown and reset.
- Frames: tracking uses the pelvis (root link) velocity in the pelvis frame (qvel); projected
  gravity and the tilt come from the root quaternion; `upright` from the torso_link body frame;
  `body_ang_vel` is torso_link's world-frame angular velocity; the observation's base velocities
  are the IMU sensors of the facts (imu_lin_vel, imu_ang_vel).
- Command order within a step, as mjlab's: the reward sees the command the policy was given; then
  timers run down, expired envs resample, heading envs get wz = clip(0.5 * wrap(target - heading),
  wz range) and standing envs 0; then pushes.  Reset envs resample at once.  The standing, heading
  and forward-only flags are independent draws per resample (10%, 30%, 20%).
- Curriculum: the stage is read at each resample from `global_step`, this env's count of step()
  calls (mjlab's common step counter; with EnvGroups each group counts the collector's steps).
  mjlab switches the ranges at the first reset after the threshold, which with thousands of envs
  is the same step.  The counter starts at 0 in every new env (a restarted collector starts over).
- Domain randomisation at construction ("startup"), per env: foot friction on all 14 foot capsules
  and the torso_link CoM offset through per-simulation model fields (mjb_expand of geom_friction
  and body_ipos: MuJoCo copies row i into the model before simulating env i), encoder bias per
  joint.  Pushes add a world-frame velocity (linear and angular; qvel's angular part is in the
  pelvis frame, so R^T is applied) when an env's U(1, 3) s timer runs out; its sensors are
  recomputed so the observation shows the pushed state.  What this task shares with
  g1_motion_tracking (model, actions, soft limits, self-collisions, pushes, randomisation) is
  G1Env in base.py.
- air_time has weight 0 in mjlab's G1 config: the term is listed (and reported) but is always 0.
- Termination also covers a non-finite state (never triggered by a healthy simulation).
- njmax 300 and contact_sensor_maxmatch 64 size mujoco_warp's fixed GPU buffers; CPU MuJoCo sizes
  its arena itself, so they are not set (no contact is ever dropped).
"""

from __future__ import annotations

import math

import mujoco
import numpy as np

from collector.envs.batched import non_finite
from collector.envs.g1.base import (
    DECIMATION,
    G1Env,
    count_self_collisions,
    noise_bounds,
    projected_gravity,
    rotate_inv,
    sensor_slice,
)
from collector.envs.g1.model import FEET, joint_names
from collector.envs.physics import STAGE_VEL

# Observation noise bounds (actor only): uniform in [-b, b].
NOISE = {"base_lin_vel": 0.5, "base_ang_vel": 0.2, "projected_gravity": 0.05, "joint_pos": 0.01,
         "joint_vel": 1.5}
# Command "twist".
COMMAND_RESAMPLE_S = (3.0, 8.0)
COMMAND_VY = (-1.0, 1.0)
COMMAND_HEADING = (-math.pi, math.pi)
REL_STANDING, REL_HEADING, REL_FORWARD = 0.1, 0.3, 0.2
HEADING_STIFFNESS = 0.5
FORWARD_MIN_VX = 0.3
# Curriculum: (from global step, vx range, wz range).
CURRICULUM = ((0, (-1.0, 1.0), (-0.5, 0.5)),
              (5000 * 24, (-1.5, 2.0), (-0.7, 0.7)),
              (10000 * 24, (-2.0, 3.0), (-0.7, 0.7)))
# Rewards (weights before the dt scaling).
WEIGHTS = {
    "track_linear_velocity": 2.0,
    "track_angular_velocity": 2.0,
    "upright": 1.0,
    "pose": 1.0,
    "body_ang_vel": -0.05,
    "angular_momentum": -0.02,
    "dof_pos_limits": -1.0,
    "action_rate_l2": -0.1,
    "air_time": 0.0,
    "foot_clearance": -2.0,
    "foot_swing_height": -0.25,
    "foot_slip": -0.1,
    "soft_landing": -1e-5,
    "self_collisions": -1.0,
}
LIN_VEL_SIGMA_SQ = 0.25
ANG_VEL_SIGMA_SQ = 0.5
UPRIGHT_SIGMA_SQ = 0.2
COMMAND_ACTIVE = 0.05  # |cmd_xy| + |cmd_wz| above this: the foot terms apply
WALK_THRESHOLD, RUN_THRESHOLD = 0.05, 1.5
STAND_SIGMA = 0.05
# Posture sigma per joint kind (joint name without side and "_joint"; the wrist's three joints share one).
WALK_SIGMA = {"hip_pitch": 0.3, "hip_roll": 0.15, "hip_yaw": 0.15, "knee": 0.35, "ankle_pitch": 0.25,
              "ankle_roll": 0.1, "waist_yaw": 0.2, "waist_roll": 0.08, "waist_pitch": 0.1, "shoulder_pitch": 0.15,
              "shoulder_roll": 0.15, "shoulder_yaw": 0.1, "elbow": 0.15, "wrist": 0.3}
RUN_SIGMA = {"hip_pitch": 0.5, "hip_roll": 0.2, "hip_yaw": 0.2, "knee": 0.6, "ankle_pitch": 0.35,
             "ankle_roll": 0.15, "waist_yaw": 0.3, "waist_roll": 0.08, "waist_pitch": 0.2, "shoulder_pitch": 0.5,
             "shoulder_roll": 0.2, "shoulder_yaw": 0.15, "elbow": 0.35, "wrist": 0.3}
CLEARANCE_TARGET = 0.1
SWING_HEIGHT_TARGET = 0.1
MAX_TILT_DEG = 70.0
# Reset.
ROOT_HEIGHT = 0.76
RESET_XY = (-0.5, 0.5)
RESET_Z = (0.01, 0.05)
RESET_YAW = (-3.14, 3.14)
# Domain randomisation (foot friction U(0.3, 1.2) and the push interval U(1, 3) s: base.py).
ENCODER_BIAS = (-0.015, 0.015)
TORSO_COM_OFFSET = ((-0.025, 0.025), (-0.025, 0.025), (-0.03, 0.03))  # x, y, z
PUSH_VEL = ((-0.5, 0.5), (-0.5, 0.5), (-0.4, 0.4), (-0.52, 0.52), (-0.52, 0.52), (-0.78, 0.78))  # world v, w

# Observation layout (actor, 99); the critic has the same terms (joint_pos unbiased) then CRITIC_SLICES.
OBS_SLICES = {
    "base_lin_vel": slice(0, 3),
    "base_ang_vel": slice(3, 6),
    "projected_gravity": slice(6, 9),
    "joint_pos": slice(9, 38),
    "joint_vel": slice(38, 67),
    "actions": slice(67, 96),
    "command": slice(96, 99),
}
CRITIC_SLICES = {
    "foot_height": slice(99, 101),
    "foot_air_time": slice(101, 103),
    "foot_contact": slice(103, 105),
    "foot_contact_forces": slice(105, 111),  # left xyz, right xyz
}

# Sensors this task adds to the robot's (model.py): foot kinematics, torso frame, foot contacts.
_TASK_SENSORS = tuple(
    [f'    <framepos name="{f}_pos" objtype="site" objname="{f}"/>' for f in FEET]
    + [f'    <framelinvel name="{f}_linvel" objtype="site" objname="{f}"/>' for f in FEET]
    + ['    <framezaxis name="torso_upvector" objtype="body" objname="world" reftype="xbody" refname="torso_link"/>',
       '    <frameangvel name="torso_angvel" objtype="xbody" objname="torso_link"/>']
    + [f'    <contact name="{f}_contact" subtree1="{f.split("_")[0]}_ankle_roll_link" geom2="floor"'
       ' data="found force" reduce="netforce" num="1"/>' for f in FEET])


class G1VelocityFlat(G1Env):
    """G1 velocity tracking on flat ground (mjlab's Velocity-Flat-Unitree-G1); see the module docstring."""

    task = "g1_velocity_flat"
    task_sensors = _TASK_SENSORS
    encoder_bias_range = ENCODER_BIAS
    torso_com_offset_range = TORSO_COM_OFFSET
    push_vel = PUSH_VEL

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        n, m = self.num_envs, self.model
        nj = m.nu
        kinds = [_joint_kind(j) for j in joint_names()]
        self._sigma = np.array([np.full(nj, STAND_SIGMA), [WALK_SIGMA[k] for k in kinds],
                                [RUN_SIGMA[k] for k in kinds]])
        self._noise_bound = noise_bounds(self.spec.obs_dim, NOISE, OBS_SLICES)
        # Command.
        self.global_step = 0
        self.commands = np.zeros((n, 3))
        self.heading_target = np.zeros(n)
        self.is_heading = np.zeros(n, bool)
        self.is_standing = np.zeros(n, bool)
        self.is_forward = np.zeros(n, bool)
        self.command_time_left = np.zeros(n)
        # Feet: per foot (left, right).
        self.foot_contact = np.zeros((n, 2), bool)
        self.first_contact = np.zeros((n, 2), bool)
        self.foot_force = np.zeros((n, 2, 3))
        self.air_substeps = np.zeros((n, 2), np.int64)
        self.contact_substeps = np.zeros((n, 2), np.int64)
        self.peak_height = np.zeros((n, 2))
        # Per-substep reads of the foot contact sensors.
        self._sub_found = np.zeros((DECIMATION, n, 2))
        self._cols = _sensor_columns(m)
        self._clean = np.zeros((n, self.spec.obs_dim))  # the noise-free, unbiased actor terms (critic's first 99)

    # ------------------------------------------------------------------ public

    def set_commands(self, commands: np.ndarray) -> None:
        """Command every env ([N, 3]: vx, vy, wz) as plain commands (no heading, standing or timer change);
        refreshes the current observation."""
        commands = np.asarray(commands, np.float64)
        if commands.shape != self.commands.shape:
            raise ValueError(f"commands must be {self.commands.shape}, got {commands.shape}")
        self._check_open()
        self.commands[:] = commands
        self.is_heading[:] = False
        self.is_standing[:] = False
        self.refresh()

    def velocity_tracking(self) -> tuple[np.ndarray, np.ndarray]:
        """(commanded, measured) [N, 3] pelvis-frame (vx, vy, yaw rate) of the current state, for appo-eval."""
        v = rotate_inv(self.qpos[:, 3:7], self.qvel[:, :3])
        return self.commands.copy(), np.concatenate([v[:, :2], self.qvel[:, 5:6]], axis=1)

    def command_ranges(self) -> tuple[np.ndarray, np.ndarray]:
        """(low, high) of (vx, vy, yaw rate): the box this task samples commands from now (the curriculum's)."""
        (vx_lo, vx_hi), (wz_lo, wz_hi) = self.curriculum_ranges()
        return np.array([vx_lo, COMMAND_VY[0], wz_lo]), np.array([vx_hi, COMMAND_VY[1], wz_hi])

    def curriculum_ranges(self) -> tuple[tuple[float, float], tuple[float, float]]:
        """(vx range, wz range) of the command curriculum at the current `global_step`."""
        stage = [s for s in CURRICULUM if self.global_step >= s[0]][-1]
        return stage[1], stage[2]

    # ------------------------------------------------------------- task hooks

    def _sample_reset(self, n):
        qpos = np.tile(self.init_qpos, (n, 1))
        qpos[:, :2] += self.rng.uniform(*RESET_XY, (n, 2))
        qpos[:, 2] = ROOT_HEIGHT + self.rng.uniform(*RESET_Z, n)
        yaw = self.rng.uniform(*RESET_YAW, n)
        # The default orientation is the identity, so the yawed pose is the yaw quaternion.
        qpos[:, 3:7] = 0.0
        qpos[:, 3] = np.cos(yaw / 2)
        qpos[:, 6] = np.sin(yaw / 2)
        return qpos, np.zeros((n, self.model.nv))

    def _after_reset(self, ids):
        rows = slice(None) if ids is None else ids
        n = self.num_envs if ids is None else len(ids)
        for arr in (self.foot_force, self.air_substeps, self.contact_substeps, self.peak_height):
            arr[rows] = 0
        self.foot_contact[rows] = False
        self.first_contact[rows] = False
        self._reset_actions_and_timers(rows, n)
        self._resample_commands(np.arange(self.num_envs) if ids is None else ids)
        self._update_commands(rows)
        self._sim.forward(STAGE_VEL, ids)  # sensors of the state just written

    def _after_physics(self):
        self.global_step += 1
        for found in self._sub_found > 0:  # substeps in order
            self.air_substeps = np.where(found, 0, self.air_substeps + 1)
            self.contact_substeps = np.where(found, self.contact_substeps + 1, 0)
        self.foot_contact[:] = self._sub_found[-1] > 0
        np.logical_and(self.contact_substeps > 0, self.contact_substeps <= DECIMATION, out=self.first_contact)
        sd, c = self._sensordata, self._cols
        self.foot_force[:] = sd[:, c["foot_force"]].reshape(-1, 2, 3)
        self.self_collision_count[:] = count_self_collisions(np.linalg.norm(self._sub_self_force, axis=-1))
        in_air = ~self.foot_contact
        self.peak_height[in_air] = np.maximum(self.peak_height, sd[:, c["foot_z"]])[in_air]

    def _fill_obs(self, out, rows):
        sd, c, clean = self._sensordata[rows], self._cols, self._clean
        clean[rows, OBS_SLICES["base_lin_vel"]] = sd[:, c["imu_lin_vel"]]
        clean[rows, OBS_SLICES["base_ang_vel"]] = sd[:, c["imu_ang_vel"]]
        clean[rows, OBS_SLICES["projected_gravity"]] = projected_gravity(self.qpos[rows, 3:7])
        clean[rows, OBS_SLICES["joint_pos"]] = self.qpos[rows, 7:] - self.default_joint_pos
        clean[rows, OBS_SLICES["joint_vel"]] = self.qvel[rows, 6:]
        clean[rows, OBS_SLICES["actions"]] = self.last_actions[rows]
        clean[rows, OBS_SLICES["command"]] = self.commands[rows]
        obs = clean[rows].copy()  # a view for slice(None): the critic keeps the unbiased, clean terms
        obs[:, OBS_SLICES["joint_pos"]] += self.encoder_bias[rows]
        self._add_noise(obs, self._noise_bound)
        out[rows] = obs

    def _fill_critic(self, out, rows):
        n = len(self._clean[rows])
        out[rows, :self.spec.obs_dim] = self._clean[rows]
        out[rows, CRITIC_SLICES["foot_height"]] = self._sensordata[rows][:, self._cols["foot_z"]]
        out[rows, CRITIC_SLICES["foot_air_time"]] = self.air_substeps[rows] * self.model.opt.timestep
        out[rows, CRITIC_SLICES["foot_contact"]] = self.foot_contact[rows]
        f = self.foot_force[rows].reshape(n, 6)
        out[rows, CRITIC_SLICES["foot_contact_forces"]] = np.sign(f) * np.log1p(np.abs(f))

    def _compute_terms(self, terms, terminated):
        self._rewards(terms)
        self._terminated(terminated)
        self.peak_height[self.first_contact] = 0.0  # a landed foot starts a new swing
        self._advance_commands()
        self._push()

    # ---------------------------------------------------------------- physics

    def _after_substep(self, k: int) -> None:
        """Record substep k's foot contacts and self-contact forces (BatchedEnv's per-substep hook)."""
        super()._after_substep(k)
        self._sub_found[k] = self._sensordata[:, self._cols["foot_found"]]

    # ---------------------------------------------------------------- rewards

    def _rewards(self, terms) -> None:
        sd, c, dt = self._sensordata, self._cols, self.dt
        cmd = self.commands
        quat = self.qpos[:, 3:7]
        v = rotate_inv(quat, self.qvel[:, :3])  # root link velocity, pelvis frame
        w = self.qvel[:, 3:6]                    # free joint angular velocity: pelvis frame
        e_lin = np.sum((cmd[:, :2] - v[:, :2]) ** 2, axis=1) + v[:, 2] ** 2
        np.exp(-e_lin / LIN_VEL_SIGMA_SQ, out=terms["track_linear_velocity"])
        e_ang = (cmd[:, 2] - w[:, 2]) ** 2 + w[:, 0] ** 2 + w[:, 1] ** 2
        np.exp(-e_ang / ANG_VEL_SIGMA_SQ, out=terms["track_angular_velocity"])
        g_torso_xy = sd[:, c["torso_upvector"]][:, :2]  # -(gravity direction) in the torso frame: same xy norm
        np.exp(-np.sum(g_torso_xy ** 2, axis=1) / UPRIGHT_SIGMA_SQ, out=terms["upright"])
        speed = command_speed(cmd)
        sigma = self._sigma[posture_regime(speed)]
        q = self.qpos[:, 7:]
        np.exp(-np.mean((q - self.default_joint_pos) ** 2 / sigma ** 2, axis=1), out=terms["pose"])
        w_torso = sd[:, c["torso_angvel"]]
        np.sum(w_torso[:, :2] ** 2, axis=1, out=terms["body_ang_vel"])
        np.sum(sd[:, c["root_angmom"]] ** 2, axis=1, out=terms["angular_momentum"])
        self._joint_limit_excess(terms["dof_pos_limits"])
        self._action_rate(terms["action_rate_l2"])
        terms["air_time"].fill(0.0)  # weight 0 for the G1
        active = speed > COMMAND_ACTIVE
        h = sd[:, c["foot_z"]]
        foot_v = np.stack([sd[:, c[f"{f}_linvel"]][:, :2] for f in FEET], axis=1)  # [N, 2, 2]
        foot_speed_sq = np.sum(foot_v ** 2, axis=2)
        np.sum(np.abs(h - CLEARANCE_TARGET) * np.sqrt(foot_speed_sq), axis=1, out=terms["foot_clearance"])
        swing = (self.peak_height / SWING_HEIGHT_TARGET - 1.0) ** 2
        np.sum(swing * self.first_contact, axis=1, out=terms["foot_swing_height"])
        np.sum(foot_speed_sq * self.foot_contact, axis=1, out=terms["foot_slip"])
        np.sum(np.linalg.norm(self.foot_force, axis=2) * self.first_contact, axis=1, out=terms["soft_landing"])
        for name in ("foot_clearance", "foot_swing_height", "foot_slip", "soft_landing"):
            terms[name] *= active
        np.copyto(terms["self_collisions"], self.self_collision_count, casting="unsafe")
        for name, value in terms.items():
            value *= WEIGHTS[name] * dt

    def termination_conditions(self) -> dict[str, np.ndarray]:
        """Each named reason an episode ends on by failure, [N] bool, of the current state."""
        # Tilt = arccos(-g_z), g the projected gravity; beyond 70 degrees means -g_z < cos(70 deg).
        g_z = projected_gravity(self.qpos[:, 3:7])[:, 2]
        return {f"tilt over {MAX_TILT_DEG:g} deg": -g_z < math.cos(math.radians(MAX_TILT_DEG)),
                "non-finite state": non_finite(self.qpos, self.qvel)}

    # ---------------------------------------------------------------- command

    def _resample_commands(self, ids: np.ndarray) -> None:
        """New twist commands, flags and timers for envs `ids` (mjlab's _resample_command)."""
        n = len(ids)
        rng = self.rng
        vx_range, wz_range = self.curriculum_ranges()
        self.command_time_left[ids] = rng.uniform(*COMMAND_RESAMPLE_S, n)
        cmd = np.stack([rng.uniform(*vx_range, n), rng.uniform(*COMMAND_VY, n), rng.uniform(*wz_range, n)], axis=1)
        self.heading_target[ids] = rng.uniform(*COMMAND_HEADING, n)
        self.is_heading[ids] = rng.uniform(0.0, 1.0, n) <= REL_HEADING
        self.is_standing[ids] = rng.uniform(0.0, 1.0, n) <= REL_STANDING
        forward = rng.uniform(0.0, 1.0, n) <= REL_FORWARD
        self.is_forward[ids] = forward
        cmd[forward, 0] = np.maximum(np.abs(cmd[forward, 0]), FORWARD_MIN_VX)
        cmd[forward, 1:] = 0.0
        self.commands[ids] = cmd

    def _update_commands(self, rows) -> None:
        """Heading envs steer towards their target; standing envs get 0 (mjlab's _update_command)."""
        _, wz_range = self.curriculum_ranges()
        ids = np.arange(self.num_envs)[rows]
        heading = ids[self.is_heading[ids]]
        if len(heading):
            error = wrap_to_pi(self.heading_target[heading] - heading_of(self.qpos[heading, 3:7]))
            self.commands[heading, 2] = np.clip(HEADING_STIFFNESS * error, *wz_range)
        self.commands[ids[self.is_standing[ids]]] = 0.0

    def _advance_commands(self) -> None:
        self.command_time_left -= self.dt
        due = np.flatnonzero(self.command_time_left <= 0.0)
        if len(due):
            self._resample_commands(due)
        self._update_commands(slice(None))


# ------------------------------------------------------------------- helpers


def command_speed(cmd: np.ndarray) -> np.ndarray:
    """s = |cmd_xy| + |cmd_wz|: the posture regime and the foot terms' activity depend on it."""
    return np.hypot(cmd[:, 0], cmd[:, 1]) + np.abs(cmd[:, 2])


def posture_regime(speed: np.ndarray) -> np.ndarray:
    """0 standing (s < 0.05), 1 walking (0.05 <= s < 1.5), 2 running (s >= 1.5)."""
    return (speed >= WALK_THRESHOLD).astype(np.int64) + (speed >= RUN_THRESHOLD)


def heading_of(quat: np.ndarray) -> np.ndarray:
    """Yaw of the body x axis in the world, atan2(R10, R00)."""
    w, x, y, z = quat.T
    return np.arctan2(2 * (w * z + x * y), 1 - 2 * (y * y + z * z))


def wrap_to_pi(angle: np.ndarray) -> np.ndarray:
    return (angle + math.pi) % (2 * math.pi) - math.pi


def _joint_kind(name: str) -> str:
    """left_hip_pitch_joint -> hip_pitch; the three wrist joints -> wrist."""
    kind = name.removesuffix("_joint").removeprefix("left_").removeprefix("right_")
    return "wrist" if kind.startswith("wrist") else kind


def _sensor_columns(m: mujoco.MjModel) -> dict[str, object]:
    """sensordata columns of what the task reads: slices for 3-vectors, index arrays for per-foot values."""
    def cols(name: str) -> slice:
        return sensor_slice(m, name)

    contact = [cols(f"{f}_contact") for f in FEET]  # found, then the net force xyz
    return {
        "imu_lin_vel": cols("imu_lin_vel"),
        "imu_ang_vel": cols("imu_ang_vel"),
        "root_angmom": cols("root_angmom"),
        "torso_upvector": cols("torso_upvector"),
        "torso_angvel": cols("torso_angvel"),
        **{f"{f}_linvel": cols(f"{f}_linvel") for f in FEET},
        "foot_z": np.array([cols(f"{f}_pos").start + 2 for f in FEET]),
        "foot_found": np.array([s.start for s in contact]),
        "foot_force": np.concatenate([np.arange(s.start + 1, s.stop) for s in contact]),
    }
