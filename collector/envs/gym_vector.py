"""Any Gymnasium environment with Box spaces behind the VectorEnv interface (`--task gym:<id>`).

N copies run in a `gymnasium.vector.SyncVectorEnv` with same-step auto-reset:
when a copy ends, Gymnasium resets it inside the step and hands the last
observation over in `infos["final_obs"]`, which is exactly StepResult's
contract (obs after the reset, final_obs before it).  Stepping is Python, one
copy after another: the adapter is for trying a task, not for the throughput of
the batched MuJoCo tasks.
"""

from __future__ import annotations

import gymnasium
import numpy as np
from gymnasium.vector import AutoresetMode

from collector.envs.batched import StepResult
from common.task_plugins import GYM_PREFIX, gym_spec


class GymVectorEnv:
    """N copies of a Gymnasium environment with Box spaces behind the VectorEnv interface (`gym:<id>`)."""

    def __init__(self, gym_id: str, num_envs: int, num_threads: int, seed: int,
                 max_episode_steps: int | None = None):
        if num_envs < 1:
            raise ValueError(f"num_envs must be >= 1, got {num_envs}")
        if max_episode_steps is not None and max_episode_steps < 1:
            raise ValueError(f"max_episode_steps must be >= 1, got {max_episode_steps}")
        self.task = GYM_PREFIX + gym_id
        self.spec = gym_spec(gym_id)
        self.num_envs = num_envs
        self.max_episode_steps = max_episode_steps or self.spec.max_episode_steps
        # num_threads is unused: SyncVectorEnv steps the copies in this thread.
        self._vec = gymnasium.make_vec(
            gym_id, num_envs, vectorization_mode="sync",
            vector_kwargs={"autoreset_mode": AutoresetMode.SAME_STEP},
            max_episode_steps=self.max_episode_steps,
        )
        space = self._vec.single_action_space
        self._act_low, self._act_high, self._act_dtype = space.low, space.high, space.dtype
        self._seed = seed
        # For the VectorEnv interface only: the copies draw from Gymnasium's own generators, seeded by reset().
        self.rng = np.random.default_rng(seed)
        self._closed = False
        self._result = self._allocate()

    def _allocate(self) -> StepResult:
        return StepResult.zeros(self.num_envs, self.spec.obs_dim, self.spec.critic_dim, ("reward",))

    def reset(self) -> tuple[np.ndarray, np.ndarray]:
        """Start a new episode in every copy (seeded seed, seed+1, ... on the first call)."""
        self._check_open()
        obs, _ = self._vec.reset(seed=self._seed)
        self._seed = None  # later resets continue each copy's random stream
        self._result.obs[:] = obs
        self._result.critic[:] = obs
        return self.observe()

    def step(self, actions: np.ndarray) -> StepResult:
        """One step of every copy with `actions` clipped into the action space; reused StepResult."""
        r = self._result
        self._check_open()
        if np.shape(actions) != (self.num_envs, self.spec.act_dim):
            raise ValueError(f"actions must be [{self.num_envs}, {self.spec.act_dim}], got {np.shape(actions)}")
        clipped = np.clip(actions, self._act_low, self._act_high).astype(self._act_dtype, copy=False)
        obs, rewards, terminated, truncated, infos = self._vec.step(clipped)
        r.obs[:] = obs
        r.critic[:] = obs
        r.rewards[:] = rewards
        r.terms["reward"][:] = rewards
        r.terminated[:] = terminated
        np.logical_and(truncated, ~r.terminated, out=r.truncated)
        r.final_obs[:] = obs
        ended = np.flatnonzero(np.logical_or(terminated, truncated))
        for i in ended:
            r.final_obs[i] = infos["final_obs"][i]
        r.final_critic[:] = r.final_obs
        return r

    def observe(self) -> tuple[np.ndarray, np.ndarray]:
        """Copies of the current (obs, critic) of every copy."""
        return self._result.obs.copy(), self._result.critic.copy()

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            self._vec.close()

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
        inner = self._vec.envs[i].unwrapped
        if not (hasattr(inner, "model") and hasattr(inner, "data")):
            raise AttributeError(f"{self.task} is not a MuJoCo environment")
        return inner.model, inner.data
