"""The KL-adaptive learning-rate rule at and around its band edges and bounds."""

from __future__ import annotations

import pytest

from learner.lr_schedule import adaptive_lr

BAND = {"desired_kl": 0.01, "kl_factor": 1.2, "lr_factor": 1.1}


def test_decreases_when_kl_too_high():
    """KL above desired * kl_factor divides lr by lr_factor."""
    assert adaptive_lr(1e-3, 0.013, **BAND) == pytest.approx(1e-3 / 1.1)


def test_increases_when_kl_too_low():
    """KL below desired / kl_factor multiplies lr by lr_factor."""
    assert adaptive_lr(1e-3, 0.008, **BAND) == pytest.approx(1e-3 * 1.1)


@pytest.mark.parametrize("kl", [0.0085, 0.01, 0.0119, 0.012, 0.01 / 1.2, 0.0])
def test_unchanged_inside_band_and_at_zero(kl):
    """KL within [desired / kl_factor, desired * kl_factor], or exactly 0, leaves lr unchanged."""
    assert adaptive_lr(1e-3, kl, **BAND) == 1e-3


def test_floor():
    """Decreasing never goes below lr_min (default 1e-5)."""
    assert adaptive_lr(1.05e-5, 1.0, **BAND) == 1e-5
    assert adaptive_lr(1e-3, 1.0, **BAND, lr_min=9.5e-4) == 9.5e-4


def test_cap():
    """Increasing never goes above lr_max (default 1e-2)."""
    assert adaptive_lr(9.5e-3, 1e-4, **BAND) == 1e-2
    assert adaptive_lr(1e-3, 1e-4, **BAND, lr_max=1.05e-3) == 1.05e-3
