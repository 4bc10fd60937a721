"""The collector's policy in float32 NumPy, needing no torch: NumpyActor for actions, the critic for timeouts."""

from __future__ import annotations

import numpy as np

from collector.numpy_actor import NumpyActor
from collector.numpy_mlp import NumpyMLP, NumpyNormalizer
from common.config import AppoConfig
from common.task_spec import TaskSpec
from common.weight_layout import layout_for


class NumpyInference:
    """PolicyInference in float32 NumPy on the CPU, from the flat weights (training.precision does not apply).

    Samples nothing before the first `load`: there is no torch to initialise a policy with."""

    name = "numpy"

    def __init__(self, cfg: AppoConfig, task: TaskSpec, seed: int):
        policy, normalize = cfg.algo.policy, cfg.algo.empirical_normalization
        self.layout = layout_for(cfg, task)
        self.actor = NumpyActor(self.layout, policy.activation, normalize, np.random.default_rng(seed))
        self.critic_normalizer = NumpyNormalizer(normalize, self.layout.critic_angles)
        self.critic = NumpyMLP(policy.activation)

    def load(self, flat: np.ndarray) -> None:
        flat = np.asarray(flat, np.float32)
        self.actor.load(flat)
        tensors = self.layout.split(flat)
        self.critic_normalizer.load(tensors["critic_normalizer.mean"], tensors["critic_normalizer.var"])
        self.critic.load(self.layout.linear_layers(tensors, "critic"))

    def sample(self, obs: np.ndarray, z: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
        return self.actor.sample(obs, z)

    def value(self, critic_obs: np.ndarray) -> np.ndarray:
        if not self.actor.loaded:
            raise RuntimeError("NumpyInference has no weights yet: load() the learner's flat weights first")
        return self.critic(self.critic_normalizer(critic_obs))[:, 0]

    def seed(self, seed: int) -> None:
        self.actor.rng = np.random.default_rng(seed)
