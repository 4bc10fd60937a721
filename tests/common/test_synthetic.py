"""synthetic_batch: real shapes, actions sampled from the given policy, and the caller's policy left untouched."""

from __future__ import annotations

import types

import torch
from torch import nn

from common.config import load_config
from common.synthetic import synthetic_batch
from common.task_spec import task_spec
from learner.appo import APPO

TASK = task_spec("go2_joystick_flat")


def _cfg():
    return load_config(["algo.num_envs=16", "algo.steps_per_env=6", "algo.policy.actor_hidden_dims=[32,16]",
                        "algo.policy.critic_hidden_dims=[24]", "training.device=cpu", "training.precision=fp32"],
                       extra={"task": "go2_joystick_flat"}, environ={})


def test_synthetic_batch_leaves_the_policy_where_it_is():
    """synthetic_batch samples from a copy: it never moves the caller's model (nn.Module.to is in place)."""
    torch.manual_seed(0)
    appo = APPO(_cfg(), TASK, torch.device("cpu"))
    policy = appo.model
    params = list(policy.parameters())
    before = [p.detach().clone() for p in params]
    moved = []

    def to(self, *args, **kwargs):  # a deep copy rebinds this method to the copy
        if self is policy:
            moved.append(args)
        return nn.Module.to(self, *args, **kwargs)

    policy.to = types.MethodType(to, policy)
    batch = synthetic_batch(TASK, 16, 6, 1, torch.device("cpu"), policy, seed=3)
    assert moved == []
    assert all(p is q for p, q in zip(policy.parameters(), params, strict=True))
    assert all(p.device.type == "cpu" and torch.equal(p, b) for p, b in zip(params, before, strict=True))
    with torch.no_grad():  # the actions were still sampled from this policy
        dist = policy.distribution(batch["obs"])
        torch.testing.assert_close(dist.log_prob(batch["actions"]).sum(-1), batch["log_probs"])
    appo.update_normalizers(batch)
    appo.update(batch)
    assert any(not torch.equal(p, b) for p, b in zip(appo.model.parameters(), before, strict=True))
