"""Checkpoints in the learner's own format, for tests of the tools that read them."""

from __future__ import annotations

from pathlib import Path

import torch

from common.config import load_config
from common.policy import ActorCritic
from common.task_plugins import resolve_task_spec
from learner.checkpoint import save_checkpoint

SMALL = ["algo.policy.actor_hidden_dims=[32,32]", "algo.policy.critic_hidden_dims=[32,32]"]


def write_checkpoint(path: Path, task: str, iteration: int = 5, seed: int = 0, *overrides: str) -> ActorCritic:
    """A checkpoint as Learner.save() writes it, with non-trivial normaliser statistics."""
    cfg = load_config([f"task={task}", *SMALL, *overrides])
    torch.manual_seed(seed)
    model = ActorCritic.from_config(cfg, resolve_task_spec(task))
    dim = model.obs_normalizer.mean.numel()
    model.obs_normalizer.mean.copy_(torch.linspace(-0.5, 0.5, dim))
    model.obs_normalizer.var.copy_(torch.linspace(0.5, 2.0, dim))
    model.obs_normalizer.count.fill_(1000.0)
    optimizer = torch.optim.Adam(model.parameters())
    state = {
        "appo": {"model": model.state_dict(), "target": model.state_dict(), "optimizer": optimizer.state_dict(),
                 "learning_rate": 1e-3, "num_updates": iteration},
        "iteration": iteration, "policy_version": iteration + 1, "total_env_steps": 1000,
        "best_mean_reward": None, "config": cfg.to_dict(), "task": task,
    }
    save_checkpoint(state, path)  # the learner's writer: atomic, with the integrity digest
    return model.eval()
