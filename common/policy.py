"""The Gaussian MLP actor-critic shared by learner (training) and collectors (inference).

Weights travel as one flat float32 vector (`flat_weights` / `load_flat_weights`)
holding every parameter and the observation-normalizer statistics, in
state_dict order, so a collector rebuilt from the same config reads them
without any per-tensor framing.  common/weight_layout.py states that order
without torch (for collectors that infer with NumPy); `ActorCritic` checks
that it agrees.
"""

from __future__ import annotations

import math

import numpy as np
import torch
from torch import nn
from torch.distributions import Normal

from common.config import AppoConfig, PolicyConfig
from common.task_spec import TaskSpec
from common.weight_layout import NORMALIZER_CLIP, NORMALIZER_EPS, input_angles, weight_layout

HALF_LOG_2PI = 0.5 * math.log(2.0 * math.pi)
_ACTIVATIONS = {"elu": nn.ELU, "relu": nn.ReLU, "tanh": nn.Tanh, "selu": nn.SELU, "leaky_relu": nn.LeakyReLU}


def mlp(in_dim: int, hidden: list[int], out_dim: int, activation: str) -> nn.Sequential:
    layers: list[nn.Module] = []
    for width in hidden:
        layers += [nn.Linear(in_dim, width), _ACTIVATIONS[activation]()]
        in_dim = width
    layers.append(nn.Linear(in_dim, out_dim))
    return nn.Sequential(*layers)


def mlp_forward(net: nn.Sequential, x: torch.Tensor, hidden_dtype: torch.dtype | None = None) -> torch.Tensor:
    """`net(x)`, with every layer but the last under autocast to `hidden_dtype` when given.

    The output layer always runs in float32 on float32 features: action means and
    values (tens, for returns) keep float32 precision for the log-probs, KL, value
    loss and V-trace built on them, while the hidden layers, nearly all of the work,
    run in the low-precision dtype.  Autocast casts the float32 parameters on the
    fly, so weights, gradients and optimizer state stay float32.  Its state is
    per thread: this must run on the thread doing the pass, as it does here.
    """
    if hidden_dtype is None:
        return net(x)
    *hidden, head = net
    with torch.autocast(device_type=x.device.type, dtype=hidden_dtype):
        for layer in hidden:
            x = layer(x)
    with torch.autocast(device_type=x.device.type, enabled=False):  # also inside a caller's autocast
        return head(x.float())


def gaussian_log_prob(mu: torch.Tensor, log_std: torch.Tensor, actions: torch.Tensor) -> torch.Tensor:
    """log N(actions; mu, exp(log_std)) summed over the last dim, for a state-independent std [A].

    The same density as torch.distributions.Normal(mu, std).log_prob(actions).sum(-1), without
    expanding the std to the batch: the log-normaliser is one scalar per call.
    """
    z = (actions - mu) * torch.exp(-log_std)
    return -0.5 * z.square().sum(-1) - (log_std.sum() + mu.shape[-1] * HALF_LOG_2PI)


def encode_angles(x: torch.Tensor, mask: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
    """x [..., D] with each angle column (`mask` [D], `index` [k]) as its sine, and their cosines appended.

    The networks' view of a periodic observation: no jump where the angle wraps from 2 pi to 0.
    """
    return torch.cat([torch.where(mask, torch.sin(x), x), torch.cos(x.index_select(-1, index))], dim=-1)


class EmpiricalNormalizer(nn.Module):
    """Running mean/variance of observations (parallel Welford), after `encode_angles` of any angle columns;
    the statistics are identity until enabled."""

    def __init__(self, dim: int, enabled: bool, eps: float = NORMALIZER_EPS, clip: float = NORMALIZER_CLIP,
                 angles: tuple[int, ...] = ()):
        super().__init__()
        self.enabled = enabled
        self.eps = eps
        self.clip = clip
        self.in_dim = dim
        out_dim = dim + len(angles)
        self.register_buffer("mean", torch.zeros(out_dim))
        self.register_buffer("var", torch.ones(out_dim))
        self.register_buffer("count", torch.zeros((), dtype=torch.float64))
        # Not in the state_dict: the flat weight layout carries the columns itself (common/weight_layout.py).
        self.angles = tuple(angles)
        mask = torch.zeros(dim, dtype=torch.bool)
        mask[list(self.angles)] = True
        self.register_buffer("angle_mask", mask, persistent=False)
        self.register_buffer("angle_index", torch.tensor(self.angles, dtype=torch.long), persistent=False)

    def encode(self, x: torch.Tensor) -> torch.Tensor:
        """The network's input columns of raw observations [..., in_dim] (x itself without angle columns)."""
        return encode_angles(x, self.angle_mask, self.angle_index) if self.angles else x

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.encode(x)
        if not self.enabled:
            return x
        return ((x - self.mean) / torch.sqrt(self.var + self.eps)).clamp(-self.clip, self.clip)

    @torch.no_grad()
    def update(self, x: torch.Tensor) -> None:
        if not self.enabled:
            return
        x = self.encode(x.reshape(-1, x.shape[-1])).to(torch.float64)
        n = x.shape[0]
        if n == 0:
            return
        batch_mean = x.mean(0)
        batch_var = x.var(0, unbiased=False)
        total = self.count + n
        delta = batch_mean - self.mean.double()
        new_mean = self.mean.double() + delta * (n / total)
        m2 = self.var.double() * self.count + batch_var * n + delta.square() * self.count * n / total
        self.mean.copy_(new_mean.float())
        self.var.copy_((m2 / total).float())
        self.count.fill_(total.item())


def initial_log_std(act_dim: int, cfg: PolicyConfig) -> torch.Tensor:
    """log of init_noise_std per action dim [act_dim], with init_noise_std_by_action's dims in its place."""
    std = np.full(act_dim, cfg.init_noise_std)
    for index, value in cfg.init_noise_std_by_action.items():
        if index >= act_dim:
            raise ValueError(f"algo.policy.init_noise_std_by_action: index {index} is past the {act_dim} actions")
        std[index] = value
    return torch.as_tensor(np.log(std), dtype=torch.float32)


class ActorCritic(nn.Module):
    """Gaussian MLP actor and MLP critic with their observation normalisers and a state-independent log_std."""

    def __init__(self, obs_dim: int, critic_dim: int, act_dim: int, cfg: PolicyConfig, normalize: bool,
                 obs_angles: tuple[int, ...] = (), critic_angles: tuple[int, ...] = ()):
        super().__init__()
        self.act_dim = act_dim
        self.obs_normalizer = EmpiricalNormalizer(obs_dim, normalize, angles=obs_angles)
        self.critic_normalizer = EmpiricalNormalizer(critic_dim, normalize, angles=critic_angles)
        self.actor = mlp(obs_dim + len(obs_angles), cfg.actor_hidden_dims, act_dim, cfg.activation)
        self.critic = mlp(critic_dim + len(critic_angles), cfg.critic_hidden_dims, 1, cfg.activation)
        self.log_std = nn.Parameter(initial_log_std(act_dim, cfg))
        # A torch-free collector reads the flat weights by the layout: it must be this state_dict's.
        layout = weight_layout(obs_dim, critic_dim, act_dim, cfg, obs_angles, critic_angles).entries
        if tuple((k, tuple(t.shape)) for k, t in self.state_dict().items()) != layout:
            raise AssertionError("ActorCritic's state_dict disagrees with common/weight_layout.py")

    @classmethod
    def from_config(cls, cfg: AppoConfig, task: TaskSpec) -> ActorCritic:
        return cls(task.obs_dim, task.critic_dim, task.act_dim, cfg.algo.policy, cfg.algo.empirical_normalization,
                   *input_angles(cfg.algo.policy, task))

    def distribution(self, obs: torch.Tensor) -> Normal:
        mu = self.actor(self.obs_normalizer(obs))
        return Normal(mu, self.log_std.exp().expand_as(mu))

    def act(self, obs: torch.Tensor, hidden_dtype: torch.dtype | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """Sample actions and their log-probs (summed over action dims); hidden layers per `mlp_forward`.

        Draws the same numbers as `distribution(obs).sample()` (mu + std * standard normal), without
        the distribution object's per-call argument checks, which cost the collector's main thread.
        """
        mu = self.actor_mean(self.obs_normalizer(obs), hidden_dtype)
        actions = torch.normal(mu, self.log_std.exp().expand_as(mu))
        return actions, gaussian_log_prob(mu, self.log_std, actions)

    def act_deterministic(self, obs: torch.Tensor) -> torch.Tensor:
        return self.actor(self.obs_normalizer(obs))

    def value(self, critic_obs: torch.Tensor) -> torch.Tensor:
        return self.critic(self.critic_normalizer(critic_obs)).squeeze(-1)

    def actor_mean(self, norm_obs: torch.Tensor, hidden_dtype: torch.dtype | None = None) -> torch.Tensor:
        """Action means [B, act_dim] of already normalized observations (see `mlp_forward`)."""
        return mlp_forward(self.actor, norm_obs, hidden_dtype)

    def critic_value(self, norm_critic_obs: torch.Tensor, hidden_dtype: torch.dtype | None = None) -> torch.Tensor:
        """Values [B] of already normalized critic observations (see `mlp_forward`)."""
        return mlp_forward(self.critic, norm_critic_obs, hidden_dtype).squeeze(-1)


def flat_weights(model: nn.Module) -> np.ndarray:
    """Every float tensor of the state_dict, concatenated (float32)."""
    with torch.no_grad():
        parts = [t.detach().reshape(-1).to("cpu", torch.float32) for t in model.state_dict().values()]
        return torch.cat(parts).numpy()


def flat_weights_size(model: nn.Module) -> int:
    return sum(t.numel() for t in model.state_dict().values())


@torch.no_grad()
def load_flat_weights(model: nn.Module, flat: np.ndarray) -> None:
    expected = flat_weights_size(model)
    if flat.shape != (expected,):
        raise ValueError(f"weight vector has shape {flat.shape}, the network needs ({expected},)")
    src = torch.from_numpy(np.ascontiguousarray(flat, dtype=np.float32))
    offset = 0
    for t in model.state_dict().values():
        n = t.numel()
        t.copy_(src[offset : offset + n].view_as(t).to(t.dtype))
        offset += n
