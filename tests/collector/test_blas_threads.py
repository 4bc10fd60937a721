"""NumPy inference leaves the cores to MuJoCo: limit_blas_threads reaches the OpenBLAS that NumPy loaded."""

from __future__ import annotations

import os
import subprocess
import sys

# In a fresh interpreter (the limit is process-wide): the library's own thread count before and after.
PROBE = """
import ctypes
from collector.blas_threads import _loaded_openblas, limit_blas_threads
import numpy
lib = ctypes.CDLL(_loaded_openblas()[0])
getters = ("scipy_openblas_get_num_threads64_", "openblas_get_num_threads64_", "openblas_get_num_threads")
get = next(getattr(lib, name) for name in getters if hasattr(lib, name))
before = get()
print(before, limit_blas_threads(1), get())
"""


def test_limit_blas_threads_leaves_numpys_openblas_one_thread():
    """After limit_blas_threads(1), NumPy's OpenBLAS reports one thread (whatever it started with)."""
    env = {k: v for k, v in os.environ.items() if k not in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS")}
    out = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True, env=env, timeout=60)
    assert out.returncode == 0, out.stderr
    before, limited, after = out.stdout.split()
    assert int(before) >= 1  # OpenBLAS starts with one per usable core
    assert (limited, after) == ("True", "1")
