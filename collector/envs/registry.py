"""Environments of tasks defined outside this package: `gym:<id>`, `package.module:factory`, entry points.

The names are resolved by common/task_plugins.py (shared with the learner);
here the environment is built and checked against the spec the learner uses,
so a factory whose env disagrees with its declared spec fails before training.
"""

from __future__ import annotations

from common.task_plugins import load_factory, parse_task, resolve_task_spec
from common.task_spec import TaskSpec, UnknownTaskError

# What the collector and appo-eval call on an environment.
_REQUIRED = ("reset", "step", "observe", "close")


def make_plugin_env(task: str, num_envs: int, num_threads: int, seed: int,
                    max_episode_steps: int | None = None):
    """An environment of a `gym:` or factory task (UnknownTaskError for anything else)."""
    ref = parse_task(task)
    if ref.kind == "builtin":
        raise UnknownTaskError(f"task {task!r} is built in; make it with collector.envs.make_env")
    if ref.kind == "gym":
        from collector.envs.gym_vector import GymVectorEnv  # imports Gymnasium's vector machinery

        return GymVectorEnv(ref.target, num_envs, num_threads, seed, max_episode_steps=max_episode_steps)
    expected = resolve_task_spec(task)  # a missing spec fails before any simulation is built
    env = load_factory(ref)(num_envs, num_threads, seed, max_episode_steps=max_episode_steps)
    check_env(task, env, expected, num_envs)
    return env


def check_env(task: str, env, expected: TaskSpec, num_envs: int) -> None:
    """Refuse a factory's env that lacks the interface or disagrees with the task's declared spec."""
    missing = [name for name in _REQUIRED if not callable(getattr(env, name, None))]
    problem = None
    if missing:
        problem = f"lacks {', '.join(missing)}()"
    elif not isinstance(getattr(env, "spec", None), TaskSpec):
        problem = "has no .spec TaskSpec"
    elif env.spec != expected:
        # The rollout layout (and its hash) is built from the spec on both sides.
        problem = f"has spec {env.spec}, but the task declares {expected}"
    elif getattr(env, "num_envs", None) != num_envs:
        problem = f"has num_envs={getattr(env, 'num_envs', None)!r}, asked for {num_envs}"
    if problem:
        close = getattr(env, "close", None)
        if callable(close):
            close()
        raise UnknownTaskError(f"task {task!r}: the factory's environment {problem}")
