"""Batched MuJoCo locomotion tasks with Gymnasium v5 semantics, plus tasks from elsewhere.

    env = make_env("half_cheetah", num_envs=512, num_threads=2, seed=0)
    obs, critic = env.reset()
    res = env.step(actions)      # StepResult; its arrays are reused by the next step
    env.close()

Besides the built-ins, `make_env` takes `gym:<Gymnasium id>`, `package.module:factory`
and names registered in the `appo.tasks` entry-point group (collector/envs/registry.py).
"""

from __future__ import annotations

from collector.envs.batched import BatchedEnv, StepResult
from collector.envs.go2.task import Go2JoystickFlat
from collector.envs.gym_tasks import TASKS as GYM_TASKS
from collector.envs.registry import make_plugin_env
from common.task_plugins import entry_point_tasks
from common.task_spec import TASK_SPECS, UnknownTaskError

__all__ = ["BatchedEnv", "StepResult", "available_tasks", "make_env"]

TASKS: dict[str, type[BatchedEnv]] = {**GYM_TASKS, Go2JoystickFlat.task: Go2JoystickFlat}


def available_tasks() -> list[str]:
    """Built-in tasks and those installed packages register under `appo.tasks`."""
    return sorted(set(TASKS) | set(entry_point_tasks()))


def make_env(task: str, num_envs: int, num_threads: int, seed: int,
             max_episode_steps: int | None = None) -> BatchedEnv:
    """`num_envs` copies of `task` on `num_threads` physics threads (the caller's included).

    max_episode_steps overrides the spec's time limit (None: the spec's).
    Raises UnknownTaskError for a task that is not implemented here.
    """
    if task in TASKS:
        return TASKS[task](num_envs, num_threads, seed, max_episode_steps=max_episode_steps)
    if task in TASK_SPECS:
        raise UnknownTaskError(f"task {task!r} has no environment; available: {', '.join(available_tasks())}")
    return make_plugin_env(task, num_envs, num_threads, seed, max_episode_steps=max_episode_steps)
