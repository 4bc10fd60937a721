"""benchmarks.walk_falls: the push-free run really starts at rest, the bands count every episode, and a checkpoint
of another task is refused with status 2."""

from __future__ import annotations

import json

import numpy as np
import torch

from benchmarks import walk_falls
from common.config import load_config
from common.policy import ActorCritic
from common.task_spec import task_spec
from learner.checkpoint import save_checkpoint

SMALL = ["algo.policy.actor_hidden_dims=[16]", "algo.policy.critic_hidden_dims=[8]"]


def _checkpoint(path, task: str):
    cfg = load_config(SMALL, extra={"task": task}, environ={})
    torch.manual_seed(0)
    model = ActorCritic.from_config(cfg, task_spec(task))
    save_checkpoint({"config": cfg.to_dict(), "task": task, "iteration": 1, "appo": {"model": model.state_dict()}},
                    path)
    return path, model


def test_without_the_push_every_episode_starts_at_rest(tmp_path):
    """With the reset's twist set to 0 every initial speed is 0; with it, speeds spread up to the box's corner."""
    _, model = _checkpoint(tmp_path / "w.pt", "g1_walk_flat")
    still = walk_falls.one_episode_each(model, 8, seed=1, push=False)
    pushed = walk_falls.one_episode_each(model, 8, seed=1, push=True)
    assert np.all(still["speed"] == 0.0)
    assert 0.05 < pushed["speed"].max() <= 0.5 * np.sqrt(2) + 1e-9
    assert np.all(pushed["fell"] < 1000) and pushed["fell"].shape == (8,)


def test_the_report_counts_every_episode_once_and_refuses_another_task(tmp_path, capsys):
    """Bands partition the episodes (each counted once, falls within them); a hopper checkpoint exits 2."""
    ckpt, _ = _checkpoint(tmp_path / "w.pt", "g1_walk_flat")
    out = tmp_path / "f.json"
    assert walk_falls.main(["--load-run", str(ckpt), "--envs", "6", "--json", str(out)]) == 0
    figures = json.loads(out.read_text())
    for run in ("with_push", "without_push"):
        r = figures[run]
        falls = r["episodes"] - r["to_the_limit"]
        for key in ("by_initial_speed", "by_command"):
            assert sum(b["episodes"] for b in r[key]) == 6 and sum(b["fell"] for b in r[key]) == falls
    assert "to the 20 s limit" in capsys.readouterr().out
    hopper, _ = _checkpoint(tmp_path / "h.pt", "hopper")
    assert walk_falls.main(["--load-run", str(hopper)]) == 2
    assert "hopper checkpoint" in capsys.readouterr().err
