"""Which OpenGL backend MuJoCo may load: only rendering needs one, and a missing GL library stops no other work.

MuJoCo picks its backend once, when it is imported, from MUJOCO_GL.  Where that names
`egl` or `osmesa` and the library is missing (a bare GPU or cluster node), `import mujoco`
itself fails: PyOpenGL raises an AttributeError, not an ImportError, so MuJoCo does not
fall back.  `guard()` runs before anything imports MuJoCo (the collector, tools and
benchmarks packages call it on import): it turns such a backend off for this process and
its children and keeps the reason, which a later request to render reports in one line.
`rendering_backend()` is the tools' import of MuJoCo (they alone render).
No module imports MuJoCo here, so the guard itself needs no GL library.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import sys
from contextlib import contextmanager

# MUJOCO_GL value -> (the library's name for find_library, its usual soname, what provides it).
_LIBRARIES = {
    "egl": ("EGL", "libEGL.so.1", "the EGL packages (Debian: apt-get install libegl1 libgl1)"),
    "osmesa": ("OSMesa", "libOSMesa.so.8", "OSMesa (Debian: apt-get install libosmesa6)"),
}
OFF = "disable"

_unavailable: str | None = None


def library_loads(backend: str) -> bool:
    """Whether the shared library MuJoCo's `backend` (egl, osmesa) needs can be loaded in this process."""
    name, soname, _ = _LIBRARIES[backend]
    try:
        ctypes.CDLL(ctypes.util.find_library(name) or soname)
    except OSError:
        return False
    return True


def guard() -> None:
    """Before MuJoCo's import: a MUJOCO_GL backend whose library cannot load becomes MUJOCO_GL=disable, reason kept."""
    global _unavailable
    backend = os.environ.get("MUJOCO_GL", "").strip().lower()
    if backend in _LIBRARIES and not library_loads(backend):
        _unavailable = _missing(backend, f"MUJOCO_GL={backend}")
        os.environ["MUJOCO_GL"] = OFF


@contextmanager
def rendering_backend():
    """Import MuJoCo inside: on headless Linux without MUJOCO_GL it loads EGL where that library loads (the
    only offscreen context there), else the reason is kept.  The variable is restored afterwards, so the
    processes this one starts (a training run) choose for themselves and inherit no backend."""
    global _unavailable
    before = os.environ.get("MUJOCO_GL")
    if sys.platform.startswith("linux") and not before:
        if library_loads("egl"):
            os.environ["MUJOCO_GL"] = "egl"
        else:
            _unavailable = _missing("egl", "offscreen rendering without a display")
    guard()
    try:
        yield
    finally:
        if before is None:
            os.environ.pop("MUJOCO_GL", None)
        else:
            os.environ["MUJOCO_GL"] = before


def render_unavailable() -> str | None:
    """Why this process cannot render (one line naming the missing library and what to do), or None."""
    return _unavailable


def _missing(backend: str, wanted: str) -> str:
    _, soname, packages = _LIBRARIES[backend]
    other = "MUJOCO_GL=osmesa" if backend == "egl" else "MUJOCO_GL=egl"
    return (f"cannot render: {wanted} needs {soname}, which cannot be loaded here; install {packages}, "
            f"or set {other}")
