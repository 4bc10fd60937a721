"""g1_walk_flat: the seed's gait-clock G1 walk on flat ground (UniLab 1.5.2's G1WalkFlat), on its own robot.

The robot is walk_model.py's; every number of the task is a constant below,
as the seed's task configuration and terms define it.  N robots share one
MjModel in a native batch; everything per step is whole-array NumPy.

- Control: 50 Hz over 150 Hz physics (3 substeps); joint targets = stand pose +
  0.25 x action, unclipped, held for the substeps.  PD gains are per env and per
  actuator (gainprm/biasprm expanded per simulation), each kp and kd the model's
  scaled by U(0.9, 1.1) at every reset.
- Observation (actor, 98): torso gyro, projected gravity (minus the torso
  up-vector sensor, as the seed reads it), joint positions minus the stand
  pose, joint velocities, the last action, the command (vx, vy, yaw rate) and
  the gait phase of the left and right foot in radians.  The actor's copy gets
  uniform additive noise (gyro 0.2, gravity 0.05, joint pos 0.01, joint vel
  1.5) while `noise` is on; the critic (101) sees the clean terms and the
  pelvis IMU's linear velocity.
- Gait phase: at reset left ~ U(0, 2pi) and right = left + pi (not wrapped
  until the next step, as in the seed); every control step both advance by
  2pi x 1.5 Hz x 0.02 s and wrap to [0, 2pi).  The phase is advanced before the
  rewards of the step are computed.
- Command: vx ~ U(-0.6, 1.0), vy ~ U(-0.4, 0.4), yaw rate ~ U(-0.8, 0.8) at reset
  and every 20 s of an episode (so once in an episode of the 20 s limit); vx
  and vy are zeroed when |(vx, vy)| <= 0.2 (the planar dead zone).
- Reset: joints at the stand pose, still; root at the stand pose + x, y ~
  U(-0.5, 0.5), yaw ~ U(-pi, pi); root linear and angular velocity each
  component ~ U(-0.5, 0.5) in the world frame (the angular part rotated into the
  pelvis frame for qvel).
- Sensors (gyro, up-vector, pelvis IMU velocity, foot sites) as MuJoCo's step
  leaves them: computed as the step's last substep began, one substep (1/150 s)
  before the joint positions and velocities, as the seed reads them (found by
  benchmarks.vs_unilab --parity); after a reset they are current.
- Terminations: torso tilt (angle of the up-vector from world z) > 25 deg,
  pelvis height < 0.55 m, or a non-finite state; the 20 s limit is a
  truncation, bootstrapped by the learner.
- Rewards: the 9 terms below x weight x dt (tracking on the pelvis IMU velocity
  and the torso gyro; feet_phase on the foot sites' heights against the phase's
  Bezier swing profile; base height on the pelvis origin).  The seed gates
  feet_phase on max(vx, 0) >= 0, which always holds, so no gate is applied.

Left out: the seed's random episode counters at the very first reset (they
stagger its envs' time-outs); here every episode starts at step 0, as in the
other tasks, so that an evaluation counts whole episodes.
"""

from __future__ import annotations

import math

import numpy as np

from collector.envs.batched import BatchedEnv, any_of, non_finite
from collector.envs.g1.base import noise_bounds, rotate_inv, sensor_slice
from collector.envs.g1.walk_model import STAND, build_xml
from collector.envs.physics import STAGE_NONE, STAGE_VEL

DECIMATION = 3
ACTION_SCALE = 0.25
COMMAND_LOW = np.array([-0.6, -0.4, -0.8])
COMMAND_HIGH = np.array([1.0, 0.4, 0.8])
COMMAND_PERIOD_S = 20.0
PLANAR_DEAD_ZONE = 0.2  # m/s: a planar command of at most this norm becomes 0
GAIT_HZ = 1.5
SWING_HEIGHT = 0.09
FEET_PHASE_SIGMA = 0.008
TRACKING_SIGMA = 0.25
BASE_HEIGHT_TARGET = 0.754
MIN_BASE_HEIGHT = 0.55
MAX_TILT_DEG = 25.0
RESET_XY = 0.5
RESET_ROOT_VEL = 0.5
GAIN_SCALE = (0.9, 1.1)
# Per joint in qpos order: each leg (hip pitch, roll, yaw, knee, ankle pitch, roll), then waist and arms.
POSE_WEIGHTS = np.array([0.01, 1.0, 5.0, 0.01, 5.0, 5.0] * 2 + [50.0] * 17)
WEIGHTS = {
    "tracking_lin_vel": 2.0,
    "tracking_ang_vel": 0.2,
    "feet_phase": 1.0,
    "lin_vel_z": -1.0,
    "ang_vel_xy": -0.25,
    "base_height": -500.0,
    "orientation": -5.0,
    "action_rate": -0.01,
    "pose": -0.1,
}
FEET_POS = ("left_foot_pos", "right_foot_pos")

# Observation layout (actor); the critic appends the pelvis IMU's linear velocity.
OBS_SLICES = {
    "gyro": slice(0, 3),
    "projected_gravity": slice(3, 6),
    "joint_pos": slice(6, 35),
    "joint_vel": slice(35, 64),
    "last_action": slice(64, 93),
    "command": slice(93, 96),
    "gait_phase": slice(96, 98),
}
CRITIC_LINVEL = slice(98, 101)
NOISE = {"gyro": 0.2, "projected_gravity": 0.05, "joint_pos": 0.01, "joint_vel": 1.5}


class G1WalkFlat(BatchedEnv):
    """The seed's G1 gait-clock walk; see the module docstring for its definition.

    Public state besides BatchedEnv's: `commands` [N, 3], `phase` [N, 2] (left, right, radians),
    `last_actions` [N, 29], `kp`, `kd` [N, 29] (this episode's gains), `noise` (the actor's noise switch).
    """

    task = "g1_walk_flat"
    frame_skip = DECIMATION
    step_stage = STAGE_NONE  # sensors as mj_step leaves them (one substep old): the seed reads them so

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        n, m = self.num_envs, self.model
        self.noise = True  # actor observation noise; False for play and evaluation
        self.reset_root_vel = RESET_ROOT_VEL  # the reset's random root twist bound (benchmarks.walk_falls sets 0)
        self.init_qpos = m.key(STAND).qpos.copy()
        self.default_joint_pos = self.init_qpos[7:].copy()
        self.commands = np.zeros((n, 3))
        self.phase = np.zeros((n, 2))
        self.phase_step = 2 * math.pi * GAIT_HZ * self.dt
        self.last_actions = np.zeros((n, m.nu))
        self._prev_actions = np.zeros((n, m.nu))
        self.clock = np.zeros(n, np.int64)  # control steps since the episode began (command resampling)
        self._command_steps = round(COMMAND_PERIOD_S / self.dt)
        self.nominal_kp = m.actuator_gainprm[:, 0].copy()
        self.nominal_kd = -m.actuator_biasprm[:, 2].copy()
        self.kp = np.tile(self.nominal_kp, (n, 1))
        self.kd = np.tile(self.nominal_kd, (n, 1))
        self._gain = self._sim.field("actuator_gainprm").reshape(n, m.nu, -1)
        self._bias = self._sim.field("actuator_biasprm").reshape(n, m.nu, -1)
        self._sensordata = self._sim.output("sensordata")
        self._cols = {name: sensor_slice(m, name) for name in
                      ("torso_gyro", "torso_upvector", "pelvis_local_linvel", *FEET_POS)}
        self._foot_z = np.array([self._cols[f].start + 2 for f in FEET_POS])
        self._noise_bound = noise_bounds(self.spec.obs_dim, NOISE, OBS_SLICES)
        self._clean_obs = np.zeros((n, self.spec.obs_dim))
        self._probe_terms = {name: np.zeros(n) for name in self.spec.reward_terms}
        self._probe_terminated = np.zeros(n, bool)

    # ------------------------------------------------------------------ public

    def set_commands(self, commands: np.ndarray) -> None:
        """Command every env ([N, 3]: vx, vy, yaw rate, taken as given) from now on; refreshes the observation."""
        commands = np.asarray(commands, np.float64)
        if commands.shape != self.commands.shape:
            raise ValueError(f"commands must be {self.commands.shape}, got {commands.shape}")
        self._check_open()
        self.commands[:] = commands
        self.refresh()

    def refresh(self) -> None:
        """Recompute the current observations (after changing commands, phase or `noise` by hand)."""
        r = self._result
        self._fill_obs(r.obs, slice(None))
        self._fill_critic(r.critic, slice(None))

    def command_ranges(self) -> tuple[np.ndarray, np.ndarray]:
        """(low, high) of (vx, vy, yaw rate): the box this task samples commands from."""
        return COMMAND_LOW.copy(), COMMAND_HIGH.copy()

    def set_gains(self, kp: np.ndarray, kd: np.ndarray) -> None:
        """This episode's PD gains ([N, 29] each, or broadcastable) of every actuator until the env's next reset."""
        self._check_open()
        self.kp[:], self.kd[:] = kp, kd
        self._write_gains(slice(None))

    def velocity_tracking(self) -> tuple[np.ndarray, np.ndarray]:
        """(commanded, measured) [N, 3] (vx, vy, yaw rate): pelvis IMU velocity and torso gyro, for appo-eval."""
        sd, c = self._sensordata, self._cols
        measured = np.concatenate([sd[:, c["pelvis_local_linvel"]][:, :2], sd[:, c["torso_gyro"]][:, 2:3]], axis=1)
        return self.commands.copy(), measured

    def evaluate(self) -> tuple[dict[str, np.ndarray], np.ndarray]:
        """Copies of the weighted reward terms and termination flags of the current state; changes no state."""
        self._check_open()
        self._rewards_and_ends(self._probe_terms, self._probe_terminated)
        return {k: v.copy() for k, v in self._probe_terms.items()}, self._probe_terminated.copy()

    def foot_height_targets(self) -> np.ndarray:
        """[N, 2] the swing profile's height of the left and right foot site at the current phase."""
        return phase_height_targets(self.phase)

    # ------------------------------------------------------------- task hooks

    def _model_xml(self) -> str:
        return build_xml()

    def _sample_reset(self, n):
        qpos = np.tile(self.init_qpos, (n, 1))
        qpos[:, :2] += self.rng.uniform(-RESET_XY, RESET_XY, (n, 2))
        yaw = self.rng.uniform(-math.pi, math.pi, n)
        # The stand orientation is the identity, so the yawed pose is the yaw quaternion.
        qpos[:, 3:7] = 0.0
        qpos[:, 3] = np.cos(yaw / 2)
        qpos[:, 6] = np.sin(yaw / 2)
        qvel = np.zeros((n, self.model.nv))
        twist = self.rng.uniform(-self.reset_root_vel, self.reset_root_vel, (n, 6))  # world frame
        qvel[:, :3] = twist[:, :3]
        qvel[:, 3:6] = rotate_inv(qpos[:, 3:7], twist[:, 3:])  # qvel's angular part is in the pelvis frame
        return qpos, qvel

    def _after_reset(self, ids):
        rows = slice(None) if ids is None else ids
        n = self.num_envs if ids is None else len(ids)
        nu = self.model.nu
        self.kp[rows] = self.nominal_kp * self.rng.uniform(*GAIN_SCALE, (n, nu))
        self.kd[rows] = self.nominal_kd * self.rng.uniform(*GAIN_SCALE, (n, nu))
        self._write_gains(rows)
        self.commands[rows] = self._sample_commands(n)
        left = self.rng.uniform(0.0, 2 * math.pi, n)
        self.phase[rows] = np.stack([left, left + math.pi], axis=1)
        self.last_actions[rows] = 0.0
        self._prev_actions[rows] = 0.0
        self.clock[rows] = 0
        self._sim.forward(STAGE_VEL, ids)  # sensors of the state just written

    def _apply_actions(self, actions):
        np.copyto(self._prev_actions, self.last_actions)
        np.copyto(self.last_actions, actions)
        np.multiply(self.last_actions, ACTION_SCALE, out=self._ctrl)
        self._ctrl += self.default_joint_pos

    def _after_physics(self):
        self.phase += self.phase_step
        np.remainder(self.phase, 2 * math.pi, out=self.phase)
        self.clock += 1

    def _fill_obs(self, out, rows):
        sd, c = self._sensordata[rows], self._cols
        clean = self._clean_obs
        clean[rows, OBS_SLICES["gyro"]] = sd[:, c["torso_gyro"]]
        clean[rows, OBS_SLICES["projected_gravity"]] = -sd[:, c["torso_upvector"]]
        clean[rows, OBS_SLICES["joint_pos"]] = self.qpos[rows, 7:] - self.default_joint_pos
        clean[rows, OBS_SLICES["joint_vel"]] = self.qvel[rows, 6:]
        clean[rows, OBS_SLICES["last_action"]] = self.last_actions[rows]
        clean[rows, OBS_SLICES["command"]] = self.commands[rows]
        clean[rows, OBS_SLICES["gait_phase"]] = self.phase[rows]
        out[rows] = clean[rows]
        if self.noise:
            view = out[rows]
            view += self.rng.uniform(-1.0, 1.0, view.shape) * self._noise_bound
            out[rows] = view

    def _fill_critic(self, out, rows):
        out[rows, :CRITIC_LINVEL.start] = self._clean_obs[rows]
        out[rows, CRITIC_LINVEL] = self._sensordata[rows][:, self._cols["pelvis_local_linvel"]]

    def _compute_terms(self, terms, terminated):
        self._rewards_and_ends(terms, terminated)
        # A new command once the period is up, after this step's rewards and only where the episode goes on:
        # the rewards and the pre-reset observation of a step are about the command the policy saw.
        due = np.flatnonzero((self.clock % self._command_steps == 0) & (self.clock < self.max_episode_steps))
        if len(due):
            self.commands[due] = self._sample_commands(len(due))

    def _rewards_and_ends(self, terms, terminated) -> None:
        """The 9 weighted reward terms (x dt) and the termination flags of the current state."""
        sd, c = self._sensordata, self._cols
        v, w, up = sd[:, c["pelvis_local_linvel"]], sd[:, c["torso_gyro"]], sd[:, c["torso_upvector"]]
        _gaussian(np.sum((self.commands[:, :2] - v[:, :2]) ** 2, axis=1), TRACKING_SIGMA, terms["tracking_lin_vel"])
        _gaussian((self.commands[:, 2] - w[:, 2]) ** 2, TRACKING_SIGMA, terms["tracking_ang_vel"])
        foot_err = np.sum((sd[:, self._foot_z] - phase_height_targets(self.phase)) ** 2, axis=1)
        _gaussian(foot_err, FEET_PHASE_SIGMA, terms["feet_phase"])
        np.square(v[:, 2], out=terms["lin_vel_z"])
        np.einsum("ij,ij->i", w[:, :2], w[:, :2], out=terms["ang_vel_xy"])
        np.square(self.qpos[:, 2] - BASE_HEIGHT_TARGET, out=terms["base_height"])
        np.einsum("ij,ij->i", up[:, :2], up[:, :2], out=terms["orientation"])
        da = self.last_actions - self._prev_actions
        np.einsum("ij,ij->i", da, da, out=terms["action_rate"])
        np.sum(POSE_WEIGHTS * (self.qpos[:, 7:] - self.default_joint_pos) ** 2, axis=1, out=terms["pose"])
        for name, value in terms.items():
            value *= WEIGHTS[name] * self.dt
        self._terminated(terminated)

    # --------------------------------------------------------------- helpers

    def _write_gains(self, rows) -> None:
        """kp and kd of `rows` into their simulations' expanded actuator fields (MuJoCo's PD law uses them)."""
        self._gain[rows, :, 0] = self.kp[rows]
        self._bias[rows, :, 1] = -self.kp[rows]
        self._bias[rows, :, 2] = -self.kd[rows]

    def _sample_commands(self, n: int) -> np.ndarray:
        commands = self.rng.uniform(COMMAND_LOW, COMMAND_HIGH, (n, 3))
        commands[np.linalg.norm(commands[:, :2], axis=1) <= PLANAR_DEAD_ZONE, :2] = 0.0
        return commands

    def termination_conditions(self) -> dict[str, np.ndarray]:
        """Each named reason an episode ends on, [N] bool, of the current state."""
        up_z = np.clip(self._sensordata[:, self._cols["torso_upvector"]][:, 2], -1.0, 1.0)
        return {f"torso tilt over {MAX_TILT_DEG:g} deg": np.arccos(up_z) > math.radians(MAX_TILT_DEG),
                f"pelvis below {MIN_BASE_HEIGHT:g} m": self.qpos[:, 2] < MIN_BASE_HEIGHT,
                "non-finite state": non_finite(self.qpos, self.qvel)}

    def _terminated(self, out: np.ndarray) -> None:
        any_of(self.termination_conditions(), out)


def phase_height_targets(phase: np.ndarray) -> np.ndarray:
    """The seed's cubic-Bezier swing height per foot for phases in radians (any real; taken mod 2pi).

    x = ((phase + pi) mod 2pi) / 2pi; the height rises from 0 to the swing height over x in [0, 0.5] and
    falls back over [0.5, 1): b(t) = t^3 + 3t^2 (1 - t), t = 2x or 2x - 1.
    """
    x = np.remainder(phase + math.pi, 2 * math.pi) / (2 * math.pi)
    rise, fall = np.minimum(2 * x, 1.0), np.maximum(2 * x - 1, 0.0)
    bezier = np.where(x <= 0.5, rise ** 3 + 3 * rise ** 2 * (1 - rise), 1.0 - (fall ** 3 + 3 * fall ** 2 * (1 - fall)))
    return SWING_HEIGHT * bezier


def _gaussian(sq_err: np.ndarray, sigma: float, out: np.ndarray) -> None:
    np.divide(sq_err, -sigma, out=out)
    np.exp(out, out=out)
