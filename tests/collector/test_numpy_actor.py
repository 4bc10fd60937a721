"""The NumPy actor and critic, read from the learner's flat weights, compute what the torch policy computes."""

from __future__ import annotations

import tracemalloc
from typing import get_args

import numpy as np
import pytest
import torch

from collector.actor_snapshot import ActorSnapshot
from collector.numpy_actor import NumpyActor
from collector.numpy_inference import NumpyInference
from collector.numpy_mlp import NumpyMLP
from common.config import PolicyConfig, load_config
from common.policy import ActorCritic, flat_weights, gaussian_log_prob
from common.task_spec import task_spec
from common.weight_layout import weight_layout

ACTIVATIONS = get_args(PolicyConfig.model_fields["activation"].annotation)
OBS, CRITIC, ACT = 5, 6, 3


def _policy(activation: str, normalize: bool, seed: int = 0) -> tuple[ActorCritic, PolicyConfig]:
    """A policy with trained-looking weights and normaliser statistics, so no term is trivially zero."""
    torch.manual_seed(seed)
    cfg = PolicyConfig(actor_hidden_dims=[32, 16], critic_hidden_dims=[24, 8], activation=activation,
                       init_noise_std=0.7)
    pol = ActorCritic(OBS, CRITIC, ACT, cfg, normalize=normalize)
    with torch.no_grad():
        for layer in (*pol.actor, *pol.critic):
            if isinstance(layer, torch.nn.Linear):  # wider than the default init: activations see both signs far out
                layer.weight.mul_(3.0)
        pol.obs_normalizer.update(torch.randn(400, OBS) * torch.tensor([1.0, 3.0, 0.1, 10.0, 2.0]) + 4.0)
        pol.critic_normalizer.update(torch.randn(400, CRITIC) * 2.0 - 1.0)
        pol.log_std.copy_(torch.tensor([-1.0, 0.2, 0.5]))
    return pol, cfg


def _numpy_actor(pol: ActorCritic, cfg: PolicyConfig, normalize: bool, rng=None) -> NumpyActor:
    actor = NumpyActor(weight_layout(OBS, CRITIC, ACT, cfg), cfg.activation, normalize,
                       rng or np.random.default_rng(0))
    actor.load(flat_weights(pol))
    return actor


class _Draws:
    """A random source that hands out given standard-normal draws, so both samplers use the same z."""

    def __init__(self, z: np.ndarray):
        self.z = z

    def standard_normal(self, dtype, out: np.ndarray) -> np.ndarray:
        assert dtype == np.float32
        out[...] = self.z
        return out


def _obs(n: int = 64, seed: int = 1) -> np.ndarray:
    # Scaled so that some rows lie beyond the normaliser's clip.
    return (np.random.default_rng(seed).standard_normal((n, OBS)) * 20).astype(np.float32)


@pytest.mark.parametrize("normalize", [True, False])
@pytest.mark.parametrize("activation", ACTIVATIONS)
def test_sample_is_the_snapshots_with_the_same_draw(activation, normalize):
    """Same weights, same z: means, actions and log-probs equal ActorSnapshot's and act()'s density (float32)."""
    pol, cfg = _policy(activation, normalize)
    obs = _obs()
    torch.manual_seed(7)
    z = torch.empty(len(obs), ACT).normal_().numpy()  # the draw the snapshot makes after the same seed
    torch.manual_seed(7)
    ref_actions, ref_log_probs = (t.clone() for t in ActorSnapshot(pol, None).sample(torch.from_numpy(obs)))
    actor = _numpy_actor(pol, cfg, normalize, _Draws(z))
    with torch.no_grad():
        mu = pol.actor_mean(pol.obs_normalizer(torch.from_numpy(obs)))
    np.testing.assert_allclose(actor.mean(obs), mu.numpy(), rtol=1e-5, atol=1e-5)
    actions, log_probs = actor.sample(obs)
    assert actions.dtype == log_probs.dtype == np.float32
    np.testing.assert_allclose(actions, ref_actions.numpy(), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(log_probs, ref_log_probs.numpy(), rtol=1e-5, atol=1e-5)
    density = gaussian_log_prob(mu, pol.log_std.detach(), torch.from_numpy(actions))
    np.testing.assert_allclose(log_probs, density.numpy(), rtol=1e-5, atol=1e-4)
    assert np.abs(mu.numpy()).max() > 1.0  # the network did not collapse to a trivial output


@pytest.mark.parametrize("normalize", [True, False])
@pytest.mark.parametrize("activation", ["elu", "selu", "leaky_relu"])
def test_critic_value_is_the_policys(activation, normalize):
    """NumpyInference.value of critic observations equals ActorCritic.value (float32)."""
    policy = {"critic_hidden_dims": [24, 8], "activation": activation}
    app = load_config(extra={"task": "hopper", "algo": {"empirical_normalization": normalize, "policy": policy}},
                      environ={})
    spec = task_spec("hopper")
    torch.manual_seed(0)
    hopper = ActorCritic.from_config(app, spec)
    with torch.no_grad():
        hopper.critic_normalizer.update(torch.randn(300, spec.critic_dim) * 3 + 1)
    inference = NumpyInference(app, spec, seed=0)
    inference.load(flat_weights(hopper))
    critic_obs = (np.random.default_rng(2).standard_normal((40, spec.critic_dim)) * 5).astype(np.float32)
    with torch.no_grad():
        expected = hopper.value(torch.from_numpy(critic_obs)).numpy()
    values = inference.value(critic_obs)
    assert values.shape == (40,)
    np.testing.assert_allclose(values, expected, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(inference.value(critic_obs[:3]), expected[:3], rtol=1e-5, atol=1e-5)


def test_sample_follows_weights_only_after_load():
    """The actor keeps the weights it loaded (not views of the vector) until the next load()."""
    pol, cfg = _policy("relu", True, seed=0)
    other, _ = _policy("relu", True, seed=1)
    flat = flat_weights(pol)
    actor = NumpyActor(weight_layout(OBS, CRITIC, ACT, cfg), "relu", True, np.random.default_rng(0))
    actor.load(flat)
    obs = _obs(16)
    before = actor.mean(obs).copy()
    flat[:] = flat_weights(other)  # the vector is reused for the next version: the actor must not see it
    np.testing.assert_array_equal(actor.mean(obs), before)
    actor.load(flat)
    with torch.no_grad():
        expected = other.actor_mean(other.obs_normalizer(torch.from_numpy(obs))).numpy()
    np.testing.assert_allclose(actor.mean(obs), expected, rtol=1e-5, atol=1e-5)


def test_mlp_keeps_copies_even_of_a_single_output_layer():
    """A [1, in] layer (a value head, a one-action actor) is copied too, though its transpose is contiguous."""
    flat = np.arange(1, 10, dtype=np.float32)  # weight [1, 8] and bias [1], as in a weight vector
    mlp = NumpyMLP("tanh")
    mlp.load([(flat[:8].reshape(1, 8), flat[8:])])
    x = np.ones((2, 8), np.float32)
    before = mlp(x).copy()
    flat[:] = 0  # the next version arrives in the same buffer
    np.testing.assert_array_equal(mlp(x), before)
    assert before[0, 0] == 45.0  # 1 + ... + 8, plus the bias 9


def test_same_seed_same_draws():
    """Reseeding restarts the action noise: the same seed draws the same actions, another seed others."""
    cfg = load_config(extra={"task": "half_cheetah"}, environ={})
    spec = task_spec("half_cheetah")
    torch.manual_seed(0)
    flat = flat_weights(ActorCritic.from_config(cfg, spec))
    inference = NumpyInference(cfg, spec, seed=5)
    inference.load(flat)
    obs = np.random.default_rng(0).standard_normal((8, spec.obs_dim)).astype(np.float32)
    first = inference.sample(obs)[0].copy()
    inference.seed(5)
    np.testing.assert_array_equal(inference.sample(obs)[0], first)
    inference.seed(6)
    assert not np.array_equal(inference.sample(obs)[0], first)


def test_sampling_allocates_nothing_once_warm():
    """Steady-state sampling of a Go2-sized batch writes into kept buffers: no array is allocated per call."""
    cfg = PolicyConfig(actor_hidden_dims=[256, 128, 64], critic_hidden_dims=[8], activation="elu")
    pol = ActorCritic(49, 52, 12, cfg, normalize=True)
    actor = NumpyActor(weight_layout(49, 52, 12, cfg), "elu", True, np.random.default_rng(0))
    actor.load(flat_weights(pol))
    obs = np.random.default_rng(0).standard_normal((1024, 49)).astype(np.float32)
    small = obs[:100].copy()
    first = [a.__array_interface__["data"][0] for a in actor.sample(obs)]
    actor.sample(small)  # a smaller group reuses the same storage
    tracemalloc.start()
    try:
        for _ in range(5):
            actions, log_probs = actor.sample(obs)
            actor.sample(small)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert [a.__array_interface__["data"][0] for a in (actions, log_probs)] == first
    assert peak < 64 * 1024  # one [1024, 256] float32 array alone is 1 MiB


def test_sampling_before_any_weights_is_refused():
    """Without torch there is no initial policy: sampling before the first load says so."""
    cfg = PolicyConfig(actor_hidden_dims=[4], critic_hidden_dims=[4])
    actor = NumpyActor(weight_layout(OBS, CRITIC, ACT, cfg), "elu", True, np.random.default_rng(0))
    with pytest.raises(RuntimeError, match="load"):
        actor.sample(_obs(2))
