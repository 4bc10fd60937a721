"""Physics: what a task reads and writes of N simulations of one model, as arrays over all of them.

A task is written once against this; an engine implements it in its own file of this folder
(mujoco.py, motrix.py).  Every array is [N, ...] in MuJoCo's layout and units, whatever the engine:
the task's model is an MJCF compiled by MuJoCo, and an engine that stores its state otherwise
(another quaternion order, float32) converts at its boundary.  No call loops over envs in Python,
so an engine that steps all envs at once on a GPU can sit behind the same calls.

- State rows: `qpos` [N, nq], `qvel` [N, nv] (read: the current state), `ctrl` [N, nu] (written by
  the task before each step).  `set_state(ids, qpos, qvel)` writes rows of the state.
- Outputs: `output(name)` [N, size], read-only, refreshed by every step and forward: "sensordata"
  (the model's sensors in its own order), and body frames ("xpos", "xquat", "cvel", "subtree_com").
- Per-env model fields that randomisation changes: `field(name)` [N, size], writable, initialised
  from the model ("geom_friction", "body_ipos", "actuator_gainprm", "actuator_biasprm"); a row written
  takes effect at that env's next forward or step.
- `step(n, stage, after_substep)` advances every env n substeps (`after_substep(k)` after each, for
  tasks that read sensors at every substep); `step_async` / `wait` run it beside the caller.
- `reset(ids)` clears rows to the model's defaults before the task writes their state;
  `forward(stage, ids)` recomputes the outputs of rows whose state was written.
"""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Protocol, runtime_checkable

import numpy as np

# How far `forward` and the end of `step` recompute at the new state (MuJoCo's mjtStage values).
STAGE_NONE = 0  # nothing: outputs as the last substep left them
STAGE_POS = 1   # positions: body frames and position sensors
STAGE_VEL = 2   # and velocities: velocity sensors
STAGE_ACC = 3   # and accelerations


def make_stepper() -> ThreadPoolExecutor:
    """A thread for step_async: one, so the batches sharing it never step at the same time."""
    return ThreadPoolExecutor(1, thread_name_prefix="physics")


class BackgroundStep:
    """An engine's `step_async`/`wait` on a stepper thread, shared by the engines: they define `_step`."""

    def _init_stepper(self, stepper: ThreadPoolExecutor | None) -> None:
        # stepper: shared by batches that take turns (None: made on first use, shut down on close).
        self._worker: ThreadPoolExecutor | None = stepper
        self._owns_worker = stepper is None
        self._pending: Future | None = None

    def step_async(self, nstep: int, stage: int = STAGE_NONE,
                   after_substep: Callable[[int], None] | None = None) -> None:
        """Start `step(nstep, stage=stage, after_substep=...)` of every env on the stepper thread and return at
        once; `wait()` joins it (and raises its error)."""
        self._check_idle()
        if self._worker is None:
            self._worker = make_stepper()
        self._pending = self._worker.submit(self._step, nstep, None, stage, after_substep)

    def wait(self) -> None:
        """Block until the step `step_async` started is done (no-op when none is)."""
        pending, self._pending = self._pending, None
        if pending is not None:
            pending.result()

    def _join_stepper(self) -> None:
        """Wait for a step in flight, then stop the stepper thread if it is this batch's own."""
        if self._worker is not None:
            try:
                self.wait()
            finally:
                if self._owns_worker:
                    self._worker.shutdown()
                self._worker = None

    def _check_idle(self) -> None:
        if self._pending is not None:
            raise RuntimeError("a step_async() is in flight: call wait() first")


@runtime_checkable
class Physics(Protocol):
    """N simulations of one model, stepped together, read and written as [N, ...] arrays."""

    nsim: int
    qpos: np.ndarray
    qvel: np.ndarray
    ctrl: np.ndarray

    def set_state(self, ids: np.ndarray | None, qpos: np.ndarray, qvel: np.ndarray) -> None:
        """Write the state of rows `ids` (None: all), [len(ids), nq] and [len(ids), nv]."""
        ...

    def output(self, name: str) -> np.ndarray:
        """Read-only [N, size] view of one output, refreshed by every step and forward."""
        ...

    def field(self, name: str) -> np.ndarray:
        """Writable [N, size] per-env values of one model field; a row takes effect at its env's next call."""
        ...

    def step(self, nstep: int, ids: np.ndarray | None = None, stage: int = STAGE_NONE,
             after_substep: Callable[[int], None] | None = None) -> None:
        """nstep substeps of rows `ids` (None: all), then the stages up to `stage` at the new state."""
        ...

    def step_async(self, nstep: int, stage: int = STAGE_NONE,
                   after_substep: Callable[[int], None] | None = None) -> None:
        """Start `step` of every env beside the caller; `wait()` joins it."""
        ...

    def wait(self) -> None:
        """Block until the step `step_async` started is done (no-op when none is)."""
        ...

    def forward(self, stage: int, ids: np.ndarray | None = None) -> None:
        """Recompute rows `ids` (None: all) up to `stage` at their current state."""
        ...

    def reset(self, ids: np.ndarray | None = None) -> None:
        """Rows `ids` (None: all) back to the model's defaults, with no forward pass."""
        ...

    def close(self) -> None:
        """Free the simulations; the arrays are unusable afterwards."""
        ...
