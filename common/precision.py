"""The arithmetic of the policy's hidden layers (training.precision), resolved for a device.

The learner's update and the collectors' inference both read it.

bf16 pays where the matrix units multiply bfloat16 natively and fast, and the matmuls
dominate the update (BENCHMARKS.md, section "Learner in bf16").  The CPU flag alone does not
promise that: some CPUs with avx512_bf16 multiply bf16 slower than float32 (BENCHMARKS.md,
"bf16 where it is slower").  So
`auto` times one hidden layer both ways on the CPU at hand and takes bf16 only where it is
clearly faster.  On a GPU at the Go2 preset's sizes the update is bound by kernel launches,
and bf16's casts made it slower, so `auto` keeps float32 on GPUs (BENCHMARKS.md, the GPU host
section).
"""

from __future__ import annotations

import functools
import time
from pathlib import Path

import torch

# x86 /proc/cpuinfo flags of native bf16 dot products (AVX-512 BF16, AMX BF16 tiles).
_NATIVE_BF16_FLAGS = {"avx512_bf16", "amx_bf16"}
HIDDEN_DTYPES: dict[str, torch.dtype | None] = {"fp32": None, "bf16": torch.bfloat16}
# bf16 costs precision, so it must win the probe by this factor; a near tie keeps float32.
BF16_MIN_SPEEDUP = 1.15
# The probe: one 256 -> 256 hidden layer over a 4,096-row minibatch, forward and backward, the
# shape of the presets' update; best of PROBE_REPEATS after a warm-up.
PROBE_ROWS, PROBE_WIDTH, PROBE_REPEATS = 4096, 256, 5


def cpu_has_native_bf16(cpuinfo: str | None = None) -> bool:
    """Whether the CPU's flags (Linux /proc/cpuinfo, or `cpuinfo`) include a native bf16 instruction set."""
    if cpuinfo is None:
        try:
            cpuinfo = Path("/proc/cpuinfo").read_text()
        except OSError:
            return False
    for line in cpuinfo.splitlines():
        if line.startswith("flags"):
            return bool(_NATIVE_BF16_FLAGS & set(line.partition(":")[2].split()))
    return False


def probe_seconds(repeats: int = PROBE_REPEATS) -> tuple[float, float]:
    """Best wall times (float32, bf16 autocast) of one hidden layer's forward and backward on the CPU.

    The two take turns, after a warm-up pass of each, so that a busy or throttling CPU slows both alike.
    """
    with torch.random.fork_rng(devices=[]):  # the probe's layer must not move a seeded run's random stream
        torch.manual_seed(0)
        layer = torch.nn.Linear(PROBE_WIDTH, PROBE_WIDTH)
        x = torch.randn(PROBE_ROWS, PROBE_WIDTH)
    best = {None: float("inf"), torch.bfloat16: float("inf")}
    for i in range(repeats + 1):  # round 0 warms the kernels up and is not counted
        for dtype in best:
            start = time.perf_counter()
            with torch.autocast("cpu", dtype=dtype or torch.bfloat16, enabled=dtype is not None):
                y = torch.nn.functional.elu(layer(x))
            y.float().sum().backward()
            if i:
                best[dtype] = min(best[dtype], time.perf_counter() - start)
    return best[None], best[torch.bfloat16]


def bf16_pays(fp32_seconds: float, bf16_seconds: float) -> bool:
    """Whether bf16's time beats float32's by at least BF16_MIN_SPEEDUP."""
    return bf16_seconds * BF16_MIN_SPEEDUP <= fp32_seconds


@functools.cache
def bf16_faster_here() -> bool:
    """Whether this CPU has native bf16 and a hidden layer runs clearly faster in it (timed once per process)."""
    return cpu_has_native_bf16() and bf16_pays(*probe_seconds())


def resolve_precision(precision: str, device: torch.device, deterministic: bool = False) -> str:
    """`fp32` or `bf16` for training.precision on `device`: `auto` is bf16 on a CPU where bf16 measures faster.

    With `deterministic` (training.deterministic) `auto` is fp32: a timing must not decide what two runs compute.
    """
    if precision != "auto":
        return precision
    return "bf16" if device.type == "cpu" and not deterministic and bf16_faster_here() else "fp32"
