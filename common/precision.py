"""The arithmetic of the policy's hidden layers (training.precision), resolved for a device.

The learner's update and the collectors' inference both read it.

bf16 pays where the matrix units multiply bfloat16 natively and the matmuls
dominate the update: on CPUs with avx512_bf16 or AMX, where bf16 matmuls run much
faster than fp32 ones (BENCHMARKS.md, section "Learner in bf16").  On a GPU
at the Go2 preset's sizes the update is bound by kernel launches, and bf16's casts
made it slower, so `auto` keeps float32 on GPUs (BENCHMARKS.md, the GPU host section).
"""

from __future__ import annotations

from pathlib import Path

import torch

# x86 /proc/cpuinfo flags of native bf16 dot products (AVX-512 BF16, AMX BF16 tiles).
_NATIVE_BF16_FLAGS = {"avx512_bf16", "amx_bf16"}
HIDDEN_DTYPES: dict[str, torch.dtype | None] = {"fp32": None, "bf16": torch.bfloat16}


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


def resolve_precision(precision: str, device: torch.device) -> str:
    """`fp32` or `bf16` for training.precision on `device`: `auto` is bf16 on a native-bf16 CPU, else fp32."""
    if precision != "auto":
        return precision
    return "bf16" if device.type == "cpu" and cpu_has_native_bf16() else "fp32"
