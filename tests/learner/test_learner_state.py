"""A learner's checkpoint restores every item of its state: weights, target, optimizer, lr, normalizers,
counters, reward statistics, staged rollouts and RNG streams."""

import random
import threading

import numpy as np
import torch

from common.checkpoint_io import load_checkpoint
from common.config import load_config
from common.task_spec import task_spec
from common.transport.shm import LearnerShm
from learner.checkpoint import save_checkpoint
from learner.learner import Learner
from learner.ring import SlotMeta

CFG = load_config(["algo.num_envs=8", "algo.steps_per_env=4", "algo.policy.actor_hidden_dims=[16]",
                   "algo.policy.critic_hidden_dims=[16]", "training.console=false", "training.device=cpu",
                   "training.replay_queue_size=3"],
                  extra={"task": "inverted_pendulum"}, environ={})


def _learner(tmp_path, name):
    task = task_spec("inverted_pendulum")
    transport = LearnerShm(tmp_path / "shm", name, None, 1)
    return Learner(CFG, task, tmp_path / name, transport, threading.Event()), transport


def _train_a_bit(learner: Learner) -> None:
    rng = np.random.default_rng(0)
    for seq in range(2):
        slot = learner.ring.claim(0)
        for a in learner.ring.slot_arrays(slot).values():
            a[...] = rng.normal(size=a.shape)
        arrays = learner.ring.slot_arrays(slot)
        arrays["dones"][...] = rng.random(arrays["dones"].shape) < 0.1
        learner.ring.publish(slot, SlotMeta("c0", seq, seq, {}))
    fresh = learner._stage(learner.ring.take_ready(0.1))
    learner.appo.update_normalizers(learner.staging.batch(fresh))
    learner.appo.update(learner.staging.batch())
    learner.staging.mark_used(learner.staging.active())
    learner.progress.iteration, learner.progress.policy_version = 7, 7
    learner.progress.total_env_steps, learner.progress.best_mean_reward = 1234, 55.5
    learner.normalizer_only_rollouts = 3
    learner.episodes.add({"episodes": 3, "return_mean": 50.0, "length_mean": 40.0, "timeout_rate": 0.0,
                          "terms": {"alive": 50.0}})


def _equal(a, b) -> bool:
    if isinstance(a, torch.Tensor):  # unwritten staging entries are NaN-poisoned: NaN equals NaN here
        return a.shape == b.shape and bool(((a == b) | (a.isnan() & b.isnan())).all())
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(_equal(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)):
        return len(a) == len(b) and all(_equal(x, y) for x, y in zip(a, b, strict=True))
    return a == b


def test_every_item_round_trips_through_a_checkpoint(tmp_path):
    """Save, load into a fresh learner: every state item equal, and the RNG streams continue identically."""
    a, ta = _learner(tmp_path, "a")
    _train_a_bit(a)
    a.appo.set_learning_rate(0.00123)
    random.seed(5), np.random.seed(6), torch.manual_seed(7)
    path = save_checkpoint(a.state_dict(), tmp_path / "a" / "model_7.pt")
    expected_draws = (random.random(), np.random.rand(), torch.rand(1).item())

    b, tb = _learner(tmp_path, "b")
    b.load_state_dict(load_checkpoint(path))
    assert (random.random(), np.random.rand(), torch.rand(1).item()) == expected_draws
    sa, sb = a.state_dict(), b.state_dict()
    for key in ("appo", "iteration", "policy_version", "total_env_steps", "best_mean_reward", "episodes", "staging",
                "normalizer_only_rollouts"):
        assert _equal(sa[key], sb[key]), key
    assert b.appo.learning_rate == 0.00123 and b.appo.optimizer.param_groups[0]["lr"] == 0.00123
    assert b.appo.optimizer.state_dict()["state"], "optimizer moments restored"
    assert torch.equal(b.appo.model.obs_normalizer.mean, a.appo.model.obs_normalizer.mean)
    assert b.appo.model.obs_normalizer.count.item() == a.appo.model.obs_normalizer.count.item() > 0
    assert b.episodes.means() == a.episodes.means()
    assert b.staging.occupancy() == 2 and b.staging.trained_rollouts == a.staging.trained_rollouts
    assert b.normalizer_only_rollouts == 3 and b.trained_fraction() == a.trained_fraction()
    ta.close(), tb.close()
