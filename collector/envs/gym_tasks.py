"""The Gymnasium v5 MuJoCo tasks with their default constructor arguments.

Each class restates its Gymnasium counterpart (gymnasium/envs/mujoco/*_v5.py):
same XML, frame_skip, observation, reward terms and weights, healthy checks and
reset noise, evaluated over all N environments at once.  The one deliberate
difference: actions are clipped to the actuator ctrlrange before the control
cost (Gymnasium charges the unclipped action while MuJoCo applies the clipped
one); for in-range actions the two agree.
"""

from __future__ import annotations

import numpy as np

from collector.envs.batched import BatchedEnv
from collector.envs.physics.mujoco import RNE_POST_CONSTRAINT, STAGE_NONE, STAGE_POS


def _sum_squares(x: np.ndarray, out: np.ndarray) -> np.ndarray:
    return np.einsum("ij,ij->i", x, x, out=out)


def _all_finite(*arrays: np.ndarray) -> np.ndarray:
    ok = np.isfinite(arrays[0]).all(axis=1)
    for a in arrays[1:]:
        ok &= np.isfinite(a).all(axis=1)
    return ok


def _noisy_reset(env: BatchedEnv, n: int, velocity_noise: str) -> tuple[np.ndarray, np.ndarray]:
    """Gymnasium's reset_model: uniform position noise; uniform or scaled-normal velocity noise."""
    s = env.reset_noise_scale
    qpos = env.init_qpos + env.rng.uniform(-s, s, (n, env.model.nq))
    if velocity_noise == "uniform":
        qvel = env.init_qvel + env.rng.uniform(-s, s, (n, env.model.nv))
    else:
        qvel = env.init_qvel + s * env.rng.standard_normal((n, env.model.nv))
    return qpos, qvel


class InvertedPendulum(BatchedEnv):
    """InvertedPendulum-v5: +1 per step while the pole stays within 0.2 rad."""

    task = "inverted_pendulum"
    xml_file = "inverted_pendulum.xml"
    frame_skip = 2
    reset_noise_scale = 0.01

    def _sample_reset(self, n):
        return _noisy_reset(self, n, velocity_noise="uniform")

    def _fill_obs(self, out, rows):
        nq = self.model.nq
        out[rows, :nq] = self.qpos[rows]
        out[rows, nq:] = self.qvel[rows]

    def _compute_terms(self, terms, terminated):
        np.logical_not(_all_finite(self.qpos, self.qvel), out=terminated)
        terminated |= np.abs(self.qpos[:, 1]) > 0.2
        np.logical_not(terminated, out=terms["alive"], casting="unsafe")


class _PlanarRunner(BatchedEnv):
    """Planar runners: forward reward from the root's x (qpos[0]) before and after the step."""

    forward_reward_weight = 1.0
    ctrl_cost_weight: float
    reset_noise_scale: float

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._x_before = np.zeros(self.num_envs)

    def _before_physics(self):
        np.copyto(self._x_before, self.qpos[:, 0])

    def _forward_and_ctrl(self, terms):
        fwd = terms["forward"]
        np.subtract(self.qpos[:, 0], self._x_before, out=fwd)
        fwd /= self.dt  # the x velocity, rounded as Gymnasium does before weighting
        fwd *= self.forward_reward_weight
        ctrl = _sum_squares(self._ctrl, terms["ctrl"])
        ctrl *= -self.ctrl_cost_weight

    def _fill_obs(self, out, rows):
        k = self.model.nq - 1
        out[rows, :k] = self.qpos[rows, 1:]
        out[rows, k:] = self.qvel[rows]


class HalfCheetah(_PlanarRunner):
    """HalfCheetah-v5: forward velocity minus 0.1 * |a|^2, never terminates."""

    task = "half_cheetah"
    xml_file = "half_cheetah.xml"
    frame_skip = 5
    ctrl_cost_weight = 0.1
    reset_noise_scale = 0.1

    def _sample_reset(self, n):
        return _noisy_reset(self, n, velocity_noise="normal")

    def _compute_terms(self, terms, terminated):
        self._forward_and_ctrl(terms)
        terminated.fill(False)


class Hopper(_PlanarRunner):
    """Hopper-v5: forward velocity + 1 while healthy - 1e-3 * |a|^2; terminates when unhealthy."""

    task = "hopper"
    xml_file = "hopper.xml"
    frame_skip = 4
    ctrl_cost_weight = 1e-3
    healthy_reward = 1.0
    healthy_state_range = (-100.0, 100.0)
    healthy_z_range = (0.7, float("inf"))
    healthy_angle_range = (-0.2, 0.2)
    reset_noise_scale = 5e-3
    obs_qvel_clip = 10.0

    def _sample_reset(self, n):
        return _noisy_reset(self, n, velocity_noise="uniform")

    def _fill_obs(self, out, rows):
        k = self.model.nq - 1
        out[rows, :k] = self.qpos[rows, 1:]
        out[rows, k:] = np.clip(self.qvel[rows], -self.obs_qvel_clip, self.obs_qvel_clip)

    def _healthy(self) -> np.ndarray:
        # Gymnasium: state_vector()[2:] strictly inside the state range, z and the
        # torso angle strictly inside theirs (NaN compares False: unhealthy).
        lo, hi = self.healthy_state_range
        q, v = self.qpos, self.qvel
        ok = ((q[:, 2:] > lo) & (q[:, 2:] < hi)).all(axis=1)
        ok &= ((v > lo) & (v < hi)).all(axis=1)
        z, angle = q[:, 1], q[:, 2]
        ok &= (z > self.healthy_z_range[0]) & (z < self.healthy_z_range[1])
        ok &= (angle > self.healthy_angle_range[0]) & (angle < self.healthy_angle_range[1])
        return ok

    def _compute_terms(self, terms, terminated):
        self._forward_and_ctrl(terms)
        healthy = self._healthy()
        np.multiply(healthy, self.healthy_reward, out=terms["healthy"])
        np.logical_not(healthy, out=terminated)


class Ant(BatchedEnv):
    """Ant-v5: torso x velocity + 1 while healthy - 0.5 |a|^2 - 5e-4 |clip(cfrc_ext)|^2."""

    task = "ant"
    xml_file = "ant.xml"
    frame_skip = 5
    # cfrc_ext is read from each simulation's own mjData after the step.
    persistent = True
    main_body = 1  # torso
    forward_reward_weight = 1.0
    ctrl_cost_weight = 0.5
    contact_cost_weight = 5e-4
    healthy_reward = 1.0
    healthy_z_range = (0.2, 1.0)
    contact_force_range = (-1.0, 1.0)
    reset_noise_scale = 0.1

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        # Gymnasium reads data.body(torso).xpos before and after mj_step: the
        # kinematics the last step left behind (its final RK4 stage), or those of
        # set_state's mj_forward right after a reset.  The batch outputs hold exactly these.
        self._xpos = self._sim.output("xpos")
        self._x_col = 3 * self.main_body
        self._x_before = np.zeros(self.num_envs)
        self._cfrc_raw = self._sim.output("cfrc_ext")
        self._cfrc = np.zeros_like(self._cfrc_raw)  # clipped, what obs and cost use

    def _sample_reset(self, n):
        return _noisy_reset(self, n, velocity_noise="normal")

    def _before_physics(self):
        np.copyto(self._x_before, self._xpos[:, self._x_col])

    def _after_physics(self):
        # Gymnasium calls mj_rnePostConstraint after mj_step; the STAGE_NONE
        # forward computes nothing and only copies the fresh cfrc_ext out.
        self._sim.apply(RNE_POST_CONSTRAINT)
        self._sim.forward(STAGE_NONE)
        np.clip(self._cfrc_raw, *self.contact_force_range, out=self._cfrc)

    def _after_reset(self, ids):
        # Gymnasium's reset/set_state end with mj_forward: its kinematics give the
        # next step's "before" xpos, and it leaves mj_resetData's zero cfrc_ext.
        self._sim.forward(STAGE_POS, ids)
        self._cfrc[slice(None) if ids is None else ids] = 0.0

    def _fill_obs(self, out, rows):
        nq, nv = self.model.nq - 2, self.model.nv
        out[rows, :nq] = self.qpos[rows, 2:]
        out[rows, nq:nq + nv] = self.qvel[rows]
        out[rows, nq + nv:] = self._cfrc[rows, 6:]  # bodies 1.. (the world's row is always 0)

    def _compute_terms(self, terms, terminated):
        fwd = terms["forward"]
        np.subtract(self._xpos[:, self._x_col], self._x_before, out=fwd)
        fwd /= self.dt
        fwd *= self.forward_reward_weight
        _sum_squares(self._ctrl, terms["ctrl"])
        terms["ctrl"] *= -self.ctrl_cost_weight
        _sum_squares(self._cfrc, terms["contact"])
        terms["contact"] *= -self.contact_cost_weight
        z = self.qpos[:, 2]
        healthy = _all_finite(self.qpos, self.qvel)
        healthy &= (z >= self.healthy_z_range[0]) & (z <= self.healthy_z_range[1])
        np.multiply(healthy, self.healthy_reward, out=terms["healthy"])
        np.logical_not(healthy, out=terminated)


TASKS: dict[str, type[BatchedEnv]] = {
    cls.task: cls for cls in (InvertedPendulum, HalfCheetah, Hopper, Ant)
}
