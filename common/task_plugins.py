"""Tasks defined outside this project: `gym:<id>`, `package.module:factory`, `appo.tasks` entry points.

A task string names one of:

  * a built-in task (common/task_spec.py TASK_SPECS), e.g. `half_cheetah`;
  * `gym:<Gymnasium id>`, e.g. `gym:Pendulum-v1`: any Gymnasium environment with
    Box observation and action spaces, run through the collector's vector adapter;
  * `package.module:factory`: `factory(num_envs, num_threads, seed,
    max_episode_steps=None)` returns a BatchedEnv-compatible object whose `.spec`
    is a TaskSpec;
  * a name registered by an installed package in the entry-point group
    `appo.tasks` (name = "package.module:factory").

Here only the name and the spec are resolved, never an environment stepped, so
the learner can size its networks without importing the collector.  A factory
task declares its spec next to the factory, found in this order: a `spec`
attribute on the factory itself, a module-level `spec`, a module-level
`task_spec()` function.
"""

from __future__ import annotations

import functools
import importlib
import re
from dataclasses import dataclass
from importlib.metadata import entry_points

from common.task_spec import TASK_SPECS, TaskSpec, UnknownTaskError

ENTRY_POINT_GROUP = "appo.tasks"
GYM_PREFIX = "gym:"
_DOTTED = re.compile(r"^[A-Za-z_]\w*(\.[A-Za-z_]\w*)*$")


@dataclass(frozen=True)
class TaskRef:
    """What a task string refers to: a built-in, a Gymnasium id or a module:factory."""

    kind: str    # "builtin", "gym" or "factory"
    name: str    # the task string as given
    target: str  # the built-in name, the Gymnasium id, or "module:attr"


def parse_task(name: str) -> TaskRef:
    """What a task string refers to; UnknownTaskError for a malformed or unknown name."""
    if name in TASK_SPECS:
        return TaskRef("builtin", name, name)
    if name.startswith(GYM_PREFIX):
        gym_id = name[len(GYM_PREFIX):]
        if not gym_id:
            raise UnknownTaskError(f"task {name!r}: give a Gymnasium id after 'gym:', e.g. gym:Pendulum-v1")
        return TaskRef("gym", name, gym_id)
    if ":" in name:
        module, _, attr = name.partition(":")
        if not _DOTTED.match(module) or not _DOTTED.match(attr):
            raise UnknownTaskError(f"task {name!r} is not of the form package.module:factory")
        return TaskRef("factory", name, name)
    registered = _entry_points()
    if name in registered:
        return TaskRef("factory", name, registered[name])
    raise UnknownTaskError(
        f"unknown task {name!r}; built-in: {', '.join(sorted(TASK_SPECS))}"
        + (f"; installed ({ENTRY_POINT_GROUP}): {', '.join(sorted(registered))}" if registered else "")
        + "; or give gym:<Gymnasium id> or package.module:factory"
    )


def entry_point_tasks() -> list[str]:
    """Task names that installed packages register in the `appo.tasks` entry-point group."""
    return sorted(_entry_points())


def _entry_points() -> dict[str, str]:
    found: dict[str, str] = {}
    for ep in entry_points(group=ENTRY_POINT_GROUP):
        found.setdefault(ep.name, f"{ep.module}:{ep.attr}")  # first installed wins, as in importlib
    return found


def plugin_spec(name: str) -> TaskSpec:
    """The spec of a `gym:` or factory task (built-ins are TASK_SPECS entries)."""
    ref = parse_task(name)
    if ref.kind == "builtin":
        return TASK_SPECS[name]
    if ref.kind == "gym":
        return gym_spec(ref.target)
    return factory_spec(ref)


# ---------------------------------------------------------------- factories


def import_task_module(ref: TaskRef):
    module_name = ref.target.partition(":")[0]
    try:
        return importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        raise UnknownTaskError(
            f"task {ref.name!r}: cannot import module {module_name!r} ({exc}); install its package "
            "or add its directory to PYTHONPATH (collectors are separate processes and need it too)"
        ) from None


def load_factory(ref: TaskRef):
    """The factory callable a factory task names."""
    obj = import_task_module(ref)
    module_name, _, attr = ref.target.partition(":")
    for part in attr.split("."):
        if not hasattr(obj, part):
            raise UnknownTaskError(f"task {ref.name!r}: module {module_name!r} has no attribute {attr!r}")
        obj = getattr(obj, part)
    if not callable(obj):
        raise UnknownTaskError(f"task {ref.name!r}: {ref.target} is a {type(obj).__name__}, not a factory function")
    return obj


def factory_spec(ref: TaskRef) -> TaskSpec:
    module = import_task_module(ref)
    factory = load_factory(ref)
    spec = getattr(factory, "spec", None)
    if spec is None:
        spec = getattr(module, "spec", None)
    hook = getattr(module, "task_spec", None)
    # A module that imported our own task_spec(name) for its spec has not declared a hook.
    if spec is None and callable(hook) and hook is not _builtin_task_spec():
        spec = hook()
    if spec is None:
        raise UnknownTaskError(
            f"task {ref.name!r}: module {module.__name__!r} declares no spec; define `spec = TaskSpec(...)` "
            "or `def task_spec() -> TaskSpec` next to the factory"
        )
    if not isinstance(spec, TaskSpec):
        raise UnknownTaskError(f"task {ref.name!r}: its spec is a {type(spec).__name__}, "
                               "not a common.task_spec.TaskSpec")
    return spec


def _builtin_task_spec():
    from common.task_spec import task_spec

    return task_spec


# ---------------------------------------------------------------- Gymnasium


@functools.cache
def gym_spec(gym_id: str) -> TaskSpec:
    """Spec of a Gymnasium environment, read from one instance's spaces (made once per process)."""
    import gymnasium

    name = GYM_PREFIX + gym_id
    try:
        env = gymnasium.make(gym_id)
    except (gymnasium.error.Error, ImportError) as exc:
        raise UnknownTaskError(f"task {name!r}: Gymnasium cannot make {gym_id!r}: {exc}") from None
    try:
        obs_dim = _box_dim(name, "observation", env.observation_space)
        act_dim = _box_dim(name, "action", env.action_space)
        limit = env.spec.max_episode_steps if env.spec is not None else None
        if not limit:
            raise UnknownTaskError(f"task {name!r} has no time limit (its Gymnasium spec sets no "
                                   "max_episode_steps); register the id with one")
        return TaskSpec(name, obs_dim, obs_dim, act_dim, int(limit), _control_dt(env), ("reward",))
    finally:
        env.close()


def _box_dim(name: str, what: str, space) -> int:
    from gymnasium.spaces import Box

    if not isinstance(space, Box) or len(space.shape) != 1:
        raise UnknownTaskError(f"task {name!r}: APPO needs a flat Box {what} space, got {space}")
    return int(space.shape[0])


def _control_dt(env) -> float:
    """Seconds per step: the env's `dt` (MuJoCo and classic-control envs have one), else 1/render_fps,
    else 0 (unknown)."""
    dt = getattr(env.unwrapped, "dt", None)
    if dt:
        return float(dt)
    fps = (env.metadata or {}).get("render_fps")
    return 1.0 / fps if fps else 0.0


def resolve_task_spec(name: str) -> TaskSpec:
    """The spec of any task string: a built-in, `gym:<id>`, `package.module:factory` or an `appo.tasks` entry point.

    Builds no simulation (a `gym:` task makes one Gymnasium instance to read its
    spaces); the forms and how a factory declares its spec are described above.
    """
    if name in TASK_SPECS:
        return TASK_SPECS[name]
    return plugin_spec(name)
