"""NumPy inference leaves the cores to MuJoCo: the collector's BLAS runs one thread."""

from __future__ import annotations

import os
import subprocess
import sys

# In a fresh interpreter (the limit is process-wide): BLAS threads before and after, as the libraries report them.
PROBE = """
import numpy
from threadpoolctl import threadpool_info
from collector.inference import limit_inference_threads
def blas(): return [p["num_threads"] for p in threadpool_info() if p["user_api"] == "blas"]
before = blas()
limit_inference_threads("numpy")
print(min(before), max(before), max(blas()))
"""


def test_numpy_inference_limits_numpys_blas_to_one_thread():
    """After limit_inference_threads('numpy'), every BLAS NumPy loaded runs one thread, not one per core."""
    env = {k: v for k, v in os.environ.items() if k not in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS",
                                                              "MKL_NUM_THREADS")}
    out = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True, env=env, timeout=60)
    assert out.returncode == 0, out.stderr
    low, high, after = map(int, out.stdout.split())
    if len(os.sched_getaffinity(0)) > 1:
        assert high > 1  # the BLAS starts with a thread per core: the limit is what brings it to one
    assert low >= 1 and after == 1
