"""One BLAS thread for NumPy inference, set on the OpenBLAS that NumPy loaded.

OpenBLAS splits a matmul over every core from a modest size on (a Go2 batch's
first layer is far past it), and its idle workers spin before they sleep.  In a
collector those cores belong to the MuJoCo threads stepping the other env group
(collector/rollout.py), so BLAS threads would slow the physics they should
overlap; appo-collector gives torch one thread for the same reason.  There is no
NumPy API for this, and the OPENBLAS_NUM_THREADS variable is read only when the
library loads, which happened with `import numpy`; so the thread count is set
through the library's own entry point, found among the loaded objects.
"""

from __future__ import annotations

import ctypes
from pathlib import Path

# Entry points of OpenBLAS builds: NumPy's wheels (scipy-openblas, 64-bit ints, prefixed symbols), then plain ones.
_SETTERS = ("scipy_openblas_set_num_threads64_", "scipy_openblas_set_num_threads",
            "openblas_set_num_threads64_", "openblas_set_num_threads")


def _loaded_openblas() -> list[str]:
    """Paths of the OpenBLAS libraries mapped into this process (Linux; none elsewhere)."""
    try:
        maps = Path("/proc/self/maps").read_text()
    except OSError:
        return []
    paths = {line.split()[-1] for line in maps.splitlines() if "openblas" in line.rsplit("/", 1)[-1].lower()}
    return sorted(p for p in paths if p.startswith("/"))


def limit_blas_threads(threads: int = 1) -> bool:
    """Make NumPy's OpenBLAS use `threads` threads; False if no OpenBLAS with a known entry point is loaded."""
    import numpy  # noqa: F401  (loads the BLAS this acts on)

    done = False
    for path in _loaded_openblas():
        lib = ctypes.CDLL(path)  # already loaded: this only looks it up
        setter = next((getattr(lib, name) for name in _SETTERS if hasattr(lib, name)), None)
        if setter is not None:
            setter.argtypes, setter.restype = [ctypes.c_int], None
            setter(threads)
            done = True
    return done
