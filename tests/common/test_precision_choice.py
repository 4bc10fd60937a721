"""training.precision=auto: bf16 exactly where the CPU multiplies bf16 natively and a timed layer runs faster in it."""

from __future__ import annotations

import math

import pytest
import torch

from common import precision
from common.precision import HIDDEN_DTYPES, bf16_pays, cpu_has_native_bf16, probe_seconds, resolve_precision

ZEN4 = "processor\t: 0\nflags\t\t: fpu sse2 avx2 avx512f avx512_bf16 avx512_vnni\n"
SAPPHIRE_RAPIDS = "flags\t\t: avx512f amx_bf16 amx_tile amx_int8\n"
SKYLAKE = "flags\t\t: fpu sse2 avx2 avx512f avx512bw avx512vl\n"


@pytest.fixture
def fresh_probe():
    """The once-per-process answer forgotten before and after the test, so that patched timings apply."""
    precision.bf16_faster_here.cache_clear()
    yield
    precision.bf16_faster_here.cache_clear()


def test_native_bf16_is_read_from_the_cpu_flags():
    """avx512_bf16 or amx_bf16 in the flags line means native bf16; AVX-512 alone (emulated bf16) does not."""
    assert cpu_has_native_bf16(ZEN4) and cpu_has_native_bf16(SAPPHIRE_RAPIDS)
    assert not cpu_has_native_bf16(SKYLAKE)
    assert not cpu_has_native_bf16("model name\t: avx512_bf16 in a name, not a flag\n")
    assert not cpu_has_native_bf16("")


def test_bf16_must_win_clearly():
    """bf16 is taken at 1.15x float32's speed or more; a near tie or a loss keeps float32."""
    assert bf16_pays(1.0, 0.5) and bf16_pays(1.15, 1.0)
    assert not bf16_pays(1.0, 0.9) and not bf16_pays(1.0, 1.5)


def test_probe_times_both_precisions():
    """The probe really runs the layer both ways: two positive, finite times."""
    fp32, bf16 = probe_seconds(repeats=1)
    assert 0 < fp32 < math.inf and 0 < bf16 < math.inf


def test_auto_follows_the_probe_on_this_cpu(fresh_probe):
    """auto on this machine's CPU is what its flags and its own timing say, the same on every call; fp32 on a GPU."""
    first = resolve_precision("auto", torch.device("cpu"))
    assert first == ("bf16" if precision.bf16_faster_here() else "fp32")
    assert resolve_precision("auto", torch.device("cpu")) == first
    assert resolve_precision("auto", torch.device("cuda")) == "fp32"
    assert resolve_precision("fp32", torch.device("cpu")) == "fp32"
    assert resolve_precision("bf16", torch.device("cuda")) == "bf16"
    assert {"fp32": None, "bf16": torch.bfloat16} == HIDDEN_DTYPES


@pytest.mark.parametrize(("flags", "times", "expected"), [
    (True, (1.0, 0.5), "bf16"),   # native and measured twice as fast (the Zen 4 case)
    (True, (1.0, 1.5), "fp32"),   # native, yet slower (an Intel Xeon with avx512_bf16 and no AMX)
    (False, None, "fp32"),        # no native bf16: not even timed
])
def test_auto_takes_bf16_only_where_it_measures_faster(monkeypatch, fresh_probe, flags, times, expected):
    """A CPU whose flags promise bf16 still gets float32 where the layer ran slower in bf16."""
    def timed():
        assert times is not None, "a CPU without native bf16 must not be probed"
        return times

    monkeypatch.setattr(precision, "cpu_has_native_bf16", lambda: flags)
    monkeypatch.setattr(precision, "probe_seconds", timed)
    assert resolve_precision("auto", torch.device("cpu")) == expected


def test_deterministic_runs_never_let_a_timing_choose(monkeypatch, fresh_probe):
    """With training.deterministic, auto is fp32 without probing, even where bf16 would measure faster."""
    monkeypatch.setattr(precision, "cpu_has_native_bf16", lambda: True)
    monkeypatch.setattr(precision, "probe_seconds", lambda: pytest.fail("a deterministic run was probed"))
    assert resolve_precision("auto", torch.device("cpu"), deterministic=True) == "fp32"
    assert resolve_precision("bf16", torch.device("cpu"), deterministic=True) == "bf16"
