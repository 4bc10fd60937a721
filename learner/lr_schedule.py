"""KL-adaptive learning rate (rsl_rl's schedule): shrink when a policy update overshoots, grow when it barely moves."""

from __future__ import annotations

import torch


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


def adaptive_lr_(
    lr: torch.Tensor,
    kl: torch.Tensor,
    desired_kl: float,
    kl_factor: float,
    lr_factor: float,
    lr_min: float = 1e-5,
    lr_max: float = 1e-2,
) -> torch.Tensor:
    """`adaptive_lr` on device, in place: `lr` (0-dim) becomes the next rate given the 0-dim `kl`.

    No host synchronisation. With a float64 `lr` the sequence of rates equals the float rule's
    bit for bit: the KL is compared in float64, as Python compares kl.item().
    """
    kl = kl.detach().to(lr.dtype)
    down = torch.clamp(lr / lr_factor, min=lr_min)
    up = torch.clamp(lr * lr_factor, max=lr_max)
    grow = (kl > 0.0) & (kl < desired_kl / kl_factor)
    return lr.copy_(torch.where(kl > desired_kl * kl_factor, down, torch.where(grow, up, lr)))
