"""The collector's policy in torch: ActorCritic loaded from the flat weights, sampled through its ActorSnapshot."""

from __future__ import annotations

import numpy as np
import torch

from collector.actor_snapshot import ActorSnapshot
from common.config import AppoConfig
from common.policy import ActorCritic, load_flat_weights
from common.precision import HIDDEN_DTYPES, resolve_precision
from common.task_spec import TaskSpec


class TorchInference:
    """PolicyInference with torch on training.collector_device, hidden layers in training.precision."""

    name = "torch"

    def __init__(self, cfg: AppoConfig, task: TaskSpec, seed: int):
        self.device = torch.device(cfg.training.collector_device)
        self.policy = ActorCritic.from_config(cfg, task).to(self.device).eval()
        # Inference is most of the main thread's work per step (bf16 cuts it where the CPU runs bf16 faster).
        training = cfg.training
        self.hidden_dtype = HIDDEN_DTYPES[resolve_precision(training.precision, self.device, training.deterministic)]
        self.actor = ActorSnapshot(self.policy, self.hidden_dtype)
        self.seed(seed)

    def load(self, flat: np.ndarray) -> None:
        load_flat_weights(self.policy, flat)
        self.actor.refresh()

    @torch.no_grad()
    def sample(self, obs: np.ndarray, z: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
        draws = None if z is None else torch.from_numpy(z).to(self.device)
        actions, log_probs = self.actor.sample(torch.from_numpy(obs).to(self.device), draws)
        return actions.cpu().numpy(), log_probs.cpu().numpy()

    @torch.no_grad()
    def value(self, critic_obs: np.ndarray) -> np.ndarray:
        return self.policy.value(torch.from_numpy(critic_obs).to(self.device)).cpu().numpy()

    def seed(self, seed: int) -> None:
        # The snapshot draws from torch's default generator.
        torch.manual_seed(seed)
