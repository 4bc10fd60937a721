"""VectorEnv: what the collector's rollout loop uses of an environment.

BatchedEnv (the built-in tasks), EnvGroups (the collector's double-buffered split of one)
and GymVectorEnv (`gym:<id>`) all provide it.  The loop also uses optional extras where an
environment has them, found with hasattr/getattr: `step_async`/`step_wait` (BatchedEnv:
physics in the background), EnvGroups' `envs`, `rows` and `overlap` (after an isinstance
check), and `velocity_tracking()` (tasks with velocity commands).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol, runtime_checkable

import numpy as np

from common.task_spec import TaskSpec

if TYPE_CHECKING:  # batched.py imports MuJoCo; the interface itself needs none of it
    from collector.envs.batched import StepResult


@runtime_checkable
class VectorEnv(Protocol):
    """N copies of one task stepped together, as the collector's rollout loop drives them."""

    num_envs: int
    spec: TaskSpec
    # Drives the resets; deterministic mode replaces it with one seeded from (seed, policy version).
    rng: np.random.Generator

    def reset(self) -> tuple[np.ndarray, np.ndarray]:
        """Start a new episode in every env; copies of (obs [N, obs_dim], critic [N, critic_dim])."""
        ...

    def step(self, actions: np.ndarray) -> StepResult:
        """Advance every env by one control step with `actions` [N, act_dim]; the env's reused StepResult."""
        ...

    def observe(self) -> tuple[np.ndarray, np.ndarray]:
        """Copies of the current (obs, critic) of every env."""
        ...

    def close(self) -> None:
        """Free the simulations and threads; the env is unusable afterwards."""
        ...
