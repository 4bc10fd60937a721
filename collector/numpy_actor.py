"""The collector's action sampler in float32 NumPy, read straight from the learner's flat weight vector.

It does ActorSnapshot.sample's arithmetic (collector/actor_snapshot.py) without
torch: normalise, the actor MLP, then actions = mu + std * z with z a standard
normal draw, and log-probs from z itself.  NumPy has no bfloat16, so every layer
runs in float32 whatever training.precision says.
"""

from __future__ import annotations

import math

import numpy as np

from collector.numpy_mlp import NumpyMLP, NumpyNormalizer
from common.weight_layout import WeightLayout

_HALF_LOG_2PI = 0.5 * math.log(2.0 * math.pi)


class NumpyActor:
    """`sample(obs)` draws from the Gaussian policy of the last `load(flat)`, as ActorCritic.act does in float32.

    The returned arrays are this actor's buffers: they hold until the next
    `sample`, so use or copy them before it.
    """

    def __init__(self, layout: WeightLayout, activation: str, normalize: bool, rng: np.random.Generator):
        self.layout = layout
        self.rng = rng
        self.normalizer = NumpyNormalizer(normalize, layout.obs_angles)
        self.mlp = NumpyMLP(activation)
        self.std = self.log_norm = None
        # Sampling buffers, grown to the largest batch seen (each env group samples a fixed size).
        self._z = self._actions = np.empty((0, 0), np.float32)
        self._log_probs = np.empty(0, np.float32)

    @property
    def loaded(self) -> bool:
        return self.std is not None

    def load(self, flat: np.ndarray) -> None:
        """Take the actor's part of a flat weight vector (the learner's `flat_weights` order); copies what it keeps."""
        tensors = self.layout.split(np.asarray(flat, np.float32))
        self.normalizer.load(tensors["obs_normalizer.mean"], tensors["obs_normalizer.var"])
        self.mlp.load(self.layout.linear_layers(tensors, "actor"))
        log_std = tensors["log_std"]
        self.std = np.exp(log_std)
        # log N(mu + std z; mu, std) = -|z|^2 / 2 - (sum(log_std) + A log(2 pi) / 2): the constant, once per version.
        self.log_norm = float(log_std.sum()) + log_std.shape[0] * _HALF_LOG_2PI

    def mean(self, obs: np.ndarray) -> np.ndarray:
        """Action means [B, A] of observations [B, obs_dim] (a view of the MLP's buffer)."""
        if not self.loaded:
            raise RuntimeError("NumpyActor has no weights yet: load() the learner's flat weights first")
        return self.mlp(self.normalizer(obs))

    def sample(self, obs: np.ndarray, draws: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
        """Actions [B, A] and their log-probs [B] (float32) for observations [B, obs_dim]; `draws` [B, A] are the
        standard-normal numbers to use (None: drawn from this actor's generator)."""
        mu = self.mean(obs)
        n = mu.shape[0]
        if n > self._log_probs.shape[0]:
            self._z, self._actions = np.empty_like(mu), np.empty_like(mu)
            self._log_probs = np.empty(n, np.float32)
        z, actions, log_probs = self._z[:n], self._actions[:n], self._log_probs[:n]
        if draws is None:
            self.rng.standard_normal(dtype=np.float32, out=z)
        else:
            z[:] = draws
        np.multiply(z, self.std, out=actions)
        actions += mu
        np.square(z, out=z)
        np.sum(z, axis=1, out=log_probs)
        log_probs *= np.float32(-0.5)
        log_probs -= np.float32(self.log_norm)
        return actions, log_probs
