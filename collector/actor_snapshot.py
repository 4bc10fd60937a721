"""The collector's action sampler: the actor of one weight version, frozen into plain tensors.

Why not `ActorCritic.act`: through the training modules one sampling call is
about 25 small tensor ops (the normaliser's arithmetic, autocast casting every
weight again, the log-density recomputed from the drawn actions).  The
collector's main thread runs it for every env group at every step, on cores
its physics threads keep busy, where each op costs more than on an idle core,
the more so the smaller the actor, whose ops are then mostly dispatch (see
BENCHMARKS.md, section "The collector's frozen actor").  The snapshot does the
same arithmetic in about a dozen ops: the normaliser as a shift and a scale,
the hidden weights cast to the inference dtype once per weight version, and the
log-probability from the standard-normal draw itself.  Every op writes into
buffers kept per batch size, so a step allocates nothing.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import nn

from common.policy import HALF_LOG_2PI, ActorCritic


def inplace_activation(module: nn.Module) -> Callable[[torch.Tensor], torch.Tensor]:
    """The in-place form of an activation module (the module itself where torch has none)."""
    if isinstance(module, nn.ReLU):
        return torch.relu_
    if isinstance(module, nn.ELU):
        return lambda x: F.elu_(x, module.alpha)
    if isinstance(module, nn.Tanh):
        return torch.tanh_
    if isinstance(module, nn.SELU):
        return torch.selu_
    if isinstance(module, nn.LeakyReLU):
        return lambda x: F.leaky_relu_(x, module.negative_slope)
    return module


class ActorSnapshot:
    """The collector's action sampler: `sample(obs)` is `policy.act(obs, hidden_dtype)` as of the last `refresh()`.

    Same random numbers (mu + std * a standard-normal draw of mu's shape), same
    hidden-layer dtype and float32 head as `act`.  The log-probability uses the
    draw z directly, -|z|^2 / 2 - sum(log_std) - A log(2 pi) / 2, where `act`
    recovers z as (a - mu) / std up to float rounding.

    The returned tensors are the snapshot's buffers for that batch size: they hold
    until the next `sample` of the same size, so use or copy them before it.
    """

    def __init__(self, policy: ActorCritic, hidden_dtype: torch.dtype | None):
        self.policy = policy
        self.hidden_dtype = hidden_dtype
        self._buffers: dict[int, dict[str, torch.Tensor]] = {}
        self.refresh()

    @torch.no_grad()
    def refresh(self) -> None:
        """Take the policy's current weights (call after every load)."""
        p, norm = self.policy, self.policy.obs_normalizer
        self.normalize = norm.enabled
        self.encode = norm.encode if norm.angles else None  # sine and cosine of any angle columns, first
        self.shift = norm.mean.clone()
        self.scale = torch.rsqrt(norm.var + norm.eps)
        self.clip = norm.clip
        dtype = self.hidden_dtype or torch.float32
        *hidden, head = p.actor
        # (bias, weight^T, activation) per hidden layer; the weights' transposes are views for addmm.
        self.hidden = [
            (lin.bias.to(dtype, copy=True), lin.weight.to(dtype, copy=True).t(), inplace_activation(activation))
            for lin, activation in zip(hidden[::2], hidden[1::2], strict=True)
        ]
        self.head = (head.bias.clone(), head.weight.clone().t())
        self.std = p.log_std.exp()
        self.log_norm = float(p.log_std.sum()) + p.act_dim * HALF_LOG_2PI

    @torch.no_grad()
    def sample(self, obs: torch.Tensor, draws: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """Actions [B, A] and their log-probs [B] (float32) for observations [B, obs_dim]; `draws` [B, A] are the
        standard-normal numbers to use (None: drawn from torch's default generator)."""
        buf = self._buffers.get(obs.shape[0]) or self._allocate(obs)
        x = obs if self.encode is None else self.encode(obs)
        if self.normalize:
            x = torch.sub(x, self.shift, out=buf["norm"]).mul_(self.scale).clamp_(-self.clip, self.clip)
        if self.hidden_dtype is not None:
            x = buf["cast"].copy_(x)
        for (bias, weight_t, activation), h in zip(self.hidden, buf["hidden"], strict=True):
            x = activation(torch.addmm(bias, x, weight_t, out=h))
        if self.hidden_dtype is not None:
            x = buf["features"].copy_(x)
        bias, weight_t = self.head
        mu = torch.addmm(bias, x, weight_t, out=buf["mu"])
        z = buf["z"].normal_() if draws is None else buf["z"].copy_(draws)
        actions = torch.addcmul(mu, z, self.std, out=buf["actions"])
        log_probs = torch.sum(z.square_(), -1, out=buf["log_probs"]).mul_(-0.5).sub_(self.log_norm)
        return actions, log_probs

    def _allocate(self, obs: torch.Tensor) -> dict[str, torch.Tensor]:
        """The buffers of one batch size (each group of a collector has its own size, fixed for its life)."""
        n, dtype = obs.shape[0], self.hidden_dtype or torch.float32
        widths = [weight_t.shape[1] for _, weight_t, _ in self.hidden]

        def empty(cols: int, dt: torch.dtype = torch.float32) -> torch.Tensor:
            return torch.empty(n, cols, dtype=dt, device=obs.device)

        act_dim, inputs = self.head[1].shape[1], self.shift.shape[0]  # the network's inputs (angles encoded)
        buf = {"norm": empty(inputs), "cast": empty(inputs, dtype),
               "hidden": [empty(w, dtype) for w in widths], "features": empty(widths[-1] if widths else inputs),
               "mu": empty(act_dim), "z": empty(act_dim), "actions": empty(act_dim),
               "log_probs": torch.empty(n, device=obs.device)}
        self._buffers[n] = buf
        return buf
