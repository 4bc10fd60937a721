"""go2_joystick_flat: the Unitree Go2 tracking a commanded body velocity on flat ground.

The spec is docs/design.md#go2_joystick_flat.  N robots share one MjModel in a
native batch; everything per step is whole-array NumPy over the N rows.
Decisions the spec leaves open:

- PD gains per env, exactly: the actuators are PD servos (model.py) whose
  gainprm/biasprm are expanded per simulation (mjb_expand), so simulation i
  runs kp_i, kd_i inside MuJoCo at every substep, torque clamped to the
  actuator forcerange.  Nothing of
  the PD law is frozen over the two substeps, which the affine-bias trick
  (nominal gains in the model, the deviation held in ctrl) would do.  A kp
  and a kd per actuator of every env, each drawn on its own at every reset,
  as the seed's pd_gains event draws them (found by benchmarks.vs_unilab --parity).
- Sensors as MuJoCo's step leaves them, as the seed reads them: sensordata
  (gyro, velocimeter, up vector, foot positions, contact `found`) was computed
  at the start of the last physics substep, one substep (0.01 s) before the
  joint positions and velocities the observation also holds.  After a reset
  they are current.
- Frames: tracking, lin_vel_z and ang_vel_xy all use body-frame velocities at
  the IMU site (velocimeter and gyro); base height is the base origin's z.
- Gait phase, as the seed's gait terms keep it: one float32 clock per env,
  advanced by float32(2 Hz x 0.02 s) and wrapped by fmod at every control step
  since the env was made or last reset as a whole, never by an episode (so every
  env has the same phase); per foot (FL, FR, RL, RR) phi = (clock + offset) mod 1 in float32,
  offsets (0, 0.5, 0.5, 0); the observation holds phi itself in [0, 1).  A foot
  should be in stance when phi < 0.6.  The float32 sums are the seed's, so a
  stance/swing switch falls on the same step as there.
- Feet contact: a foot is in contact when its contact sensor finds a contact
  between the foot sphere and the floor (within the geom margin, 1 mm).
- Per-foot terms are means over the four feet: feet_contact is
  0.24 * dt * mean_i[contact_i == stance_i]; feet_swing_height is
  4.0 * dt * mean_i[swing_i * exp(-(h_i - 0.1)^2 / 0.01)], where stance feet
  contribute 0 and h_i is the height of foot i's sphere centre (the seed's
  framepos of the foot geom; not its lowest point, which is 0.022 m lower).
- Actions are clipped to +-100 before use (and in the observation and the
  action-rate cost), legged_gym's bound: it keeps a runaway Gaussian policy's
  targets finite without binding ordinary actions; the actuator forcerange
  bounds the torque anyway.
- Commands are drawn uniformly per component at reset and every 1000 control
  steps (20 s) of an episode.
"""

from __future__ import annotations

import math

import mujoco
import numpy as np

from collector.envs.batched import BatchedEnv, any_of, non_finite
from collector.envs.go2.model import FEET, build_xml
from collector.envs.physics import STAGE_NONE, STAGE_VEL

ACTION_SCALE = 0.25
ACTION_CLIP = 100.0
COMMAND_LOW = np.array([-0.6, -0.4, -0.8])
COMMAND_HIGH = np.array([1.0, 0.4, 0.8])
COMMAND_PERIOD_S = 20.0
GAIT_HZ = 2.0
GAIT_OFFSETS = np.array([0.0, 0.5, 0.5, 0.0], np.float32)  # FL, FR, RL, RR: a trot
STANCE_FRACTION = np.float32(0.6)
KP_RANGE = (31.5, 38.5)
KD_RANGE = (0.45, 0.55)
RESET_XY = 0.5
RESET_ROOT_VEL = 0.5
MAX_TILT_DEG = 60.0
TRACKING_SIGMA = 0.25
BASE_HEIGHT_TARGET = 0.3
SWING_HEIGHT_TARGET = 0.1
SWING_HEIGHT_SIGMA = 0.01
WEIGHTS = {
    "tracking_lin_vel": 1.0,
    "tracking_ang_vel": 0.2,
    "lin_vel_z": -5.0,
    "ang_vel_xy": -0.1,
    "base_height": -100.0,
    "action_rate": -0.005,
    "similar_to_default": -0.1,
    "feet_contact": 0.24,
    "feet_swing_height": 4.0,
}

# Observation layout (policy); the critic appends the body-frame linear velocity.
OBS_SLICES = {
    "gyro": slice(0, 3),
    "projected_gravity": slice(3, 6),
    "joint_pos": slice(6, 18),
    "joint_vel": slice(18, 30),
    "last_action": slice(30, 42),
    "command": slice(42, 45),
    "gait_phase": slice(45, 49),
}
CRITIC_LINVEL = slice(49, 52)


class Go2JoystickFlat(BatchedEnv):
    """Go2 velocity tracking on flat ground; see the module docstring for the conventions.

    Public state besides BatchedEnv's: `commands` [N, 3] (vx, vy, yaw rate),
    `last_actions` [N, 12] (clipped), `kp`, `kd` [N] (this episode's PD gains),
    `clock` [N] (control steps since the episode began; drives the command
    resampling), `gait_clock` [N] float32 (FL's gait phase in [0, 1)).
    """

    task = "go2_joystick_flat"
    frame_skip = 2
    step_stage = STAGE_NONE  # sensors as mj_step leaves them (the seed's reads)

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        n, m = self.num_envs, self.model
        self.init_qpos = m.key_qpos[0].copy()
        self.default_joint_pos = self.init_qpos[7:].copy()
        self.commands = np.zeros((n, 3))
        self.last_actions = np.zeros((n, m.nu))
        self._prev_actions = np.zeros((n, m.nu))
        self.kp = np.zeros((n, 12))
        self.kd = np.zeros((n, 12))
        self.clock = np.zeros(n, np.int64)
        self.gait_clock = np.zeros(n, np.float32)
        self._gait_step = np.float32(GAIT_HZ * self.dt)
        self._command_steps = _whole_steps(COMMAND_PERIOD_S / self.dt, "command period")
        self._gain = self._sim.field("actuator_gainprm").reshape(n, m.nu, -1)
        self._bias = self._sim.field("actuator_biasprm").reshape(n, m.nu, -1)
        self._sensordata = self._sim.output("sensordata")
        self._cols = _sensor_columns(m)
        self._probe_terms = {name: np.zeros(n) for name in self.spec.reward_terms}
        self._probe_terminated = np.zeros(n, bool)

    # ------------------------------------------------------------------ public

    def set_commands(self, commands: np.ndarray) -> None:
        """Command every env ([N, 3]: vx, vy, yaw rate) from now on; refreshes the current observation.

        A later periodic resample or reset draws new commands as usual.
        """
        commands = np.asarray(commands, np.float64)
        if commands.shape != self.commands.shape:
            raise ValueError(f"commands must be {self.commands.shape}, got {commands.shape}")
        self._check_open()
        self.commands[:] = commands
        r = self._result
        self._fill_obs(r.obs, slice(None))
        self._fill_critic(r.critic, slice(None))

    def command_ranges(self) -> tuple[np.ndarray, np.ndarray]:
        """(low, high) of (vx, vy, yaw rate): the box this task samples commands from."""
        return COMMAND_LOW.copy(), COMMAND_HIGH.copy()

    def set_gains(self, kp: np.ndarray, kd: np.ndarray) -> None:
        """This episode's PD gains of every env ([N, 12] each, one per actuator) until its next reset."""
        self._check_open()
        self.kp[:], self.kd[:] = kp, kd
        self._gain[:, :, 0] = self.kp
        self._bias[:, :, 1] = -self.kp
        self._bias[:, :, 2] = -self.kd

    def velocity_tracking(self) -> tuple[np.ndarray, np.ndarray]:
        """(commanded, measured) [N, 3] body-frame (vx, vy, yaw rate) of the current state, for appo-eval."""
        sd, c = self._sensordata, self._cols
        measured = np.concatenate([sd[:, c["local_linvel"]][:, :2], sd[:, c["gyro"]][:, 2:3]], axis=1)
        return self.commands.copy(), measured

    def evaluate(self) -> tuple[dict[str, np.ndarray], np.ndarray]:
        """Copies of the weighted reward terms and the termination flags of the current state.

        The values step() would report had the physics just arrived at this state
        (the action-rate term uses the last two actions).
        """
        self._check_open()
        self._compute_terms(self._probe_terms, self._probe_terminated)
        return {k: v.copy() for k, v in self._probe_terms.items()}, self._probe_terminated.copy()

    def gait_phase(self, rows=slice(None)) -> np.ndarray:
        """[n, 4] float32 phase in [0, 1) of feet FL, FR, RL, RR at the current gait clock of `rows`."""
        return np.remainder(self.gait_clock[rows, None] + GAIT_OFFSETS, np.float32(1.0))

    # ------------------------------------------------------------- task hooks

    def _model_xml(self) -> str:
        return build_xml()

    def _sample_reset(self, n):
        qpos = np.tile(self.init_qpos, (n, 1))
        qpos[:, :2] += self.rng.uniform(-RESET_XY, RESET_XY, (n, 2))
        yaw = self.rng.uniform(-math.pi, math.pi, n)
        # The home orientation is the identity, so the yawed pose is the yaw quaternion.
        qpos[:, 3:7] = 0.0
        qpos[:, 3] = np.cos(yaw / 2)
        qpos[:, 6] = np.sin(yaw / 2)
        qvel = np.zeros((n, self.model.nv))
        qvel[:, :6] = self.rng.uniform(-RESET_ROOT_VEL, RESET_ROOT_VEL, (n, 6))
        return qpos, qvel

    def _after_reset(self, ids):
        rows = slice(None) if ids is None else ids
        n = self.num_envs if ids is None else len(ids)
        self.kp[rows] = self.rng.uniform(*KP_RANGE, (n, 12))
        self.kd[rows] = self.rng.uniform(*KD_RANGE, (n, 12))
        self._gain[rows, :, 0] = self.kp[rows]
        self._bias[rows, :, 1] = -self.kp[rows]
        self._bias[rows, :, 2] = -self.kd[rows]
        self.commands[rows] = self.rng.uniform(COMMAND_LOW, COMMAND_HIGH, (n, 3))
        self.last_actions[rows] = 0.0
        self._prev_actions[rows] = 0.0
        self.clock[rows] = 0
        if ids is None:  # a reset of every env starts the gait clock as a new env (an episode's reset does not)
            self.gait_clock[:] = 0.0
        self._sim.forward(STAGE_VEL, ids)  # sensors of the state just written

    def _apply_actions(self, actions):
        np.copyto(self._prev_actions, self.last_actions)
        np.clip(actions, -ACTION_CLIP, ACTION_CLIP, out=self.last_actions)
        np.multiply(self.last_actions, ACTION_SCALE, out=self._ctrl)
        self._ctrl += self.default_joint_pos

    def _after_physics(self):
        self.clock += 1
        np.fmod(self.gait_clock + self._gait_step, np.float32(1.0), out=self.gait_clock)
        due = self.clock % self._command_steps == 0
        if due.any():
            self.commands[due] = self.rng.uniform(COMMAND_LOW, COMMAND_HIGH, (int(due.sum()), 3))

    def _fill_obs(self, out, rows):
        sd, c = self._sensordata[rows], self._cols
        out[rows, OBS_SLICES["gyro"]] = sd[:, c["gyro"]]
        out[rows, OBS_SLICES["projected_gravity"]] = -sd[:, c["upvector"]]  # the seed's: -(body z in the world)
        out[rows, OBS_SLICES["joint_pos"]] = self.qpos[rows, 7:] - self.default_joint_pos
        out[rows, OBS_SLICES["joint_vel"]] = self.qvel[rows, 6:]
        out[rows, OBS_SLICES["last_action"]] = self.last_actions[rows]
        out[rows, OBS_SLICES["command"]] = self.commands[rows]
        out[rows, OBS_SLICES["gait_phase"]] = self.gait_phase(rows)

    def _fill_critic(self, out, rows):
        out[rows, :CRITIC_LINVEL.start] = self._result.obs[rows]
        out[rows, CRITIC_LINVEL] = self._sensordata[rows][:, self._cols["local_linvel"]]

    def _compute_terms(self, terms, terminated):
        sd, c, dt = self._sensordata, self._cols, self.dt
        v, w = sd[:, c["local_linvel"]], sd[:, c["gyro"]]
        _gaussian(np.sum((self.commands[:, :2] - v[:, :2]) ** 2, axis=1), TRACKING_SIGMA,
                  terms["tracking_lin_vel"])
        _gaussian((self.commands[:, 2] - w[:, 2]) ** 2, TRACKING_SIGMA, terms["tracking_ang_vel"])
        np.square(v[:, 2], out=terms["lin_vel_z"])
        np.einsum("ij,ij->i", w[:, :2], w[:, :2], out=terms["ang_vel_xy"])
        np.square(self.qpos[:, 2] - BASE_HEIGHT_TARGET, out=terms["base_height"])
        da = self.last_actions - self._prev_actions
        np.einsum("ij,ij->i", da, da, out=terms["action_rate"])
        np.sum(np.abs(self.qpos[:, 7:] - self.default_joint_pos), axis=1, out=terms["similar_to_default"])
        self._feet_terms(terms)
        for name, value in terms.items():
            value *= WEIGHTS[name] * dt
        self._terminated(terminated)

    # --------------------------------------------------------------- helpers

    def _feet_terms(self, terms) -> None:
        sd, c = self._sensordata, self._cols
        stance = self.gait_phase() < STANCE_FRACTION
        contact = sd[:, c["foot_contact"]] > 0
        np.mean(contact == stance, axis=1, out=terms["feet_contact"])
        height = np.exp(-(sd[:, c["foot_z"]] - SWING_HEIGHT_TARGET) ** 2 / SWING_HEIGHT_SIGMA)
        height[stance] = 0.0
        np.mean(height, axis=1, out=terms["feet_swing_height"])

    def termination_conditions(self) -> dict[str, np.ndarray]:
        """Each named reason an episode ends on, [N] bool, of the current state."""
        # The IMU's up vector is the body z axis in the world; its z component is cos(tilt).
        up_z = self._sensordata[:, self._cols["upvector"]][:, 2]
        return {f"tilt over {MAX_TILT_DEG:g} deg": up_z < math.cos(math.radians(MAX_TILT_DEG)),
                "non-finite state": non_finite(self.qpos, self.qvel)}

    def _terminated(self, out: np.ndarray) -> None:
        any_of(self.termination_conditions(), out)


def _gaussian(sq_err: np.ndarray, sigma: float, out: np.ndarray) -> None:
    np.divide(sq_err, -sigma, out=out)
    np.exp(out, out=out)


def _whole_steps(steps: float, what: str) -> int:
    k = round(steps)
    if not math.isclose(steps, k, rel_tol=1e-9):
        raise ValueError(f"the {what} must be a whole number of control steps, got {steps}")
    return k


def _sensor_columns(m: mujoco.MjModel) -> dict[str, object]:
    """sensordata columns of what the task reads: slices for 3-vectors, index arrays for per-foot values."""
    def cols(name: str) -> slice:
        s = m.sensor(name)
        return slice(int(s.adr[0]), int(s.adr[0] + s.dim[0]))

    return {
        "gyro": cols("gyro"),
        "local_linvel": cols("local_linvel"),
        "upvector": cols("upvector"),
        "world_z": cols("world_z"),
        "foot_z": np.array([cols(f"{f}_pos").start + 2 for f in FEET]),
        "foot_contact": np.array([cols(f"{f}_foot_contact").start for f in FEET]),
    }
