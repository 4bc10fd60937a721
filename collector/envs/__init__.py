"""Batched MuJoCo locomotion tasks with Gymnasium v5 semantics, plus tasks from elsewhere.

    env = make_env("half_cheetah", num_envs=512, num_threads=2, seed=0)
    obs, critic = env.reset()
    res = env.step(actions)      # StepResult; its arrays are reused by the next step
    env.close()

Besides the built-ins, `make_env` takes `gym:<Gymnasium id>`, `package.module:factory`
and names registered in the `appo.tasks` entry-point group (collector/envs/registry.py).
`g1_motion_tracking` also needs `motion_file=` (the config's `task_options.motion_file`).

`VectorEnv` (collector/envs/interface.py) is the Protocol of what the collector's rollout
loop uses of an environment; BatchedEnv, EnvGroups and GymVectorEnv provide it.
"""

from __future__ import annotations

from collector.envs.batched import BatchedEnv, EnvGroups, StepResult
from collector.envs.g1.tracking import G1MotionTracking
from collector.envs.g1.velocity import G1VelocityFlat
from collector.envs.g1.walk import G1WalkFlat
from collector.envs.go2.task import Go2JoystickFlat
from collector.envs.gym_tasks import TASKS as GYM_TASKS
from collector.envs.interface import VectorEnv
from collector.envs.physics import SIMS, UnknownSimError
from collector.envs.registry import make_plugin_env
from common.task_plugins import entry_point_tasks
from common.task_spec import TASK_SPECS, UnknownTaskError, task_engines, tasks_on

__all__ = ["SIMS", "BatchedEnv", "EnvGroups", "StepResult", "UnknownSimError", "VectorEnv", "available_tasks",
           "make_collector_env", "make_env", "task_sims"]

TASKS: dict[str, type[BatchedEnv]] = {**GYM_TASKS, Go2JoystickFlat.task: Go2JoystickFlat, G1WalkFlat.task: G1WalkFlat,
                                      G1VelocityFlat.task: G1VelocityFlat, G1MotionTracking.task: G1MotionTracking}

# The collector splits a built-in task's batch in two groups (EnvGroups) from this many envs on:
# below it a step is so short that the thread hand-offs of the overlap cost more than they save.
# The split depends on num_envs alone, never on the cores, so a seed gives the same data everywhere.
COLLECTOR_SPLIT_MIN_ENVS = 256
COLLECTOR_GROUPS = 2


def available_tasks() -> list[str]:
    """Built-in tasks and those installed packages register under `appo.tasks`."""
    return sorted(set(TASKS) | set(entry_point_tasks()))


def make_env(task: str, num_envs: int, num_threads: int, seed: int,
             max_episode_steps: int | None = None, motion_file: str | None = None, sim: str = "mujoco") -> BatchedEnv:
    """`num_envs` copies of `task` on `num_threads` physics threads (the caller's included).

    max_episode_steps overrides the spec's time limit (None: the spec's).  motion_file is the reference
    clip of a task that tracks one (g1_motion_tracking, where it is required); other tasks ignore it.
    sim: the physics engine (collector/envs/physics).  Raises UnknownTaskError for a task that is not
    implemented here, UnknownSimError for an engine the task does not run on.
    """
    if task in TASKS:
        return TASKS[task](num_envs, num_threads, seed, max_episode_steps=max_episode_steps, sim=sim,
                           **_task_options(task, motion_file))
    if task in TASK_SPECS:
        raise UnknownTaskError(f"task {task!r} has no environment; available: {', '.join(available_tasks())}")
    check_sim_of_plugin(task, sim)
    return make_plugin_env(task, num_envs, num_threads, seed, max_episode_steps=max_episode_steps)


def make_collector_env(task: str, num_envs: int, num_threads: int, seed: int,
                       max_episode_steps: int | None = None, motion_file: str | None = None,
                       sim: str = "mujoco") -> VectorEnv:
    """The collector's env: a built-in task from COLLECTOR_SPLIT_MIN_ENVS envs on is an EnvGroups of two
    halves (their physics overlaps the collector's inference), taking turns on `num_threads`; otherwise
    `make_env`'s."""
    if task in TASKS and num_envs >= COLLECTOR_SPLIT_MIN_ENVS:
        options = _task_options(task, motion_file)

        def factory(n: int, threads: int, seed: int, stepper) -> BatchedEnv:
            return TASKS[task](n, threads, seed, max_episode_steps=max_episode_steps, stepper=stepper, sim=sim,
                               **options)

        return EnvGroups.build(factory, num_envs, COLLECTOR_GROUPS, num_threads, seed)
    return make_env(task, num_envs, num_threads, seed, max_episode_steps, motion_file=motion_file, sim=sim)


def task_sims(task: str) -> tuple[str, ...]:
    """The physics engines `task` runs on (a task from elsewhere brings its own: MuJoCo's, as far as we know)."""
    return task_engines(task)


def check_sim_of_plugin(task: str, sim: str) -> None:
    """Refuse an engine for a task defined outside this package: it builds its own simulation."""
    if sim != "mujoco":
        raise UnknownSimError(f"task {task} builds its own simulation; --sim {sim} applies to the built-in "
                              f"tasks that run on it: {', '.join(tasks_on(sim))}")


def _task_options(task: str, motion_file: str | None) -> dict:
    """The keyword options a built-in task takes: motion_file for the motion-tracking task, none otherwise."""
    return {"motion_file": motion_file} if getattr(TASKS[task], "uses_motion_file", False) else {}
