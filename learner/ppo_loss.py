"""The parts of the APPO minibatch loss: IMPACT-style clipped surrogate (Luo et al. 2020), value and entropy
terms, Gaussian KL; learner/appo.py composes them (docs/design.md#the-ppo-loss).

Per-sample tensors are [B]; log-probs are already summed over action dims. Every
function returns tensors (no .item()) so the caller syncs with the device once per update.
"""

from __future__ import annotations

import torch

# The log-density lives with the policy, which samples with it in the collectors.
from common.policy import HALF_LOG_2PI


def _same_shape(a: torch.Tensor, b: torch.Tensor, what: str) -> None:
    # [B, 1] against [B] would silently broadcast to [B, B] and still train, badly.
    if a.shape != b.shape:
        raise ValueError(f"{what}: shapes {tuple(a.shape)} and {tuple(b.shape)} differ")


def impact_ratio(
    log_probs: torch.Tensor, behavior_log_probs: torch.Tensor, target_log_probs: torch.Tensor
) -> torch.Tensor:
    """min(1, exp(b - p)) * exp(log pi - b): the current/behaviour ratio, truncated towards the target."""
    b = behavior_log_probs.detach()
    p = target_log_probs.detach()
    # min(1, e^(b-p)) * e^(lp-b) == e^(lp - max(b, p)); one exp cannot overflow where the product would.
    return torch.exp(log_probs - torch.maximum(b, p))


def surrogate_loss(
    advantages: torch.Tensor, ratio: torch.Tensor, clip_param: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """Pessimistic clipped surrogate (to minimise) and the fraction of samples outside the clip range."""
    _same_shape(advantages, ratio, "surrogate_loss")
    advantages = advantages.detach()
    unclipped = -advantages * ratio
    clipped = -advantages * ratio.clamp(1.0 - clip_param, 1.0 + clip_param)
    loss = torch.maximum(unclipped, clipped).mean()
    clip_fraction = ((ratio.detach() - 1.0).abs() > clip_param).to(ratio.dtype).mean()
    return loss, clip_fraction


def value_loss(
    values: torch.Tensor, old_values: torch.Tensor, returns: torch.Tensor, clip_param: float, use_clipped: bool
) -> torch.Tensor:
    """Squared error to the V-trace targets; with use_clipped, the worse of raw and old-value-clipped (rsl_rl)."""
    _same_shape(values, returns, "value_loss")
    returns = returns.detach()
    errors = (values - returns).square()
    if not use_clipped:
        return errors.mean()
    _same_shape(values, old_values, "value_loss")
    old_values = old_values.detach()
    clipped = old_values + (values - old_values).clamp(-clip_param, clip_param)
    return torch.maximum(errors, (clipped - returns).square()).mean()


def gaussian_kl(mu0: torch.Tensor, sigma0: torch.Tensor, mu1: torch.Tensor, sigma1: torch.Tensor) -> torch.Tensor:
    """KL(N(mu0, sigma0) || N(mu1, sigma1)) of diagonal Gaussians, summed over the last dim."""
    kl = torch.log(sigma1 / sigma0) + (sigma0.square() + (mu0 - mu1).square()) / (2.0 * sigma1.square()) - 0.5
    return kl.sum(dim=-1)


def gaussian_entropy(log_std: torch.Tensor) -> torch.Tensor:
    """Entropy of a diagonal Gaussian with std exp(log_std) [A], summed over dims.

    With a state-independent std it is the same for every sample, so it equals the
    batch mean of Normal(mu, std).entropy().sum(-1) (and its gradient) for any batch.
    """
    return log_std.sum() + log_std.shape[-1] * (0.5 + HALF_LOG_2PI)
