"""The flat weight vector's layout, from the config and task alone: each tensor's name and shape, in order.

The learner publishes the actor-critic as one float32 vector (common/policy.py
`flat_weights`: every state_dict tensor, in state_dict order).  This module
states that order without torch, so a collector without torch can size its
transport and read the vector.  `ActorCritic` checks at construction that its
state_dict is exactly this layout, so the two cannot drift apart.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from common.config import AppoConfig, PolicyConfig
from common.task_spec import TaskSpec

# The observation normaliser's constants (common/policy.py EmpiricalNormalizer takes them as defaults).
NORMALIZER_EPS = 1e-8
NORMALIZER_CLIP = 10.0


@dataclass(frozen=True)
class WeightLayout:
    """Names and shapes of the flat weight vector's tensors, in the order they are concatenated."""

    entries: tuple[tuple[str, tuple[int, ...]], ...]
    actor_layers: int   # linear layers of the actor MLP (hidden layers + output layer)
    critic_layers: int
    # Raw observation columns the networks see as sine and cosine (`input_angles`); the normalisers and first
    # layers are that many columns wider than the raw observations.
    obs_angles: tuple[int, ...] = ()
    critic_angles: tuple[int, ...] = ()

    @property
    def size(self) -> int:
        """Float count of the whole vector."""
        return sum(math.prod(shape) for _, shape in self.entries)

    def split(self, flat: np.ndarray) -> dict[str, np.ndarray]:
        """The tensors of `flat` by name, as views of it (reshaped, no copy)."""
        if flat.shape != (self.size,):
            raise ValueError(f"weight vector has shape {flat.shape}, the network needs ({self.size},)")
        out, offset = {}, 0
        for name, shape in self.entries:
            n = math.prod(shape)
            out[name] = flat[offset:offset + n].reshape(shape)
            offset += n
        return out

    def linear_layers(self, tensors: dict[str, np.ndarray], net: str) -> list[tuple[np.ndarray, np.ndarray]]:
        """(weight [out, in], bias [out]) of each linear layer of `net` ("actor" or "critic"), input first."""
        count = self.actor_layers if net == "actor" else self.critic_layers
        # nn.Sequential numbers linear layers 0, 2, 4, ...: each hidden one is followed by its activation.
        return [(tensors[f"{net}.{2 * i}.weight"], tensors[f"{net}.{2 * i}.bias"]) for i in range(count)]


def _mlp_entries(net: str, in_dim: int, hidden: list[int], out_dim: int) -> list[tuple[str, tuple[int, ...]]]:
    widths = [*hidden, out_dim]
    entries = []
    for i, width in enumerate(widths):
        entries += [(f"{net}.{2 * i}.weight", (width, in_dim)), (f"{net}.{2 * i}.bias", (width,))]
        in_dim = width
    return entries


def weight_layout(obs_dim: int, critic_dim: int, act_dim: int, policy: PolicyConfig,
                  obs_angles: tuple[int, ...] = (), critic_angles: tuple[int, ...] = ()) -> WeightLayout:
    """The layout of ActorCritic(obs_dim, critic_dim, act_dim, policy, normalize=any, obs_angles, critic_angles).

    state_dict order: the root's own parameter (log_std) first, then each child
    module in the order `ActorCritic.__init__` assigns it.  The normalisers'
    statistics are in the vector whether or not normalisation is enabled.  Each
    angle column adds one network input (its cosine, after the raw columns).
    """
    obs_in, critic_in = obs_dim + len(obs_angles), critic_dim + len(critic_angles)
    entries: list[tuple[str, tuple[int, ...]]] = [("log_std", (act_dim,))]
    for norm, dim in (("obs_normalizer", obs_in), ("critic_normalizer", critic_in)):
        entries += [(f"{norm}.mean", (dim,)), (f"{norm}.var", (dim,)), (f"{norm}.count", ())]
    entries += _mlp_entries("actor", obs_in, policy.actor_hidden_dims, act_dim)
    entries += _mlp_entries("critic", critic_in, policy.critic_hidden_dims, 1)
    return WeightLayout(tuple(entries), len(policy.actor_hidden_dims) + 1, len(policy.critic_hidden_dims) + 1,
                        tuple(obs_angles), tuple(critic_angles))


def input_angles(policy: PolicyConfig, task: TaskSpec) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """(actor, critic) observation columns the networks see as sine and cosine: the task's angles with
    algo.policy.periodic_inputs, none without; a ValueError for a task that has none to give."""
    if not policy.periodic_inputs:
        return (), ()
    if not task.obs_angles:
        raise ValueError(f"algo.policy.periodic_inputs: task {task.name} has no angle observations")
    return task.obs_angles, task.critic_angles


def layout_for(cfg: AppoConfig, task: TaskSpec) -> WeightLayout:
    """The layout of the actor-critic the learner builds for `task` under `cfg`."""
    return weight_layout(task.obs_dim, task.critic_dim, task.act_dim, cfg.algo.policy,
                         *input_angles(cfg.algo.policy, task))
