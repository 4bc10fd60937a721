"""What the two G1 tasks share (TASKS.md section 0): robot, action pipeline, self-collisions, pushes, randomisation.

`G1Env` is the BatchedEnv both `g1_velocity_flat` (velocity.py) and `g1_motion_tracking` (tracking.py) build on:

- the model: the G1 MJCF (model.py) with the task's extra sensors and the `self_collision` contact sensor
  (pelvis subtree against itself, reduce `maxforce`), 4 substeps of 0.005 s, positions, velocities and
  their sensors current after each step (mjSTAGE_VEL);
- actions: target = a * 0.25 * effort / kp + default - encoder bias, unclipped, held for the 4 substeps;
  the last two raw actions are kept for the observation and the action-rate term;
- soft joint limits: 0.9 x the range about its middle;
- self-collisions: the self-contact force of every substep is read (BatchedEnv's `_after_substep`
  hook) and a substep counts when it exceeds 10 N;
- startup randomisation, one draw per env in this order: foot friction (absolute, shared by the 14 foot
  capsules), encoder bias per joint, torso_link CoM offset; friction and CoM through per-simulation model
  fields (mjb_expand), so MuJoCo copies env i's values into the model before simulating env i;
- pushes: when an env's U(1, 3) s timer runs out its root gets a world-frame velocity increment (qvel's
  angular part is in the pelvis frame, so R^T is applied) and its sensors are recomputed.

A task sets `task_sensors`, `encoder_bias_range`, `torso_com_offset_range` and `push_vel`, and implements
`_rewards(terms)` and `termination_conditions()` (used by `step` through `_compute_terms` and by `evaluate`).
"""

from __future__ import annotations

from abc import abstractmethod

import mujoco
import numpy as np

from collector.envs.batched import BatchedEnv, any_of
from collector.envs.g1.model import FEET, build_xml
from collector.envs.physics import STAGE_VEL

DECIMATION = 4
ACTION_SCALE_FACTOR = 0.25  # scale_j = 0.25 * effort_j / kp_j
SOFT_LIMIT_FACTOR = 0.9
SELF_COLLISION_FORCE = 10.0  # N
FOOT_FRICTION = (0.3, 1.2)
PUSH_INTERVAL_S = (1.0, 3.0)
SELF_COLLISION_SENSOR = ('    <contact name="self_collision" subtree1="pelvis" subtree2="pelvis" data="force"'
                         ' reduce="maxforce" num="1"/>')


class G1Env(BatchedEnv):
    """Base of the G1 tasks: model, actions, soft limits, self-collisions, pushes, startup randomisation."""

    frame_skip = DECIMATION
    step_stage = STAGE_VEL
    task_sensors: tuple[str, ...] = ()  # MJCF sensor elements the task adds to the robot's
    encoder_bias_range: tuple[float, float]
    torso_com_offset_range: tuple[tuple[float, float], tuple[float, float], tuple[float, float]]  # x, y, z
    push_vel: tuple[tuple[float, float], ...]  # world v x, y, z then w x, y, z

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        n, m = self.num_envs, self.model
        nj = m.nu
        self.noise = True  # actor observation noise (mjlab's corruption); False for play/tests
        self.pushes = True  # the interval pushes; False for play (appo-eval, appo-motion record)
        self.init_qpos = m.key_qpos[0].copy()
        self.default_joint_pos = self.init_qpos[7:].copy()
        self.action_scale = ACTION_SCALE_FACTOR * m.actuator_forcerange[:, 1] / m.actuator_gainprm[:, 0]
        low, high = m.jnt_range[1:, 0], m.jnt_range[1:, 1]
        mid, half = (low + high) / 2, SOFT_LIMIT_FACTOR * (high - low) / 2
        self.soft_limits = np.stack([mid - half, mid + half], axis=1)
        self.last_actions = np.zeros((n, nj))
        self._prev_actions = np.zeros((n, nj))
        self.push_time_left = np.zeros(n)
        self.self_collision_count = np.zeros(n, np.int64)
        self._sub_self_force = np.zeros((DECIMATION, n, 3))
        self._sensordata = self._sim.output("sensordata")
        self._self_force_cols = sensor_slice(m, "self_collision")
        self._probe_terms = {name: np.zeros(n) for name in self.spec.reward_terms}
        self._probe_terminated = np.zeros(n, bool)
        # Startup domain randomisation, one draw per env.
        self.foot_friction = self.rng.uniform(*FOOT_FRICTION, n)
        self.encoder_bias = self.rng.uniform(*self.encoder_bias_range, (n, nj))
        self.torso_com_offset = np.stack([self.rng.uniform(lo, hi, n) for lo, hi in self.torso_com_offset_range],
                                         axis=1)
        self.foot_geoms = np.array([i for i in range(m.ngeom) if m.geom(i).name.startswith(FEET)
                                    and m.geom(i).name.endswith("_collision")])
        friction = self._sim.field("geom_friction").reshape(n, m.ngeom, 3)
        friction[:, self.foot_geoms, 0] = self.foot_friction[:, None]
        ipos = self._sim.field("body_ipos").reshape(n, m.nbody, 3)
        ipos[:, m.body("torso_link").id] += self.torso_com_offset

    # ------------------------------------------------------------------ public

    def refresh(self) -> None:
        """Recompute the current observations (after changing task data or `noise` by hand)."""
        r = self._result
        self._fill_obs(r.obs, slice(None))
        self._fill_critic(r.critic, slice(None))

    def evaluate(self) -> tuple[dict[str, np.ndarray], np.ndarray]:
        """Copies of the weighted reward terms and termination flags of the current state and task data.

        What step() would report had the physics just arrived here; changes no state.
        """
        self._check_open()
        self._rewards(self._probe_terms)
        self._terminated(self._probe_terminated)
        return {k: v.copy() for k, v in self._probe_terms.items()}, self._probe_terminated.copy()

    # ------------------------------------------------------------- task hooks

    def _model_xml(self) -> str:
        xml = build_xml()
        if xml.count("  </sensor>") != 1:
            raise RuntimeError("the G1 MJCF has no single <sensor> section to extend")
        sensors = "\n".join((*self.task_sensors, SELF_COLLISION_SENSOR))
        return xml.replace("  </sensor>", sensors + "\n  </sensor>")

    def _apply_actions(self, actions):
        np.copyto(self._prev_actions, self.last_actions)
        np.copyto(self.last_actions, actions)
        # target = a * scale + default - encoder bias; no clipping; held for the 4 substeps.
        np.multiply(self.last_actions, self.action_scale, out=self._ctrl)
        self._ctrl += self.default_joint_pos
        self._ctrl -= self.encoder_bias

    def _after_substep(self, k: int) -> None:
        """Record substep k's self-contact force (BatchedEnv's per-substep hook)."""
        self._sub_self_force[k] = self._sensordata[:, self._self_force_cols]

    @abstractmethod
    def _rewards(self, terms: dict[str, np.ndarray]) -> None:
        """Fill each reward term of this step (weight x dt included)."""

    @abstractmethod
    def termination_conditions(self) -> dict[str, np.ndarray]:
        """Each named reason an episode ends on by failure, [N] bool, of the current state."""

    def _terminated(self, out: np.ndarray) -> None:
        """Mark the envs whose episode ends by failure this step."""
        any_of(self.termination_conditions(), out)

    # --------------------------------------------------------------- helpers

    def _reset_actions_and_timers(self, rows, n: int) -> None:
        """Zero the action history and self-collision count of reset rows; draw their push timers."""
        for arr in (self.last_actions, self._prev_actions, self.self_collision_count):
            arr[rows] = 0
        self.push_time_left[rows] = self.rng.uniform(*PUSH_INTERVAL_S, n)

    def _add_noise(self, obs: np.ndarray, bound: np.ndarray) -> None:
        """obs += U(-bound, bound) per column, in place, when `noise` is on."""
        if self.noise:
            obs += self.rng.uniform(-1.0, 1.0, obs.shape) * bound

    def _action_rate(self, out: np.ndarray) -> None:
        """|a_t - a_{t-1}|^2 of the raw actions."""
        da = self.last_actions - self._prev_actions
        np.einsum("ij,ij->i", da, da, out=out)

    def _joint_limit_excess(self, out: np.ndarray) -> None:
        """Sum over joints of the distance beyond the soft limits."""
        q = self.qpos[:, 7:]
        below = np.clip(q - self.soft_limits[:, 0], None, 0.0)
        above = np.clip(q - self.soft_limits[:, 1], 0.0, None)
        np.sum(above - below, axis=1, out=out)

    def _push(self) -> None:
        """Count down the push timers; push the envs whose timer ran out (nothing when `pushes` is off)."""
        if not self.pushes:
            return
        self.push_time_left -= self.dt
        due = np.flatnonzero(self.push_time_left <= 0.0)
        if not len(due):
            return
        n = len(due)
        dv = np.stack([self.rng.uniform(lo, hi, n) for lo, hi in self.push_vel], axis=1)
        self.push_time_left[due] = self.rng.uniform(*PUSH_INTERVAL_S, n)
        self.qvel[due, :3] += dv[:, :3]
        self.qvel[due, 3:6] += rotate_inv(self.qpos[due, 3:7], dv[:, 3:])  # world -> pelvis frame
        self._sim.forward(STAGE_VEL, due.astype(np.int32))


# ------------------------------------------------------------------- helpers


def count_self_collisions(force_mag: np.ndarray) -> np.ndarray:
    """Per env, the substeps (axis 0) whose self-contact force magnitude exceeds 10 N."""
    return np.sum(force_mag > SELF_COLLISION_FORCE, axis=0)


def sensor_slice(m: mujoco.MjModel, name: str) -> slice:
    """The sensordata columns of sensor `name`."""
    s = m.sensor(name)
    return slice(int(s.adr[0]), int(s.adr[0] + s.dim[0]))


def noise_bounds(dim: int, bounds: dict[str, float], slices: dict[str, slice]) -> np.ndarray:
    """[dim] per-column noise bound: bounds[name] over slices[name], 0 elsewhere."""
    out = np.zeros(dim)
    for name, bound in bounds.items():
        out[slices[name]] = bound
    return out


def projected_gravity(quat: np.ndarray) -> np.ndarray:
    """[n, 3] gravity direction (0, 0, -1) in the frame of unit quaternions (w, x, y, z) [n, 4]."""
    return rotate_inv(quat, np.broadcast_to([0.0, 0.0, -1.0], (len(quat), 3)))


def rotate(quat: np.ndarray, v: np.ndarray) -> np.ndarray:
    """R(q) v over the last axis: v + 2w (u x v) + 2 u x (u x v), q = (w, u)."""
    w, u = quat[..., :1], quat[..., 1:]
    uv = np.cross(u, v)
    return v + 2 * w * uv + 2 * np.cross(u, uv)


def rotate_inv(quat: np.ndarray, v: np.ndarray) -> np.ndarray:
    """R(q)^T v over the last axis: v - 2w (u x v) + 2 u x (u x v), q = (w, u)."""
    w, u = quat[..., :1], quat[..., 1:]
    uv = np.cross(u, v)
    return v - 2 * w * uv + 2 * np.cross(u, uv)
