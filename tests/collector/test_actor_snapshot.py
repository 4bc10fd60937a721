"""The collector's frozen actor samples what ActorCritic.act samples, and follows every weight load."""

from __future__ import annotations

import threading

import pytest
import torch

from collector.actor_snapshot import ActorSnapshot
from collector.envs import make_env
from collector.rollout import Collector
from common.config import PolicyConfig, load_config
from common.policy import ActorCritic, flat_weights, flat_weights_size
from common.rollout_spec import RolloutSpec
from common.transport.shm import CollectorShm, LearnerShm


def _policy(activation: str, seed: int = 0) -> ActorCritic:
    """A policy with trained-looking weights and normaliser statistics, so no term is trivially zero."""
    torch.manual_seed(seed)
    cfg = PolicyConfig(actor_hidden_dims=[32, 16], critic_hidden_dims=[8], activation=activation, init_noise_std=0.7)
    pol = ActorCritic(5, 5, 3, cfg, normalize=True)
    with torch.no_grad():
        pol.obs_normalizer.update(torch.randn(400, 5) * torch.tensor([1.0, 3.0, 0.1, 10.0, 2.0]) + 4.0)
        pol.log_std.copy_(torch.tensor([-1.0, 0.2, 0.5]))
    return pol


def _seeded(fn, seed: int = 7):
    """fn()'s tensors, copied (the snapshot reuses its buffers), after seeding torch."""
    torch.manual_seed(seed)
    return tuple(t.clone() for t in fn())


@pytest.mark.parametrize("activation", ["relu", "elu", "tanh"])
def test_float32_sample_is_act(activation):
    """Same draws as act(): actions to float rounding, log-probs equal to Normal's density of them."""
    pol = _policy(activation)
    obs = torch.randn(64, 5) * 20  # some rows beyond the normaliser's clip
    snap = ActorSnapshot(pol, None)
    with torch.no_grad():
        ref_actions, _ = _seeded(lambda: pol.act(obs))
        actions, log_probs = _seeded(lambda: snap.sample(obs))
        density = pol.distribution(obs).log_prob(actions).sum(-1)
    assert actions.dtype == log_probs.dtype == torch.float32
    torch.testing.assert_close(actions, ref_actions, rtol=0, atol=1e-5)
    torch.testing.assert_close(log_probs, density, rtol=1e-5, atol=1e-5)


def test_bf16_sample_is_bf16_act():
    """With bf16 hidden layers the snapshot draws act(hidden_dtype=bf16)'s actions, not float32's."""
    pol = _policy("elu")
    obs = torch.randn(256, 5) * 3
    snap = ActorSnapshot(pol, torch.bfloat16)
    with torch.no_grad():
        ref16, ref_lp16 = _seeded(lambda: pol.act(obs, torch.bfloat16))
        ref32, _ = _seeded(lambda: pol.act(obs))
        actions, log_probs = _seeded(lambda: snap.sample(obs))
    torch.testing.assert_close(actions, ref16, rtol=0, atol=1e-5)
    torch.testing.assert_close(log_probs, ref_lp16, rtol=1e-4, atol=1e-4)
    assert (actions - ref32).abs().max() > 1e-4  # the hidden layers did run in bf16


def test_sample_follows_weights_only_after_refresh():
    """The snapshot keeps the weights it took until refresh(), then samples the new ones."""
    pol, other = _policy("relu", seed=0), _policy("relu", seed=1)
    obs = torch.randn(16, 5)
    snap = ActorSnapshot(pol, None)
    before = _seeded(lambda: snap.sample(obs))[0]
    with torch.no_grad():
        pol.load_state_dict(other.state_dict())
        torch.testing.assert_close(_seeded(lambda: snap.sample(obs))[0], before, rtol=0, atol=0)
        snap.refresh()
        expected = _seeded(lambda: other.act(obs))[0]
    torch.testing.assert_close(_seeded(lambda: snap.sample(obs))[0], expected, rtol=0, atol=1e-5)


def test_sampling_reuses_its_buffers_per_batch_size():
    """Steady-state sampling allocates nothing: each batch size keeps writing the same storage."""
    snap = ActorSnapshot(_policy("elu"), torch.bfloat16)
    first = [t.data_ptr() for t in snap.sample(torch.randn(32, 5))]
    other = [t.data_ptr() for t in snap.sample(torch.randn(8, 5))]
    again = [t.data_ptr() for t in snap.sample(torch.randn(32, 5))]
    assert again == first and set(other).isdisjoint(first)


def test_collector_samples_the_weights_it_received(tmp_path):
    """Weights published over shared memory reach the collector's sampling, not only its policy module."""
    env = make_env("half_cheetah", 4, 1, seed=0)
    cfg = load_config(extra={"task": "half_cheetah", "algo": {"num_envs": 4, "steps_per_env": 3},
                             "training": {"precision": "fp32", "collector_inference": "torch"}}, environ={})
    spec = RolloutSpec.for_task(env.spec, 4, 3)
    size = flat_weights_size(ActorCritic.from_config(cfg, env.spec))
    learner_side = LearnerShm(tmp_path, "run", spec, num_weights=size)
    channel = CollectorShm(learner_side.run_dir, 0, spec)
    try:
        c = Collector(cfg, env, channel, stop_event=threading.Event())
        torch.manual_seed(42)
        published = ActorCritic.from_config(cfg, env.spec)
        with torch.no_grad():
            published.log_std.fill_(-2.0)
        learner_side.publish_weights(5, flat_weights(published))
        assert c._take_weights() and c.version == 5
        obs = torch.from_numpy(env.reset()[0])
        with torch.no_grad():
            expected = _seeded(lambda: published.act(obs))[0]
        torch.testing.assert_close(_seeded(lambda: c.inference.actor.sample(obs))[0], expected, rtol=0, atol=1e-5)
    finally:
        channel.close()
        learner_side.close()
        env.close()
