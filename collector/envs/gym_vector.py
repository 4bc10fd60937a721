"""Any Gymnasium environment with Box spaces behind the VectorEnv interface (`--task gym:<id>`).

N copies, each a `gymnasium.make(id)` with its own time limit, auto-reset in the
step that ends them: the observation handed back is the new episode's first and
the last one of the ended episode goes to `final_obs` (StepResult's contract,
Gymnasium's SAME_STEP auto-reset).  The copies are split into `num_threads`
contiguous chunks stepped on a thread pool: MuJoCo releases the GIL inside
mj_step, so a MuJoCo-based environment's physics runs on several cores at once
while its Python code takes turns.  Each copy keeps its own random stream, so a
seed gives the same data on any number of threads.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import gymnasium
import numpy as np

from collector.envs.batched import StepResult
from common.task_plugins import GYM_PREFIX, gym_spec


class GymVectorEnv:
    """N copies of a Gymnasium environment with Box spaces behind the VectorEnv interface (`gym:<id>`)."""

    def __init__(self, gym_id: str, num_envs: int, num_threads: int, seed: int,
                 max_episode_steps: int | None = None):
        if num_envs < 1:
            raise ValueError(f"num_envs must be >= 1, got {num_envs}")
        if num_threads < 1:
            raise ValueError(f"num_threads must be >= 1, got {num_threads}")
        if max_episode_steps is not None and max_episode_steps < 1:
            raise ValueError(f"max_episode_steps must be >= 1, got {max_episode_steps}")
        self.task = GYM_PREFIX + gym_id
        self.spec = gym_spec(gym_id)
        self.num_envs = num_envs
        self.max_episode_steps = max_episode_steps or self.spec.max_episode_steps
        self._envs = [gymnasium.make(gym_id, max_episode_steps=self.max_episode_steps) for _ in range(num_envs)]
        space = self._envs[0].action_space
        self._act_low, self._act_high, self._act_dtype = space.low, space.high, space.dtype
        threads = min(num_threads, num_envs)
        bounds = np.linspace(0, num_envs, threads + 1).astype(int)
        self._chunks = [range(lo, hi) for lo, hi in zip(bounds[:-1], bounds[1:], strict=True)]
        # The caller steps the last chunk itself; the pool's threads inherit its priority.
        self._pool = ThreadPoolExecutor(threads - 1, thread_name_prefix="gym-step") if threads > 1 else None
        self._seed = seed
        # For the VectorEnv interface only: the copies draw from Gymnasium's own generators, seeded by reset().
        self.rng = np.random.default_rng(seed)
        self._closed = False
        self._result = StepResult.zeros(num_envs, self.spec.obs_dim, self.spec.critic_dim, ("reward",))
        self._actions = np.zeros((num_envs, self.spec.act_dim), self._act_dtype)

    def reset(self) -> tuple[np.ndarray, np.ndarray]:
        """Start a new episode in every copy (seeded seed, seed+1, ... on the first call)."""
        self._check_open()
        for i, env in enumerate(self._envs):
            obs, _ = env.reset(seed=None if self._seed is None else self._seed + i)
            self._result.obs[i] = obs
        self._seed = None  # later resets continue each copy's random stream
        self._result.critic[:] = self._result.obs
        return self.observe()

    def step(self, actions: np.ndarray) -> StepResult:
        """One step of every copy with `actions` clipped into the action space; reused StepResult."""
        r = self._result
        self._check_open()
        if np.shape(actions) != (self.num_envs, self.spec.act_dim):
            raise ValueError(f"actions must be [{self.num_envs}, {self.spec.act_dim}], got {np.shape(actions)}")
        np.copyto(self._actions, np.clip(actions, self._act_low, self._act_high), casting="unsafe")
        pending = [self._pool.submit(self._step_chunk, c) for c in self._chunks[:-1]] if self._pool else []
        self._step_chunk(self._chunks[-1])
        for f in pending:
            f.result()  # re-raises an environment's exception here
        r.critic[:] = r.obs
        r.terms["reward"][:] = r.rewards
        r.final_critic[:] = r.final_obs
        return r

    def _step_chunk(self, rows: range) -> None:
        """Step copies `rows`, resetting each one that ends (its last observation to final_obs)."""
        r = self._result
        for i in rows:
            obs, reward, terminated, truncated, _ = self._envs[i].step(self._actions[i])
            r.rewards[i] = reward
            r.terminated[i] = terminated
            r.truncated[i] = truncated and not terminated
            r.final_obs[i] = obs
            if terminated or truncated:
                obs, _ = self._envs[i].reset()
            r.obs[i] = obs

    def observe(self) -> tuple[np.ndarray, np.ndarray]:
        """Copies of the current (obs, critic) of every copy."""
        return self._result.obs.copy(), self._result.critic.copy()

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            if self._pool:
                self._pool.shutdown()
            for env in self._envs:
                env.close()

    def __enter__(self) -> GymVectorEnv:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def _check_open(self) -> None:
        if self._closed:
            raise RuntimeError(f"{self.task} environment is closed")

    # MuJoCo-based Gymnasium envs expose their physics, so appo-eval can render them
    # like the batched tasks; for others these raise AttributeError (hasattr is False).

    @property
    def model(self):
        return self._mujoco_data(0)[0]

    @property
    def qpos(self) -> np.ndarray:
        return np.stack([self._mujoco_data(i)[1].qpos for i in range(self.num_envs)])

    @property
    def qvel(self) -> np.ndarray:
        return np.stack([self._mujoco_data(i)[1].qvel for i in range(self.num_envs)])

    def _mujoco_data(self, i: int):
        inner = self._envs[i].unwrapped
        if not (hasattr(inner, "model") and hasattr(inner, "data")):
            raise AttributeError(f"{self.task} is not a MuJoCo environment")
        return inner.model, inner.data
