"""training.precision=auto: bf16 exactly where the CPU multiplies bf16 natively."""

from __future__ import annotations

import torch

from common.precision import HIDDEN_DTYPES, cpu_has_native_bf16, resolve_precision

ZEN4 = "processor\t: 0\nflags\t\t: fpu sse2 avx2 avx512f avx512_bf16 avx512_vnni\n"
SAPPHIRE_RAPIDS = "flags\t\t: avx512f amx_bf16 amx_tile amx_int8\n"
SKYLAKE = "flags\t\t: fpu sse2 avx2 avx512f avx512bw avx512vl\n"


def test_native_bf16_is_read_from_the_cpu_flags():
    """avx512_bf16 or amx_bf16 in the flags line means native bf16; AVX-512 alone (emulated bf16) does not."""
    assert cpu_has_native_bf16(ZEN4) and cpu_has_native_bf16(SAPPHIRE_RAPIDS)
    assert not cpu_has_native_bf16(SKYLAKE)
    assert not cpu_has_native_bf16("model name\t: avx512_bf16 in a name, not a flag\n")
    assert not cpu_has_native_bf16("")


def test_auto_is_bf16_only_on_a_native_bf16_cpu():
    """auto resolves to bf16 on such a CPU device and to fp32 on a GPU; explicit values are kept."""
    expected = "bf16" if cpu_has_native_bf16() else "fp32"
    assert resolve_precision("auto", torch.device("cpu")) == expected
    assert resolve_precision("auto", torch.device("cuda")) == "fp32"
    assert resolve_precision("fp32", torch.device("cpu")) == "fp32"
    assert resolve_precision("bf16", torch.device("cuda")) == "bf16"
    assert {"fp32": None, "bf16": torch.bfloat16} == HIDDEN_DTYPES
