"""The IMPACT surrogate, value loss and Gaussian KL on cases worked out by hand."""

from __future__ import annotations

import math

import pytest
import torch
from torch.distributions import Normal, kl_divergence

from common.policy import gaussian_log_prob
from learner.ppo_loss import (
    gaussian_entropy,
    gaussian_kl,
    impact_ratio,
    surrogate_loss,
    value_loss,
)

LN2, LN3 = math.log(2.0), math.log(3.0)


def test_impact_ratio_truncates_towards_target():
    """b < p: ratio = e^(b-p) * e^(lp-b) = 0.5 * 3; b > p: the min is 1, ratio = e^(lp-b) = 1 / 2."""
    log_probs = torch.tensor([LN3, 0.0])
    behavior = torch.tensor([0.0, LN2])
    target = torch.tensor([LN2, 0.0])
    ratio = impact_ratio(log_probs, behavior, target)
    torch.testing.assert_close(ratio, torch.tensor([1.5, 0.5]))


def test_impact_ratio_matches_formula_and_grads_only_through_current_policy():
    """Equals min(1, exp(b - p)) * exp(lp - b) on random inputs; b and p get no gradient."""
    g = torch.Generator().manual_seed(0)
    lp, b, p = (torch.randn(64, generator=g, dtype=torch.float64) for _ in range(3))
    lp.requires_grad_()
    b.requires_grad_()
    ratio = impact_ratio(lp, b, p)
    expected = torch.clamp(torch.exp(b - p), max=1.0) * torch.exp(lp - b)
    torch.testing.assert_close(ratio, expected.detach(), rtol=1e-12, atol=1e-12)
    ratio.sum().backward()
    torch.testing.assert_close(lp.grad, ratio.detach())
    assert b.grad is None


# ratio, advantage -> max(-A r, -A clip(r, 0.8, 1.2)):
#   1.5, +1 -> max(-1.5, -1.2) = -1.2  (clipped, constant)
#   0.5, +1 -> max(-0.5, -0.8) = -0.5  (unclipped)
#   1.5, -1 -> max( 1.5,  1.2) =  1.5  (unclipped)
#   0.5, -1 -> max( 0.5,  0.8) =  0.8  (clipped, constant)
#   1.1, +2 -> -2.2                    (inside the range)
RATIO = [1.5, 0.5, 1.5, 0.5, 1.1]
ADV = [1.0, 1.0, -1.0, -1.0, 2.0]


def test_surrogate_clips_on_both_sides_for_both_signs():
    """Loss is the mean of the hand-computed pessimistic terms; clip_fraction counts |r - 1| > eps."""
    loss, clip_fraction = surrogate_loss(torch.tensor(ADV), torch.tensor(RATIO), clip_param=0.2)
    assert loss.item() == pytest.approx((-1.2 - 0.5 + 1.5 + 0.8 - 2.2) / 5)
    assert clip_fraction.item() == pytest.approx(4 / 5)


def test_surrogate_gradient_vanishes_where_clipped():
    """d loss / d ratio is -A/B where the unclipped term is active and 0 where the clipped one is."""
    ratio = torch.tensor(RATIO, requires_grad=True)
    loss, _ = surrogate_loss(torch.tensor(ADV), ratio, clip_param=0.2)
    loss.backward()
    torch.testing.assert_close(ratio.grad, torch.tensor([0.0, -0.2, 0.2, 0.0, -0.4]))


def test_surrogate_rejects_broadcasting_shapes():
    """[B, 1] advantages against [B] ratios raise instead of broadcasting to [B, B]."""
    with pytest.raises(ValueError):
        surrogate_loss(torch.ones(3, 1), torch.ones(3), clip_param=0.2)


# values, old values, returns; clip 0.2:
#   v=1, old=0, R=1 -> raw 0, clipped v=0.2 -> 0.64, max 0.64
#   v=2, old=2, R=3 -> raw 1, clipped 1,             max 1
#   v=1, old=0, R=0 -> raw 1, clipped v=0.2 -> 0.04, max 1
VALUES, OLD, RETURNS = [1.0, 2.0, 1.0], [0.0, 2.0, 0.0], [1.0, 3.0, 0.0]


def test_value_loss_clipped_takes_worse_error():
    """Clipped value loss is mean(max(raw, clipped) squared errors) = (0.64 + 1 + 1) / 3."""
    loss = value_loss(torch.tensor(VALUES), torch.tensor(OLD), torch.tensor(RETURNS), 0.2, use_clipped=True)
    assert loss.item() == pytest.approx((0.64 + 1.0 + 1.0) / 3)


def test_value_loss_unclipped_is_plain_mse():
    """Unclipped value loss is the plain mean squared error (0 + 1 + 1) / 3, ignoring old values."""
    loss = value_loss(torch.tensor(VALUES), torch.tensor(OLD), torch.tensor(RETURNS), 0.2, use_clipped=False)
    assert loss.item() == pytest.approx(2.0 / 3)


def test_gaussian_kl_hand_cases():
    """Unit shift of a unit Gaussian is 1/2 per dim; doubling sigma is ln 2 + 1/8 - 1/2; dims sum."""
    zeros, ones = torch.zeros(1, 2), torch.ones(1, 2)
    assert gaussian_kl(zeros, ones, ones, ones).item() == pytest.approx(1.0)
    assert gaussian_kl(zeros, ones, zeros, 2 * ones).item() == pytest.approx(2 * (LN2 + 0.125 - 0.5))


def test_gaussian_kl_matches_torch_and_direction():
    """Equals torch's KL(Normal0 || Normal1) summed over dims, per sample, and is not the reverse KL."""
    g = torch.Generator().manual_seed(1)
    mu0, mu1 = torch.randn(6, 4, generator=g, dtype=torch.float64), torch.randn(6, 4, generator=g, dtype=torch.float64)
    s0 = torch.rand(6, 4, generator=g, dtype=torch.float64) + 0.1
    s1 = torch.rand(6, 4, generator=g, dtype=torch.float64) + 0.1
    kl = gaussian_kl(mu0, s0, mu1, s1)
    assert kl.shape == (6,)
    torch.testing.assert_close(kl, kl_divergence(Normal(mu0, s0), Normal(mu1, s1)).sum(-1))
    assert not torch.allclose(kl, kl_divergence(Normal(mu1, s1), Normal(mu0, s0)).sum(-1))


def test_gaussian_kl_zero_for_identical():
    """KL of a distribution to itself is zero."""
    mu, sigma = torch.randn(5, 3), torch.rand(5, 3) + 0.1
    torch.testing.assert_close(gaussian_kl(mu, sigma, mu, sigma), torch.zeros(5))


def test_loss_parts_compose_to_the_hand_computed_total():
    """Total = surrogate + c_v * value loss - c_e * mean entropy, with the hand-computed parts."""
    # behaviour == target == 0, so the IMPACT ratio is exp(log pi) and log pi = log(RATIO).
    zeros = torch.zeros(5)
    clip_param, value_loss_coef, entropy_coef = 0.2, 0.5, 0.01
    ratio = impact_ratio(torch.log(torch.tensor(RATIO)), zeros, zeros)
    surrogate, clip_fraction = surrogate_loss(torch.tensor(ADV), ratio, clip_param)
    v_loss = value_loss(torch.tensor(VALUES + [0.0, 0.0]), torch.tensor(OLD + [0.0, 0.0]),
                        torch.tensor(RETURNS + [0.0, 0.0]), clip_param, use_clipped=True)
    entropy = torch.tensor([1.0, 2.0, 3.0, 4.0, 5.0]).mean()
    loss = surrogate + value_loss_coef * v_loss - entropy_coef * entropy
    expected_surrogate = (-1.2 - 0.5 + 1.5 + 0.8 - 2.2) / 5
    expected_v_loss = (0.64 + 1.0 + 1.0) / 5
    assert surrogate.item() == pytest.approx(expected_surrogate)
    assert v_loss.item() == pytest.approx(expected_v_loss)
    assert entropy.item() == pytest.approx(3.0)
    assert clip_fraction.item() == pytest.approx(0.8)
    assert loss.item() == pytest.approx(expected_surrogate + 0.5 * expected_v_loss - 0.01 * 3.0)


def test_gaussian_log_prob_and_entropy_match_torch_distributions():
    """The fused log-density and entropy equal Normal's (summed over dims, batch-mean entropy), gradients too."""
    g = torch.Generator().manual_seed(4)
    mu = torch.randn(32, 5, generator=g, dtype=torch.float64, requires_grad=True)
    log_std = (0.3 * torch.randn(5, generator=g, dtype=torch.float64)).requires_grad_()
    actions = torch.randn(32, 5, generator=g, dtype=torch.float64)
    dist = Normal(mu, log_std.exp().expand_as(mu))
    ref_lp, ref_ent = dist.log_prob(actions).sum(-1), dist.entropy().sum(-1).mean()
    lp, ent = gaussian_log_prob(mu, log_std, actions), gaussian_entropy(log_std)
    torch.testing.assert_close(lp, ref_lp, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(ent, ref_ent, rtol=1e-12, atol=1e-12)
    w = torch.randn(32, generator=g, dtype=torch.float64)
    grads = torch.autograd.grad((lp * w).sum() + 0.3 * ent, (mu, log_std))
    ref_grads = torch.autograd.grad((ref_lp * w).sum() + 0.3 * ref_ent, (mu, log_std))
    for a, b in zip(grads, ref_grads, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-12, atol=1e-12)


def test_gaussian_kl_with_state_independent_std_broadcasts():
    """[A] standard deviations against [B, A] means give torch's KL(N0 || N1) per sample."""
    g = torch.Generator().manual_seed(5)
    mu0, mu1 = torch.randn(16, 3, generator=g), torch.randn(16, 3, generator=g)
    s0, s1 = torch.rand(3, generator=g) + 0.5, torch.rand(3, generator=g) + 0.5
    ref = kl_divergence(Normal(mu0, s0.expand_as(mu0)), Normal(mu1, s1.expand_as(mu1))).sum(-1)
    torch.testing.assert_close(gaussian_kl(mu0, s0, mu1, s1), ref, rtol=1e-5, atol=1e-6)
