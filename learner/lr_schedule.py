"""KL-adaptive learning rate (rsl_rl's schedule): shrink when a policy update overshoots, grow when it barely moves."""

from __future__ import annotations


def adaptive_lr(
    lr: float,
    kl: float,
    desired_kl: float,
    kl_factor: float,
    lr_factor: float,
    lr_min: float = 1e-5,
    lr_max: float = 1e-2,
) -> float:
    """The next learning rate given the mean KL(target || current) of the last update."""
    if kl > desired_kl * kl_factor:
        return max(lr_min, lr / lr_factor)
    # kl == 0 means nothing was measured (or nothing moved), not a reason to speed up.
    if 0.0 < kl < desired_kl / kl_factor:
        return min(lr_max, lr * lr_factor)
    return lr
