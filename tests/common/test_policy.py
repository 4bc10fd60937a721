"""Policy network: weight vector round trip, normalizer statistics, Gaussian log-probs."""

import numpy as np
import pytest
import torch

from common.config import PolicyConfig
from common.policy import (
    ActorCritic,
    EmpiricalNormalizer,
    flat_weights,
    flat_weights_size,
    load_flat_weights,
)

CFG = PolicyConfig(actor_hidden_dims=[16, 8], critic_hidden_dims=[12], activation="elu", init_noise_std=0.5)


def test_flat_weights_round_trip_reproduces_outputs():
    """A second network loaded from the flat vector gives identical actions, values and normalization."""
    torch.manual_seed(0)
    a = ActorCritic(5, 7, 3, CFG, normalize=True)
    a.obs_normalizer.update(torch.randn(100, 5) * 3 + 1)
    a.critic_normalizer.update(torch.randn(100, 7))
    b = ActorCritic(5, 7, 3, CFG, normalize=True)
    vec = flat_weights(a)
    assert vec.shape == (flat_weights_size(a),) and vec.dtype == np.float32
    load_flat_weights(b, vec)
    obs, crit = torch.randn(4, 5), torch.randn(4, 7)
    assert torch.equal(a.act_deterministic(obs), b.act_deterministic(obs))
    assert torch.equal(a.value(crit), b.value(crit))
    assert torch.equal(a.log_std, b.log_std)


def test_wrong_size_weight_vector_is_refused():
    """Weights built for another network shape are rejected with the sizes named."""
    a = ActorCritic(5, 7, 3, CFG, normalize=False)
    with pytest.raises(ValueError, match="shape"):
        load_flat_weights(a, np.zeros(3, np.float32))


def test_normalizer_matches_numpy_over_batches():
    """Running mean/var after several batches equal numpy's over the concatenated data."""
    norm = EmpiricalNormalizer(3, enabled=True)
    rng = np.random.default_rng(1)
    batches = [rng.normal(loc=[1, -2, 5], scale=[1, 3, 0.1], size=(n, 3)) for n in (10, 257, 33)]
    for b in batches:
        norm.update(torch.tensor(b, dtype=torch.float32))
    data = np.concatenate(batches)
    np.testing.assert_allclose(norm.mean.numpy(), data.mean(0), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(norm.var.numpy(), data.var(0), rtol=1e-4, atol=1e-6)
    assert norm.count.item() == len(data)


def test_disabled_normalizer_is_identity():
    """With normalization off, observations pass unchanged and statistics never move."""
    norm = EmpiricalNormalizer(2, enabled=False)
    x = torch.randn(5, 2) * 10
    norm.update(x)
    assert torch.equal(norm(x), x) and norm.count.item() == 0


def test_log_prob_is_diagonal_gaussian_density():
    """act() log-probs equal the closed-form diagonal Gaussian log density summed over dims."""
    torch.manual_seed(3)
    pol = ActorCritic(4, 4, 2, CFG, normalize=False)
    obs = torch.randn(6, 4)
    actions, logp = pol.act(obs)
    mu, std = pol.act_deterministic(obs), 0.5
    expected = (-((actions - mu) ** 2) / (2 * std**2) - np.log(std) - 0.5 * np.log(2 * np.pi)).sum(-1)
    torch.testing.assert_close(logp, expected)


def _seeded(fn, seed: int = 5):
    torch.manual_seed(seed)
    return fn()


def test_act_draws_what_the_distribution_samples():
    """act() takes the same random numbers as distribution(obs).sample(), and its log-probs are Normal's."""
    pol, obs = ActorCritic(4, 4, 3, CFG, normalize=False), torch.randn(64, 4)
    actions, logp = _seeded(lambda: pol.act(obs))
    dist = pol.distribution(obs)
    sampled = _seeded(dist.sample)
    torch.testing.assert_close(actions, sampled, rtol=0, atol=0)
    torch.testing.assert_close(logp, dist.log_prob(sampled).sum(-1))


def test_bf16_act_samples_around_bf16_hidden_features_and_a_float32_head():
    """act(hidden_dtype=bf16) gives float32 actions within bf16 rounding of the float32 ones."""
    pol, obs = ActorCritic(4, 4, 3, CFG, normalize=False), torch.randn(256, 4)
    a32, _ = _seeded(lambda: pol.act(obs))
    a16, lp16 = _seeded(lambda: pol.act(obs, torch.bfloat16))
    assert a16.dtype == lp16.dtype == torch.float32
    assert not torch.equal(a16, a32)
    torch.testing.assert_close(a16, a32, rtol=0, atol=0.05)


def test_init_noise_std_by_action_sets_those_dims_and_the_samples_spread():
    """The listed action dims start at their own std, the rest at init_noise_std, and act() draws with them."""
    cfg = CFG.model_copy(update={"init_noise_std_by_action": {0: 2.0, 2: 0.1}})
    pol = ActorCritic(4, 4, 3, cfg, normalize=False)
    torch.testing.assert_close(pol.log_std.exp(), torch.tensor([2.0, 0.5, 0.1]))
    obs = torch.zeros(20_000, 4)
    actions, _ = _seeded(lambda: pol.act(obs))
    spread = (actions - pol.act_deterministic(obs)).std(0)
    torch.testing.assert_close(spread, torch.tensor([2.0, 0.5, 0.1]), rtol=0.03, atol=0)


def test_init_noise_std_by_action_past_the_actions_is_refused():
    """An index the network has no action for is an error naming the option, not a silent no-op."""
    cfg = CFG.model_copy(update={"init_noise_std_by_action": {3: 1.0}})
    with pytest.raises(ValueError, match="init_noise_std_by_action: index 3 is past the 3 actions"):
        ActorCritic(4, 4, 3, cfg, normalize=False)
