"""Staging overflow: by default a lap stages only what the pool holds, so nothing simulated goes untrained."""

import threading

import numpy as np
import pytest

from common.config import load_config
from common.policy import ActorCritic, flat_weights_size
from common.task_spec import task_spec
from common.transport.shm import LearnerShm
from learner.learner import Learner
from learner.ring import SlotMeta


def _learner(tmp_path, overflow: str, *overrides: str) -> tuple[Learner, LearnerShm]:
    cfg = load_config(["algo.num_envs=8", "algo.steps_per_env=4", "algo.policy.actor_hidden_dims=[16]",
                       "algo.policy.critic_hidden_dims=[16]", "training.console=false", "training.device=cpu",
                       "training.replay_queue_size=2", "training.ring_slots=4", "algo.max_iterations=100",
                       f"training.staging_overflow={overflow}", *overrides],
                      extra={"task": "inverted_pendulum"}, environ={})
    task = task_spec("inverted_pendulum")
    transport = LearnerShm(tmp_path / "shm", overflow, None, flat_weights_size(ActorCritic.from_config(cfg, task)))
    return Learner(cfg, task, tmp_path / overflow, transport, threading.Event()), transport


def _fill_ring(learner: Learner, count: int, seq0: int = 0, version: int | None = None) -> None:
    rng = np.random.default_rng(seq0)
    for seq in range(seq0, seq0 + count):
        slot = learner.ring.claim(0)
        arrays = learner.ring.slot_arrays(slot)
        for a in arrays.values():
            a[...] = rng.normal(size=a.shape)
        arrays["dones"][...] = rng.random(arrays["dones"].shape) < 0.1
        arrays["truncated"][...] = 0.0
        made_by = learner.progress.policy_version if version is None else version
        learner.ring.publish(slot, SlotMeta("c0", seq, made_by, {}))


def test_wait_stages_at_most_the_pool_and_trains_everything(tmp_path):
    """4 ready rollouts, pool of 2: each lap stages 2, the others wait in the ring; every rollout is trained."""
    learner, transport = _learner(tmp_path, "wait")
    try:
        _fill_ring(learner, 4)
        assert learner._lap()
        assert learner.progress.total_env_steps == 2 * learner.spec.env_steps
        assert learner.ring.occupancy() == 2  # still READY, holding the collectors back
        assert learner._lap()
        assert learner.ring.occupancy() == 0
        assert learner.staging.overwritten_unused == 0
        assert learner.staging.trained_rollouts == 4
        assert learner.trained_fraction() == 1.0
        assert learner.summary()["trained_fraction"] == 1.0
    finally:
        learner.metrics.close()
        transport.close()


def test_overwrite_drains_everything_and_reports_the_waste(tmp_path):
    """overwrite: one lap stages all 4 into a pool of 2, two are pushed out untrained and reported."""
    learner, transport = _learner(tmp_path, "overwrite")
    try:
        _fill_ring(learner, 4)
        assert learner._lap()
        assert learner.ring.occupancy() == 0
        assert learner.staging.overwritten_unused == 2
        assert learner.trained_fraction() == pytest.approx(0.5)
        assert learner.summary()["staging_overflow"] == "overwrite"
    finally:
        learner.metrics.close()
        transport.close()


def test_rollouts_that_went_stale_in_the_ring_are_refused_at_staging(tmp_path):
    """A rollout admitted in time but past max_policy_lag when taken from the ring is dropped and counted, against
    its collector too."""
    learner, transport = _learner(tmp_path, "wait")
    try:
        learner.receiver.max_policy_lag = 3
        _fill_ring(learner, 2)  # made with version 0
        learner.progress.policy_version = 4
        _fill_ring(learner, 1, seq0=2)  # made with version 4
        assert learner._lap()
        assert learner.receiver.refused_counts() == {"stale_policy": 2}
        assert learner.receiver.stale_by_collector() == {"c0": 2}
        assert learner._last_scalars["Collectors/c0/refused_stale"] == 2
        assert learner.progress.total_env_steps == learner.spec.env_steps  # only the fresh one was staged
        assert learner.ring.occupancy() == 0
    finally:
        learner.metrics.close()
        transport.close()
