"""The physics engines a task runs on, behind one interface (interface.py), one file per engine.

    physics = make_physics("mujoco", model, nsim=128, nthread=2)

`SIMS` names the engines; `--sim` and `training.sim_backend` choose one by these names.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import mujoco

from collector.envs.physics.interface import STAGE_ACC, STAGE_NONE, STAGE_POS, STAGE_VEL, Physics, make_stepper
from common.task_spec import ENGINES

__all__ = ["SIMS", "STAGE_ACC", "STAGE_NONE", "STAGE_POS", "STAGE_VEL", "Physics", "UnknownSimError",
           "make_physics", "make_stepper"]

SIMS = ENGINES


class UnknownSimError(ValueError):
    """A physics engine this project does not have, or one a task cannot run on."""


def make_physics(sim: str, model: mujoco.MjModel, nsim: int, nthread: int, persistent: bool = False,
                 stepper: ThreadPoolExecutor | None = None, xml: str | None = None) -> Physics:
    """`nsim` simulations of `model` on engine `sim` with `nthread` threads (the caller's included).

    xml: the MJCF `model` was compiled from (an engine other than MuJoCo loads it itself).
    persistent: keep each simulation's full data between calls (MuJoCo: a task that runs a native
    function on it).  stepper: the thread `step_async` runs on, shared by batches that take turns.
    """
    if sim == "mujoco":
        from collector.envs.physics.mujoco import MujocoPhysics

        return MujocoPhysics(model, nsim, nthread, persistent, stepper)
    if sim == "motrix":
        try:
            from collector.envs.physics.motrix import MotrixPhysics
        except ModuleNotFoundError as exc:
            if exc.name != "motrixsim":
                raise
            raise UnknownSimError("MotrixSim is not installed here: pip install 'appo[motrix]' (in containers: the "
                                  "appo-collector-motrix image)") from None

        if xml is None:
            raise UnknownSimError("MotrixSim needs the task's MJCF text")
        return MotrixPhysics(model, xml, nsim, nthread, stepper)
    raise UnknownSimError(f"unknown physics engine {sim!r}; available: {', '.join(SIMS)}")
