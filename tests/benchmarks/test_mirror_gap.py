"""benchmarks.mirror_gap: a policy that is its own mirror image has no gap; an asymmetric one has, and bad input is
refused with status 2."""

from __future__ import annotations

import json

import torch

from benchmarks import mirror_gap
from common.config import load_config
from common.policy import ActorCritic
from common.task_spec import task_spec
from learner.checkpoint import save_checkpoint

SMALL = ["algo.policy.actor_hidden_dims=[16]", "algo.policy.critic_hidden_dims=[8]"]


def _checkpoint(path, symmetric: bool):
    """A g1_walk_flat checkpoint; symmetric: an actor whose mean is 0 everywhere and one std for all joints."""
    cfg = load_config(SMALL, extra={"task": "g1_walk_flat"}, environ={})
    torch.manual_seed(0)
    model = ActorCritic.from_config(cfg, task_spec("g1_walk_flat"))
    if symmetric:
        with torch.no_grad():
            model.actor[-1].weight.zero_()
            model.actor[-1].bias.zero_()
    save_checkpoint({"config": cfg.to_dict(), "task": "g1_walk_flat", "iteration": 1,
                     "appo": {"model": model.state_dict()}}, path)
    return path


def test_a_symmetric_policy_has_no_gap_and_an_asymmetric_one_has(tmp_path, capsys):
    """Zero mean and one std: every gap is 0 and no ratio leaves the clip range; the untrained actor's gaps spread."""
    figures = {}
    for name, symmetric in (("sym", True), ("asym", False)):
        ckpt = _checkpoint(tmp_path / f"{name}.pt", symmetric)
        out = tmp_path / f"{name}.json"
        assert mirror_gap.main(["--load-run", str(ckpt), "--envs", "4", "--steps", "10", "--json", str(out)]) == 0
        figures[name] = json.loads(out.read_text())
    assert figures["sym"]["samples"] == 40 and abs(figures["sym"]["gap_mean"]) < 1e-4
    assert figures["sym"]["gap_std"] < 1e-4 and figures["sym"]["outside_clip"] == 0.0
    assert figures["asym"]["gap_std"] > 0.05 and figures["asym"]["outside_clip"] > 0.0
    assert "ratio outside [1 - 0.2, 1 + 0.2]" in capsys.readouterr().out


def test_a_task_without_a_mirror_map_and_a_missing_file_are_refused(tmp_path, capsys):
    """Status 2 with the reason: the task has no mirror map; the checkpoint does not exist."""
    cfg = load_config(SMALL, extra={"task": "inverted_pendulum"}, environ={})
    model = ActorCritic.from_config(cfg, task_spec("inverted_pendulum"))
    save_checkpoint({"config": cfg.to_dict(), "task": "inverted_pendulum", "iteration": 1,
                     "appo": {"model": model.state_dict()}}, tmp_path / "ip.pt")
    assert mirror_gap.main(["--load-run", str(tmp_path / "ip.pt"), "--envs", "2", "--steps", "2"]) == 2
    assert "no left-right mirror map" in capsys.readouterr().err
    assert mirror_gap.main(["--load-run", str(tmp_path / "missing.pt")]) == 2
    assert "missing.pt" in capsys.readouterr().err
