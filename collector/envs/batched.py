"""N copies of one MuJoCo-model task stepped together: native-threaded physics, NumPy for the rest.

The physics is an engine behind collector/envs/physics (MuJoCo by default, `sim=`).  Per step
the only Python work is O(1) NumPy calls over all N environments: clip the actions into the
ctrl rows, one native call that advances every simulation `frame_skip` substeps (GIL released), then the
observation, reward terms, termination, truncation and auto-reset of finished
rows as whole-array operations.  Results are bit-identical at any thread count.
"""

from __future__ import annotations

import os
from abc import ABC, abstractmethod
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from itertools import pairwise

import gymnasium
import mujoco
import numpy as np

from collector.envs.physics import STAGE_NONE, UnknownSimError, make_physics, make_stepper
from common.task_spec import TaskSpec, task_engines, task_spec

GYM_ASSETS = os.path.join(os.path.dirname(gymnasium.__file__), "envs", "mujoco", "assets")


@dataclass
class StepResult:
    """What one step of all N environments returns: observations, rewards, ends and pre-reset observations.

    The arrays are the environment's own buffers: the next `step()` overwrites
    them in place, so copy what must outlive it.
    """

    obs: np.ndarray           # [N, obs_dim] float32, after auto-reset of finished envs
    critic: np.ndarray        # [N, critic_dim] float32, after auto-reset
    rewards: np.ndarray       # [N] float32, sum of the weighted terms
    terminated: np.ndarray    # [N] bool
    truncated: np.ndarray     # [N] bool: reached max_episode_steps and not terminated
    final_obs: np.ndarray     # [N, obs_dim] float32: observation before the auto-reset (every row)
    final_critic: np.ndarray  # [N, critic_dim] float32, likewise
    terms: dict[str, np.ndarray]  # spec.reward_terms -> [N] float32, costs negative

    @classmethod
    def zeros(cls, n: int, obs_dim: int, critic_dim: int, reward_terms) -> StepResult:
        """Preallocated buffers an environment fills in place on every step."""
        return cls(
            obs=np.zeros((n, obs_dim), np.float32),
            critic=np.zeros((n, critic_dim), np.float32),
            rewards=np.zeros(n, np.float32),
            terminated=np.zeros(n, bool),
            truncated=np.zeros(n, bool),
            final_obs=np.zeros((n, obs_dim), np.float32),
            final_critic=np.zeros((n, critic_dim), np.float32),
            terms={name: np.zeros(n, np.float32) for name in reward_terms},
        )


def any_of(conditions: dict[str, np.ndarray], out: np.ndarray) -> None:
    """out = the logical or of the named termination conditions."""
    np.logical_or.reduce(tuple(conditions.values()), axis=0, out=out)


def non_finite(qpos: np.ndarray, qvel: np.ndarray) -> np.ndarray:
    """[N] bool: rows whose state holds a NaN or infinity (never true of a healthy simulation)."""
    return ~(np.isfinite(qpos).all(axis=1) & np.isfinite(qvel).all(axis=1))


class BatchedEnv(ABC):
    """Base of the tasks: a Gymnasium v5 MuJoCo environment, N at a time.

    Subclasses set the class attributes below and implement `_sample_reset`,
    `_fill_obs` and `_compute_terms`; they may hook `_before_physics`,
    `_after_physics` and `_after_reset`.  A task that is not a Gymnasium file,
    maps actions to controls otherwise, or gives the critic more than the
    observation overrides `_model_xml`, `_apply_actions` or `_fill_critic`.
    """

    task: str
    xml_file: str
    frame_skip: int
    # One mjData per simulation, kept between calls: needed by a task that runs
    # a native function on the data a step left behind (see physics/mujoco.py).
    persistent: bool = False
    # Stages of mj_forward recomputed at the new state after each step (mjtStage):
    # mjSTAGE_VEL makes positions, velocities and their sensors current.
    step_stage: int = STAGE_NONE
    # A task that reads sensors at every physics substep defines `_after_substep(self, k)`: each
    # substep is then its own native call, followed by the hook (on the thread that steps).
    _after_substep = None
    # Called with the ids of the envs whose episode just ended, before they are reset (a viewer reads why).
    on_episode_end = None

    def __init__(self, num_envs: int, num_threads: int, seed: int,
                 max_episode_steps: int | None = None, stepper: ThreadPoolExecutor | None = None,
                 sim: str = "mujoco"):
        """stepper: the thread `step_async` runs the physics on, shared by envs that must take turns
        (see EnvGroups); None: the env's own.  sim: the physics engine, one of the task's (`task_engines`)."""
        engines = task_engines(self.task)
        if sim not in engines:
            raise UnknownSimError(f"task {self.task} runs on {' and '.join(engines)}, not {sim!r}")
        if num_envs < 1:
            raise ValueError(f"num_envs must be >= 1, got {num_envs}")
        if max_episode_steps is not None and max_episode_steps < 1:
            raise ValueError(f"max_episode_steps must be >= 1, got {max_episode_steps}")
        self.spec: TaskSpec = task_spec(self.task)
        self.num_envs = num_envs
        self.max_episode_steps = max_episode_steps or self.spec.max_episode_steps
        self.sim = sim
        xml = self._model_xml()
        self.model = mujoco.MjModel.from_xml_string(xml) if xml is not None else self._make_model()
        self.dt = self.model.opt.timestep * self.frame_skip  # Gymnasium's MujocoEnv.dt
        self._check_spec()
        self.rng = np.random.default_rng(seed)
        self._closed = False
        self._sim = make_physics(sim, self.model, num_envs, num_threads, self.persistent, stepper, xml)
        self.qpos, self.qvel, self._ctrl = self._sim.qpos, self._sim.qvel, self._sim.ctrl
        self._ctrl_low = self.model.actuator_ctrlrange[:, 0].copy()
        self._ctrl_high = self.model.actuator_ctrlrange[:, 1].copy()
        self.init_qpos = self.model.qpos0.copy()
        self.init_qvel = np.zeros(self.model.nv)
        self._steps = np.zeros(num_envs, np.int64)
        self._terms64 = {name: np.zeros(num_envs) for name in self.spec.reward_terms}
        self._reward64 = np.zeros(num_envs)
        self._done = np.zeros(num_envs, bool)
        self._result = StepResult.zeros(num_envs, self.spec.obs_dim, self.spec.critic_dim, self.spec.reward_terms)

    # ------------------------------------------------------------------ public

    def reset(self) -> tuple[np.ndarray, np.ndarray]:
        """Start a new episode in every env; returns copies of (obs, critic)."""
        self._check_open()
        self._reset_rows(None)
        return self.observe()

    def step(self, actions: np.ndarray) -> StepResult:
        """Advance every env by one control step with `actions` [N, act_dim] (clipped to ctrlrange).

        Returns the env's one StepResult, refilled in place by every call.
        """
        self._begin_step(actions)
        self._sim.step(self.frame_skip, stage=self.step_stage, after_substep=self._after_substep)
        return self._finish_step()

    def step_async(self, actions: np.ndarray) -> None:
        """Start `step(actions)`: the physics runs on the batch's threads, GIL released, until `step_wait()`.

        `actions` is consumed before this returns.  Nothing else may be called on
        the env in between; the last StepResult stays readable until then.
        """
        self._begin_step(actions)
        self._sim.step_async(self.frame_skip, stage=self.step_stage, after_substep=self._after_substep)

    def step_wait(self) -> StepResult:
        """Finish the step `step_async` started; returns what `step` would have."""
        self._check_open()
        self._sim.wait()
        return self._finish_step()

    def set_state(self, qpos: np.ndarray, qvel: np.ndarray) -> None:
        """Start every env from the given physics state [N, nq], [N, nv] (a fresh episode).

        Like Gymnasium's reset followed by `set_state`: the rest of mjData (warmstart,
        time, controls) is reset, and the episode step counters restart at 0.
        """
        qpos, qvel = np.asarray(qpos, np.float64), np.asarray(qvel, np.float64)
        if qpos.shape != self.qpos.shape or qvel.shape != self.qvel.shape:
            raise ValueError(f"expected qpos {self.qpos.shape} and qvel {self.qvel.shape}, "
                             f"got {qpos.shape} and {qvel.shape}")
        self._check_open()
        self._load_rows(None, qpos, qvel)

    @property
    def ctrl(self) -> np.ndarray:
        """[N, nu] the controls of the last step (read-only view)."""
        view = self._ctrl.view()
        view.flags.writeable = False
        return view

    def termination_conditions(self) -> dict[str, np.ndarray]:
        """Each named reason an episode ends on, [N] bool, of the current state; {} where the task names none."""
        return {}

    def observe(self) -> tuple[np.ndarray, np.ndarray]:
        """Copies of the current (obs, critic) of every env."""
        return self._result.obs.copy(), self._result.critic.copy()

    def close(self) -> None:
        """Stop the thread pool and free the simulations; the env is unusable afterwards."""
        self._closed = True
        self._sim.close()

    def __enter__(self) -> BatchedEnv:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # ------------------------------------------------------------- task hooks

    def _model_xml(self) -> str | None:
        """The task's MJCF text; None: Gymnasium's XML file `xml_file` (read by `_make_model`)."""
        return None

    def _make_model(self) -> mujoco.MjModel:
        """The model of a task without `_model_xml`: Gymnasium's XML file `xml_file`."""
        return mujoco.MjModel.from_xml_path(os.path.join(GYM_ASSETS, self.xml_file))

    def _apply_actions(self, actions: np.ndarray) -> None:
        """Write the controls for `actions` [N, act_dim]: by default the actions clipped to ctrlrange."""
        np.clip(actions, self._ctrl_low, self._ctrl_high, out=self._ctrl)

    def _fill_critic(self, out: np.ndarray, rows) -> None:
        """Write the critic observation of `rows` into out[rows] (after `_fill_obs`): by default the obs."""
        out[rows] = self._result.obs[rows]

    @abstractmethod
    def _sample_reset(self, n: int) -> tuple[np.ndarray, np.ndarray]:
        """Gymnasium's reset_model distribution: (qpos [n, nq], qvel [n, nv])."""

    @abstractmethod
    def _fill_obs(self, out: np.ndarray, rows) -> None:
        """Write the observation of `rows` (slice(None) or int32 ids) into out[rows]."""

    @abstractmethod
    def _compute_terms(self, terms: dict[str, np.ndarray], terminated: np.ndarray) -> None:
        """After the physics: weighted reward terms (float64, in place) and terminated (in place)."""

    def _before_physics(self) -> None:  # noqa: B027 - optional hook, a no-op for tasks that need nothing
        """Record what the reward needs from the state before the step."""

    def _after_physics(self) -> None:  # noqa: B027 - optional hook, a no-op for tasks that need nothing
        """Derive what the reward needs from the data the step left behind."""

    def _after_reset(self, ids: np.ndarray | None) -> None:  # noqa: B027 - optional hook, a no-op by default
        """Refresh per-env task data of freshly reset envs `ids` (None: all)."""

    # --------------------------------------------------------------- helpers

    def _begin_step(self, actions: np.ndarray) -> None:
        self._check_open()
        if np.shape(actions) != (self.num_envs, self.spec.act_dim):
            raise ValueError(f"actions must be [{self.num_envs}, {self.spec.act_dim}], got {np.shape(actions)}")
        self._apply_actions(actions)
        self._before_physics()

    def _finish_step(self) -> StepResult:
        r = self._result
        self._after_physics()
        self._compute_terms(self._terms64, r.terminated)
        self._sum_terms()
        self._fill_obs(r.obs, slice(None))
        self._fill_critic(r.critic, slice(None))
        self._steps += 1
        np.greater_equal(self._steps, self.max_episode_steps, out=r.truncated)
        r.truncated &= ~r.terminated
        np.copyto(r.final_obs, r.obs)
        np.copyto(r.final_critic, r.critic)
        np.logical_or(r.terminated, r.truncated, out=self._done)
        if self._done.any():
            ended = np.flatnonzero(self._done).astype(np.int32)
            if self.on_episode_end is not None:
                self.on_episode_end(ended)
            self._reset_rows(ended)
        return r

    def _reset_rows(self, ids: np.ndarray | None) -> None:
        n = self.num_envs if ids is None else len(ids)
        qpos, qvel = self._sample_reset(n)
        self._load_rows(ids, qpos, qvel)

    def _load_rows(self, ids: np.ndarray | None, qpos: np.ndarray, qvel: np.ndarray) -> None:
        rows = slice(None) if ids is None else ids
        self._sim.reset(ids)
        self._sim.set_state(ids, qpos, qvel)
        self._steps[rows] = 0
        self._after_reset(ids)
        r = self._result
        self._fill_obs(r.obs, rows)
        self._fill_critic(r.critic, rows)

    def _check_open(self) -> None:
        # The state views point into the batch's memory, which close() frees.
        if self._closed:
            raise RuntimeError(f"{self.task} environment is closed")

    def _sum_terms(self) -> None:
        r = self._result
        self._reward64.fill(0.0)
        for name, value in self._terms64.items():
            self._reward64 += value
            np.copyto(r.terms[name], value, casting="same_kind")
        np.copyto(r.rewards, self._reward64, casting="same_kind")

    def _check_spec(self) -> None:
        m, spec = self.model, self.spec
        if m.nu != spec.act_dim or not np.isclose(self.dt, spec.control_dt):
            raise RuntimeError(f"{self.task}: model (nu={m.nu}, dt={self.dt}) disagrees with {spec}")


def split_rows(num_envs: int, groups: int) -> list[slice]:
    """`groups` contiguous row ranges covering rows 0..num_envs-1 once each, sizes differing by at most one."""
    if not 1 <= groups <= num_envs:
        raise ValueError(f"cannot split {num_envs} envs into {groups} non-empty groups")
    bounds = [num_envs * g // groups for g in range(groups + 1)]
    return [slice(a, b) for a, b in pairwise(bounds)]


class EnvGroups:
    """N environments of one task as separate batches over contiguous row ranges, each stepped on its own.

    Why: the collector double-buffers its rollout loop over the groups.  While one
    group's physics runs on MuJoCo's native threads (`step_async`, GIL released),
    the main thread finishes the other group's step (NumPy) and runs its policy
    inference, so the cores step physics instead of idling during inference.
    The groups take turns on one stepper thread, each on all the threads: a group
    whose actions are ready queues behind the one stepping, so the threads always
    have physics to do.  (Giving each group half the threads instead idles that
    half whenever its own group is in the main thread's hands.)

    Row r of the whole is row r - rows[g].start of `envs[g]`.  The groups are
    independent envs: each draws its resets from its own generator, spawned from `rng`.
    `step()` advances all groups (concurrently) for callers that want one StepResult.

    `overlap` says whether the groups' physics may run in the background, beside the
    caller: False with a single thread, where it would only compete with the caller.
    `stepper` (owned: shut down by close) is the groups' shared step thread, if any.
    """

    def __init__(self, envs: list[BatchedEnv], seed, overlap: bool = True,
                 stepper: ThreadPoolExecutor | None = None):
        if not envs:
            raise ValueError("EnvGroups needs at least one env")
        self.envs = envs
        self.spec: TaskSpec = envs[0].spec
        if any(e.spec != self.spec for e in envs):
            raise ValueError("all groups must run the same task")
        self.num_envs = sum(e.num_envs for e in envs)
        self.rows = split_rows(self.num_envs, len(envs))
        if [r.stop - r.start for r in self.rows] != [e.num_envs for e in envs]:
            raise ValueError(f"group sizes {[e.num_envs for e in envs]} are not an even split of {self.num_envs}")
        self.max_episode_steps = envs[0].max_episode_steps
        self.overlap = overlap
        self._stepper = stepper
        self.rng = np.random.default_rng(seed)
        self._result = StepResult.zeros(self.num_envs, self.spec.obs_dim, self.spec.critic_dim,
                                        self.spec.reward_terms)

    @classmethod
    def build(cls, factory, num_envs: int, groups: int, num_threads: int, seed) -> EnvGroups:
        """`groups` envs `factory(n, num_threads, seed, stepper)` splitting num_envs rows between them.

        Every group gets all `num_threads` physics threads and the same stepper, so
        their steps run one after another, each on all the threads.  With a single
        thread `overlap` is off (the groups step in the caller, one at a time, same data).
        """
        stepper = make_stepper()
        envs: list[BatchedEnv] = []
        try:
            for rows in split_rows(num_envs, groups):
                envs.append(factory(rows.stop - rows.start, num_threads, seed, stepper))
        except BaseException:
            for env in envs:
                env.close()
            stepper.shutdown()
            raise
        return cls(envs, seed, overlap=num_threads >= 2, stepper=stepper)

    @property
    def rng(self) -> np.random.Generator:
        return self._rng

    @rng.setter
    def rng(self, rng: np.random.Generator) -> None:
        """Reseed every group: group g draws from the g-th generator spawned from `rng`."""
        self._rng = rng
        for env, child in zip(self.envs, rng.spawn(len(self.envs)), strict=True):
            env.rng = child

    def reset(self) -> tuple[np.ndarray, np.ndarray]:
        """Start a new episode in every env of every group; returns copies of (obs, critic)."""
        r = self._result
        for rows, env in zip(self.rows, self.envs, strict=True):
            r.obs[rows], r.critic[rows] = env.reset()
        return self.observe()

    def observe(self) -> tuple[np.ndarray, np.ndarray]:
        """Copies of the current (obs, critic) of every env."""
        r = self._result
        for rows, env in zip(self.rows, self.envs, strict=True):
            r.obs[rows], r.critic[rows] = env.observe()
        return r.obs.copy(), r.critic.copy()

    def step(self, actions: np.ndarray) -> StepResult:
        """Advance every group by one control step (their physics concurrently); one StepResult, reused."""
        if np.shape(actions) != (self.num_envs, self.spec.act_dim):
            raise ValueError(f"actions must be [{self.num_envs}, {self.spec.act_dim}], got {np.shape(actions)}")
        if self.overlap:
            for rows, env in zip(self.rows, self.envs, strict=True):
                env.step_async(actions[rows])
        r = self._result
        for rows, env in zip(self.rows, self.envs, strict=True):
            g = env.step_wait() if self.overlap else env.step(actions[rows])
            for name in ("obs", "critic", "rewards", "terminated", "truncated", "final_obs", "final_critic"):
                getattr(r, name)[rows] = getattr(g, name)
            for name, value in g.terms.items():
                r.terms[name][rows] = value
        return r

    def close(self) -> None:
        """Close every group, then their stepper."""
        for env in self.envs:
            env.close()
        if self._stepper is not None:
            self._stepper.shutdown()

    def __enter__(self) -> EnvGroups:
        return self

    def __exit__(self, *exc) -> None:
        self.close()
