"""Checks of additive uniform observation noise, shared by the robot tasks' tests."""

import numpy as np


def assert_uniform_noise(diff: np.ndarray, slices: dict, bounds: dict[str, float]) -> None:
    """Each block of `diff` (noisy - clean) stays within +-bound, nearly fills it and is centred."""
    for name, bound in bounds.items():
        block = diff[:, slices[name]]
        assert np.abs(block).max() <= bound * (1 + 1e-5), name
        assert np.abs(block).max() > 0.98 * bound, name
        assert abs(block.mean()) < 0.1 * bound, name
