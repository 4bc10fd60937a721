"""A checkpoint of the seed's APPO trainer (UniLab 1.5.2, `model_<it>.pt`) as a policy for appo-eval's episode loop.

Its actor is an MLP (rsl_rl's MLPModel: Linear layers with ELU between them, no observation normaliser in the seed's
APPO settings) whose output is the action mean; the file is read with weights_only=True and each layer's shape
checked, so a file of another kind or task is refused with what does not fit.
"""

from __future__ import annotations

import pickle
from pathlib import Path

import torch
from torch import nn


class SeedPolicyError(ValueError):
    """A file that is not a seed APPO checkpoint for the env at hand; the message says what does not fit."""


class SeedActor:
    """The seed's actor as tools/eval.run_episodes drives a policy: the mean action."""

    def __init__(self, mlp: nn.Sequential):
        self.mlp = mlp.eval()

    @torch.no_grad()
    def act_deterministic(self, obs: torch.Tensor) -> torch.Tensor:
        return self.mlp(obs)


def load_seed_actor(path: str | Path, obs_dim: int, act_dim: int) -> SeedActor:
    """The actor of a seed checkpoint, checked against the env's observation and action widths."""
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
        weights = state["actor"]
    except (OSError, RuntimeError, KeyError, TypeError, pickle.UnpicklingError) as exc:
        raise SeedPolicyError(f"{path}: not a seed APPO checkpoint ({type(exc).__name__}: {exc})") from None
    layers = sorted({int(k.split(".")[1]) for k in weights if k.startswith("mlp.") and k.endswith(".weight")})
    if not layers:
        raise SeedPolicyError(f"{path}: its actor has no mlp.<i>.weight layers")
    modules: list[nn.Module] = []
    for n, i in enumerate(layers):
        w, b = weights[f"mlp.{i}.weight"], weights[f"mlp.{i}.bias"]
        linear = nn.Linear(w.shape[1], w.shape[0])
        linear.weight.data.copy_(w)
        linear.bias.data.copy_(b)
        modules.append(linear)
        if n < len(layers) - 1:
            modules.append(nn.ELU())
    first, last = modules[0], modules[-1]
    if first.in_features != obs_dim or last.out_features != act_dim:
        raise SeedPolicyError(f"{path}: its actor maps {first.in_features} observations to {last.out_features} "
                              f"actions; the env has {obs_dim} and {act_dim}")
    return SeedActor(nn.Sequential(*modules))


def evaluate_seed(path: str | Path, task: str, episodes: int) -> dict:
    """appo-eval's figures of a seed checkpoint in this project's env of `task` (play settings, env seed 0)."""
    from benchmarks.appo_run import eval_figures
    from collector.envs import make_env
    from common.cores import usable_cores
    from tools import eval as appo_eval

    env = make_env(task, episodes, usable_cores(), 0)
    try:
        actor = load_seed_actor(path, env.spec.obs_dim, env.spec.act_dim)
        appo_eval.use_play_settings(env)
        results = appo_eval.run_episodes(env, actor, episodes)
    finally:
        env.close()
    return {"task": task, "checkpoint": str(path), "num_envs": episodes, "seed": 0, **eval_figures(results.figures())}
