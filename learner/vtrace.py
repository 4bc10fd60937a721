"""V-trace off-policy value targets and advantages (Espeholt et al. 2018, IMPALA).

All tensors are time-major, [T, N]; `bootstrap_values` is V(x_T), [N]. `dones` is
1.0 where an episode ended at step t (terminated or truncated; the collector has
already folded gamma * V(final) into a truncated step's reward), so x_{t+1} then
belongs to the next episode and is masked out of step t's target.

The traces are c_t = lam * min(c_bar, rho_t), IMPALA's optional trace-cutting
lambda: with rho = 1 the targets vs are GAE(lam)'s lambda-returns, and lam = 1 is
the plain V-trace of the paper's main text.
"""

from __future__ import annotations

from typing import Literal

import torch

Advantage = Literal["impala", "gae"]


def _next(seq: torch.Tensor, bootstrap: torch.Tensor) -> torch.Tensor:
    """seq shifted one step forward in time, with `bootstrap` as the value after the last step."""
    return torch.cat([seq[1:], bootstrap.unsqueeze(0)], dim=0)


@torch.no_grad()
def vtrace(
    behavior_log_probs: torch.Tensor,
    target_log_probs: torch.Tensor,
    rewards: torch.Tensor,
    values: torch.Tensor,
    bootstrap_values: torch.Tensor,
    dones: torch.Tensor,
    gamma: float,
    clip_rho: float,
    clip_c: float,
    lam: float,
    advantage: Advantage = "impala",
) -> tuple[torch.Tensor, torch.Tensor]:
    """V-trace targets vs [T, N] and policy-gradient advantages [T, N] (unnormalized).

    advantage="impala": rho_bar_t * (r_t + gamma * vs_{t+1} - V(x_t)), the paper's;
    advantage="gae": vs_t - V(x_t), which with rho = 1 is GAE(lam)'s advantage.
    """
    values = values.detach()
    bootstrap_values = bootstrap_values.detach()
    rho = torch.exp(target_log_probs.detach() - behavior_log_probs.detach())
    rho_bar = rho.clamp(max=clip_rho)
    c = rho.clamp(max=clip_c)
    if lam != 1.0:  # skipped at 1 so that plain V-trace keeps its exact numbers
        c = c * lam
    discount = gamma * (1.0 - dones.to(values.dtype))

    deltas = rho_bar * (rewards + discount * _next(values, bootstrap_values) - values)
    # vs_t - V(x_t) accumulated backwards; the correction past the horizon is zero.  Everything
    # but this recursion is one elementwise op over [T, N]; each step of it is one fused op over
    # all N envs, written in place.
    decay = discount * c
    corrections = torch.empty_like(values)
    acc = torch.zeros_like(bootstrap_values)
    for t in range(values.shape[0] - 1, -1, -1):
        acc = torch.addcmul(deltas[t], decay[t], acc, out=corrections[t])
    vs = values + corrections

    if advantage == "gae":
        return vs, corrections.clone()
    advantages = rho_bar * (rewards + discount * _next(vs, bootstrap_values) - values)
    return vs, advantages


@torch.no_grad()
def vtrace_stats(
    behavior_log_probs: torch.Tensor, target_log_probs: torch.Tensor, clip_rho: float
) -> dict[str, torch.Tensor]:
    """How off-policy a batch is: importance-weight clipping rate, tail, and mean |log-prob gap|."""
    log_delta = (target_log_probs.detach() - behavior_log_probs.detach()).reshape(-1)
    rho = torch.exp(log_delta)
    # Nearest-rank percentile: kthvalue has no input-size cap (torch.quantile stops at 2^24).
    k = max(1, -(-99 * rho.numel() // 100))  # ceil(0.99 n) in exact integer arithmetic
    return {
        "rho_clip_fraction": (rho > clip_rho).float().mean(),
        "rho_p99": rho.kthvalue(k).values,
        "log_prob_delta_abs_mean": log_delta.abs().mean(),
    }
