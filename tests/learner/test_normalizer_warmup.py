"""algo.normalizer_warmup: the first policy's rollouts set the normalisers and are never trained on."""

import torch
from test_backpressure import _fill_ring, _learner


def _actor_params(learner) -> list[torch.Tensor]:
    return [p.detach().clone() for p in learner.appo.model.actor.parameters()]


def test_first_policys_rollouts_only_fit_the_normalizer(tmp_path):
    """Version-0 rollouts: normaliser fitted on all their steps, no update, version 1 published, pool emptied."""
    learner, transport = _learner(tmp_path, "wait", "algo.normalizer_warmup=true")
    try:
        before = _actor_params(learner)
        _fill_ring(learner, 2, version=0)
        assert learner._lap()
        assert learner.progress.iteration == 0 and learner.appo.num_updates == 0
        assert learner.progress.policy_version == 1
        assert all(torch.equal(a, b) for a, b in zip(before, _actor_params(learner), strict=True))
        assert learner.appo.model.obs_normalizer.count.item() == 2 * learner.spec.env_steps
        assert learner.staging.occupancy() == 0
        assert torch.isnan(learner.staging.tensors["obs"]).all()  # poisoned again
        _fill_ring(learner, 1, seq0=2, version=1)
        assert learner._lap()
        assert learner.progress.iteration == 1 and learner.progress.policy_version == 2
        assert learner.staging.trained_rollouts == 1
        summary = learner.summary()
        assert summary["trained_fraction"] == 1.0
        assert summary["normalizer_only_env_steps"] == 2 * learner.spec.env_steps
    finally:
        learner.metrics.close()
        transport.close()


def test_a_late_version_zero_rollout_feeds_the_normalizer_only(tmp_path):
    """A version-0 rollout arriving beside a trainable one: the normaliser takes it, the update trains the other."""
    learner, transport = _learner(tmp_path, "wait", "algo.normalizer_warmup=true")
    try:
        _fill_ring(learner, 1, version=0)
        assert learner._lap()
        _fill_ring(learner, 1, seq0=1, version=0)
        _fill_ring(learner, 1, seq0=2, version=1)
        assert learner._lap()
        assert learner.progress.iteration == 1 and learner.progress.policy_version == 2
        assert learner.staging.trained_rollouts == 1 and learner.normalizer_only_rollouts == 2
        assert learner.appo.model.obs_normalizer.count.item() == 3 * learner.spec.env_steps
    finally:
        learner.metrics.close()
        transport.close()


def test_without_warmup_the_first_rollouts_are_trained_at_once(tmp_path):
    """Off (the default for tasks that do not set it): version-0 rollouts go straight into the first update."""
    learner, transport = _learner(tmp_path, "wait", "algo.normalizer_warmup=false")
    try:
        _fill_ring(learner, 2, version=0)
        assert learner._lap()
        assert learner.progress.iteration == 1 and learner.staging.trained_rollouts == 2
        assert learner.normalizer_only_rollouts == 0
    finally:
        learner.metrics.close()
        transport.close()
