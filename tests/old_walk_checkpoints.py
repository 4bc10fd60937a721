"""Checkpoints of mjlab's G1 walker as appo wrote them before its rename g1_walk_flat -> g1_velocity_flat."""

from __future__ import annotations

from pathlib import Path

import torch

from common.checkpoint_io import DIGEST_KEY
from common.config import load_config
from common.policy import ActorCritic
from common.task_plugins import resolve_task_spec
from learner.checkpoint import save_checkpoint

OLD, NEW = "g1_walk_flat", "g1_velocity_flat"
SMALL = ["algo.policy.actor_hidden_dims=[32,32]", "algo.policy.critic_hidden_dims=[32,32]"]


def save_under_old_name(state: dict, path: Path) -> Path:
    """Write a g1_velocity_flat checkpoint's state with the learner's writer, its task named g1_walk_flat as before."""
    old = {k: v for k, v in state.items() if k != DIGEST_KEY}
    old["config"], old["task"] = {**state["config"], "task": OLD}, OLD
    return save_checkpoint(old, path)


def write_old_checkpoint(path: Path, iteration: int = 3) -> ActorCritic:
    """A walker checkpoint (g1_velocity_flat's sizes, the preset's mirror options) saved under the old name."""
    cfg = load_config([*SMALL], extra={"task": NEW}, environ={})
    torch.manual_seed(0)
    model = ActorCritic.from_config(cfg, resolve_task_spec(NEW))
    model.obs_normalizer.mean.copy_(torch.linspace(-0.5, 0.5, model.obs_normalizer.mean.numel()))
    optimizer = torch.optim.Adam(model.parameters())
    state = {
        "appo": {"model": model.state_dict(), "target": model.state_dict(), "optimizer": optimizer.state_dict(),
                 "learning_rate": 1e-3, "num_updates": iteration},
        "iteration": iteration, "policy_version": iteration + 1, "total_env_steps": 1000,
        "best_mean_reward": None, "config": cfg.to_dict(), "task": NEW,
    }
    save_under_old_name(state, path)
    return model.eval()


def write_old_run(log_root: Path, name: str = "run1") -> Path:
    """An old run directory, <log_root>/g1_walk_flat/<name>/ with model_3.pt and its config.yaml; the checkpoint."""
    run = log_root / OLD / name
    path = run / "model_3.pt"
    write_old_checkpoint(path)
    (run / "config.yaml").write_text(f"task: {OLD}\n")
    return path
