"""MuJoCo behind the physics interface: a ctypes binding of its batch C API (mujoco/mjbatch.h, MuJoCo >= 4.0).

Why not `mujoco.batch.Batch` or `mujoco.rollout`: both step natively on a thread
pool with the GIL released, but neither can run a function on every simulation's
own mjData after a step (`mjb_apply`).  Gymnasium's Ant reads `cfrc_ext` from
`mj_rnePostConstraint` called after `mj_step`, i.e. on the derived data of the
last RK4 stage; no sensor and no exposed field reproduces that (acc-stage sensors
run on the first RK4 stage only).  A persistent batch keeps one mjData per
simulation, so `mjb_apply(mj_rnePostConstraint)` on it gives exactly that value,
still on the batch's native threads.

ctypes releases the GIL for every foreign call, so the physics runs unblocked,
and `step_async` runs it on a helper thread while the caller goes on with Python
work (the collector's policy inference for another batch).  The state rows
(mjSTATE_INTEGRATION: qpos, qvel, ctrl, qacc_warmstart, ...) are exposed as
NumPy views: a write is the simulation's state at its next call.
"""

from __future__ import annotations

import contextlib
import ctypes as C
import glob
import os
import weakref
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

import mujoco
import numpy as np

from collector.envs.physics.interface import STAGE_ACC, STAGE_NONE, STAGE_POS, STAGE_VEL, BackgroundStep

# The interface's stages are MuJoCo's own, passed through unchanged.
assert tuple(
    int(s) for s in (mujoco.mjtStage.mjSTAGE_NONE, mujoco.mjtStage.mjSTAGE_POS, mujoco.mjtStage.mjSTAGE_VEL,
                     mujoco.mjtStage.mjSTAGE_ACC)) == (STAGE_NONE, STAGE_POS, STAGE_VEL, STAGE_ACC)


class _Config(C.Structure):
    """ctypes mirror of MuJoCo's mjBatchConfig (thread count, persistent mjData)."""

    _fields_ = [("nthread", C.c_int), ("persistent", C.c_ubyte)]


_VOIDP, _INTP = C.c_void_p, C.POINTER(C.c_int)
_SIGNATURES = {
    "mjb_defaultConfig": (None, [C.POINTER(_Config)]),
    "mjb_makeBatch": (_VOIDP, [_VOIDP, C.c_int, C.POINTER(_Config), C.c_char_p, C.c_int]),
    "mjb_deleteBatch": (None, [_VOIDP]),
    "mjb_nstate": (C.c_int, [_VOIDP]),
    "mjb_nthread": (C.c_int, [_VOIDP]),
    "mjb_state": (_VOIDP, [_VOIDP]),
    "mjb_stateComponent": (_VOIDP, [_VOIDP, C.c_int, _INTP]),
    "mjb_output": (_VOIDP, [_VOIDP, C.c_char_p, _INTP, _INTP]),
    "mjb_expand": (_VOIDP, [_VOIDP, C.c_char_p, _INTP, _INTP]),
    "mjb_step": (C.c_int, [_VOIDP, _VOIDP, C.c_int, C.c_int, C.c_int]),
    "mjb_forward": (C.c_int, [_VOIDP, _VOIDP, C.c_int, C.c_int]),
    "mjb_reset": (C.c_int, [_VOIDP, _VOIDP, C.c_int, _VOIDP, C.c_int]),
    "mjb_apply": (C.c_int, [_VOIDP, _VOIDP, C.c_int, _VOIDP, _VOIDP, C.c_int]),
    "mjb_status": (_INTP, [_VOIDP]),
    "mjb_error": (C.c_char_p, [_VOIDP, C.c_int]),
}


def _find_library() -> str:
    # The wheel's own engine library: the one the Python bindings already loaded,
    # so dlopen hands back the same instance (and the same mjModel layout).
    pkg = os.path.dirname(mujoco.__file__)
    for pattern in ("libmujoco.so*", "libmujoco*.dylib", "mujoco.dll"):
        found = sorted(glob.glob(os.path.join(pkg, pattern)))
        if found:
            return found[0]
    raise ImportError(f"no MuJoCo engine library found in {pkg}")


def _load():
    lib = C.CDLL(_find_library())
    for name, (restype, argtypes) in _SIGNATURES.items():
        fn = getattr(lib, name)
        fn.restype, fn.argtypes = restype, argtypes
    return lib


_LIB = _load()
# mjfBatchFunc is f(m, d, sim, arg); mj_rnePostConstraint is f(m, d).  The extra
# two arguments travel in registers that the callee never reads, which every ABI
# MuJoCo ships wheels for (x86-64 System V and Windows, AArch64) allows.
RNE_POST_CONSTRAINT = C.cast(_LIB.mj_rnePostConstraint, C.c_void_p).value


def _ids_arg(ids: np.ndarray | None) -> tuple[int | None, int]:
    if ids is None:
        return None, 0
    return ids.ctypes.data, len(ids)


class MujocoPhysics(BackgroundStep):
    """nsim simulations of a copy of `model` on `nthread` threads (the caller's included).

    `stepper` is the one thread that runs `step_async`.  Batches handed the same
    stepper step one after another, each on all of its own threads, so a second
    batch's physics queues behind the first instead of splitting the cores with
    it (None: the batch makes its own on first use and shuts it down on close).

    `state`, `component()` and `output()` are views of the batch's own memory:
    they must not be used after `close()` or once the batch is garbage, nor
    between `step_async()` and `wait()`, while the physics writes them.
    """

    def __init__(self, model: mujoco.MjModel, nsim: int, nthread: int, persistent: bool,
                 stepper: ThreadPoolExecutor | None = None):
        self.model = model
        self.nsim = nsim
        config = _Config()
        _LIB.mjb_defaultConfig(C.byref(config))
        config.nthread, config.persistent = max(1, nthread), int(persistent)
        err = C.create_string_buffer(1000)
        self._b = _LIB.mjb_makeBatch(model._address, nsim, C.byref(config), err, len(err))
        if not self._b:
            raise RuntimeError(f"mjb_makeBatch failed: {err.value.decode(errors='replace')}")
        # Frees the batch (and joins its threads) when this object goes away unclosed.
        self._free = weakref.finalize(self, _LIB.mjb_deleteBatch, self._b)
        self.nstate = _LIB.mjb_nstate(self._b)
        self.nthread = _LIB.mjb_nthread(self._b)
        self._state_addr = _LIB.mjb_state(self._b)
        self.state = np.ctypeslib.as_array(C.cast(self._state_addr, C.POINTER(C.c_double)),
                                           shape=(nsim, self.nstate))
        self._status = np.ctypeslib.as_array(_LIB.mjb_status(self._b), shape=(nsim,))
        self.qpos = self.component(mujoco.mjtState.mjSTATE_QPOS)
        self.qvel = self.component(mujoco.mjtState.mjSTATE_QVEL)
        self.ctrl = self.component(mujoco.mjtState.mjSTATE_CTRL)
        # step_async's thread: the "caller" of the batch's threads (its GIL released in each native call).
        self._init_stepper(stepper)

    def component(self, bit: mujoco.mjtState) -> np.ndarray:
        """Live (nsim, size) view of one state component in the rows."""
        size = C.c_int()
        addr = _LIB.mjb_stateComponent(self._b, int(bit), C.byref(size))
        offset = (addr - self._state_addr) // self.state.itemsize
        return self.state[:, offset:offset + size.value]

    def output(self, name: str) -> np.ndarray:
        """(nsim, size) float64 copy of an mjData field, refreshed after every call on a simulation."""
        size, elemsize = C.c_int(), C.c_int()
        addr = _LIB.mjb_output(self._b, name.encode(), C.byref(size), C.byref(elemsize))
        if not addr or elemsize.value != 8:
            raise ValueError(f"mjData field {name!r} cannot be an mjtNum batch output")
        out = np.ctypeslib.as_array(C.cast(addr, C.POINTER(C.c_double)), shape=(self.nsim, size.value))
        out.flags.writeable = False
        return out

    def set_state(self, ids: np.ndarray | None, qpos: np.ndarray, qvel: np.ndarray) -> None:
        """Write the state of rows `ids` (None: all): the rows are the simulations' own memory."""
        rows = slice(None) if ids is None else ids
        self.qpos[rows] = qpos
        self.qvel[rows] = qvel

    def field(self, name: str) -> np.ndarray:
        """The interface's per-env model field: MuJoCo's expanded model field (`expand`)."""
        return self.expand(name)

    def expand(self, name: str) -> np.ndarray:
        """Live (nsim, size) float64 view of per-simulation values of an mjModel field.

        Initialised from the model; row i is copied into the model before every call on simulation i.
        """
        size, elemsize = C.c_int(), C.c_int()
        addr = _LIB.mjb_expand(self._b, name.encode(), C.byref(size), C.byref(elemsize))
        if not addr or elemsize.value != 8:
            raise ValueError(f"mjModel field {name!r} cannot be expanded as mjtNum")
        return np.ctypeslib.as_array(C.cast(addr, C.POINTER(C.c_double)), shape=(self.nsim, size.value))

    def step(self, nstep: int, ids: np.ndarray | None = None, stage: int = STAGE_NONE,
             after_substep: Callable[[int], None] | None = None) -> None:
        """nstep mj_steps, then the stages of mj_forward up to `stage` at the new state.

        after_substep(k), when given, runs after substep k (0-based) of every simulation, each
        substep then its own native call: for a task that reads sensors at every substep.
        """
        self._check_idle()
        self._step(nstep, ids, stage, after_substep)

    def _step(self, nstep: int, ids: np.ndarray | None, stage: int,
              after_substep: Callable[[int], None] | None = None) -> None:
        ptr, n = _ids_arg(ids)
        if after_substep is None:
            self._check(_LIB.mjb_step(self._b, ptr, n, nstep, stage))
            return
        for k in range(nstep):
            self._check(_LIB.mjb_step(self._b, ptr, n, 1, stage if k == nstep - 1 else STAGE_NONE))
            after_substep(k)

    def forward(self, stage: int, ids: np.ndarray | None = None) -> None:
        """Compute stages up to `stage`; STAGE_NONE only refreshes the outputs (persistent batch)."""
        self._check_idle()
        ptr, n = _ids_arg(ids)
        self._check(_LIB.mjb_forward(self._b, ptr, n, stage))

    def reset(self, ids: np.ndarray | None = None) -> None:
        """mj_resetData on the rows, with no forward pass (the caller writes the state next)."""
        self._check_idle()
        ptr, n = _ids_arg(ids)
        self._check(_LIB.mjb_reset(self._b, ptr, n, None, STAGE_NONE))

    def apply(self, func: int) -> None:
        """Run a native `func(m, d, ...)` on every simulation's mjData, state unchanged."""
        self._check_idle()
        self._check(_LIB.mjb_apply(self._b, None, 0, func, None, 0))

    def close(self) -> None:
        with contextlib.suppress(RuntimeError):
            self._join_stepper()  # the physics must not outlive the memory it writes
        self._free()
        self._b = None

    def _check(self, nfail: int) -> None:
        if nfail:
            failed = np.flatnonzero(self._status)
            msg = _LIB.mjb_error(self._b, int(failed[0])).decode(errors="replace")
            raise RuntimeError(f"MuJoCo raised in {nfail} simulations ({failed[:5].tolist()}): {msg}")
