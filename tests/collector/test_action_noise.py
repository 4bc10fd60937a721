"""collector/action_noise.py: coloured draws have the asked spectrum and unit variance, and the collector acts with
them, its log-probs still those of the Gaussian policy."""

from __future__ import annotations

import threading

import numpy as np
import pytest
import torch

from collector.action_noise import ColoredNoise, colored_sequences
from collector.envs import EnvGroups
from collector.envs.gym_tasks import HalfCheetah
from collector.rollout import Collector
from common.config import ConfigError, load_config
from common.policy import ActorCritic, flat_weights
from common.rollout_spec import allocate


def _lag_correlation(x: np.ndarray, lag: int) -> float:
    """Correlation of a sequence batch [..., T] with itself `lag` steps later, pooled over the batch."""
    return float(np.mean(x[..., lag:] * x[..., :-lag]) / np.mean(x ** 2))


@pytest.mark.parametrize("beta", [0.0, 0.5, 1.0, 2.0])
@pytest.mark.parametrize("horizon", [256, 255])
def test_sequences_have_the_power_law_spectrum_and_unit_variance_at_every_step(beta, horizon):
    """The averaged periodogram falls as f^-beta (fitted slope within 0.1); each step's draws have mean 0 and
    variance 1 across 4,000 sequences (within 0.1), so every draw is standard normal as the policy assumes."""
    x = colored_sequences(beta, (4000,), horizon, np.random.default_rng(1))
    assert x.dtype == np.float32 and x.shape == (4000, horizon)
    psd = np.mean(np.abs(np.fft.rfft(x, axis=1)) ** 2, axis=0)
    f = np.fft.rfftfreq(horizon)
    band = (f > 0.01) & (f < 0.4)
    slope = np.polyfit(np.log(f[band]), np.log(psd[band]), 1)[0]
    assert abs(slope + beta) < 0.1, slope
    assert np.abs(x.mean(axis=0)).max() < 0.1
    assert np.abs(x.var(axis=0) - 1.0).max() < 0.1


def test_white_draws_are_uncorrelated_and_pink_ones_are_not():
    """beta 0: neighbouring steps uncorrelated (|r| < 0.02); beta 1: r about 0.72 at one step, still 0.3 at ten."""
    rng = np.random.default_rng(2)
    white, pink = colored_sequences(0.0, (2000,), 256, rng), colored_sequences(1.0, (2000,), 256, rng)
    assert abs(_lag_correlation(white, 1)) < 0.02
    assert 0.65 < _lag_correlation(pink, 1) < 0.8 and _lag_correlation(pink, 10) > 0.25


def test_row_blocks_keep_their_own_clocks_and_a_reseed_repeats_them():
    """Two blocks drawn at different rates each walk their own sequences; reseeding restarts both exactly."""
    noise = ColoredNoise(6, 3, 1.0, seed=5, horizon=8)
    a, b = slice(0, 4), slice(4, 6)
    first_a = [noise.draw(a).copy() for _ in range(3)]
    first_b = noise.draw(b).copy()
    assert first_b.shape == (2, 3) and first_a[0].shape == (4, 3)
    np.testing.assert_array_equal(first_b, noise._sequences[4:6, :, 0])  # b's first step, whatever a did
    rest_a = [noise.draw(a).copy() for _ in range(6)]  # a uses its 8 steps up, then gets a fresh sequence
    assert not np.array_equal(rest_a[-1], first_a[0])
    noise.seed(5)
    again = [noise.draw(a).copy() for _ in range(3)]
    for x, y in zip(first_a, again, strict=True):
        np.testing.assert_array_equal(x, y)


def test_a_beta_outside_0_to_2_is_refused_naming_the_field():
    """The config refuses -0.5 and 3 for algo.policy.action_noise_beta."""
    for bad in ("-0.5", "3"):
        with pytest.raises(ConfigError, match=r"action_noise_beta"):
            load_config([f"algo.policy.action_noise_beta={bad}"], environ={})


@pytest.mark.parametrize("inference", ["torch", "numpy"])
@pytest.mark.parametrize("beta", [0.0, 1.0])
def test_the_collector_acts_with_the_coloured_draws_and_the_gaussian_log_probs(inference, beta):
    """Over two env groups, the rollout's draws (actions - mu) / std are correlated step to step as beta asks
    (beta 1: r > 0.55; beta 0: |r| < 0.1), and the recorded log-probs are the policy's Gaussian density of the
    actions (to float32)."""
    steps = 64
    env = EnvGroups.build(lambda k, t, s, st: HalfCheetah(k, t, s, max_episode_steps=1000, stepper=st), 16, 2, 2, 4)
    cfg = load_config(extra={"task": "half_cheetah", "algo": {"num_envs": 16, "steps_per_env": steps,
                                                               "policy": {"action_noise_beta": beta}},
                             "training": {"precision": "fp32", "collector_inference": inference}}, environ={})
    collector = Collector(cfg, env, channel=None, stop_event=threading.Event(), seed=3)
    torch.manual_seed(0)
    policy = ActorCritic.from_config(cfg, env.spec)
    collector.inference.load(flat_weights(policy))
    obs, critic = env.reset()
    out = allocate(collector.spec)
    collector.fill_rollout(out, obs, critic)
    env.close()
    flat_obs = torch.from_numpy(out["obs"].reshape(-1, collector.spec.obs_dim))
    actions = torch.from_numpy(out["actions"].reshape(-1, collector.spec.act_dim))
    with torch.no_grad():
        dist = policy.distribution(flat_obs)
        log_probs = dist.log_prob(actions).sum(-1).reshape(16, steps).numpy()
        draws = ((actions - dist.mean) / dist.stddev).reshape(16, steps, -1).numpy()
    np.testing.assert_allclose(out["log_probs"], log_probs, rtol=1e-5, atol=1e-4)
    r = _lag_correlation(np.moveaxis(draws, 1, -1), 1)
    assert (r > 0.55) if beta else (abs(r) < 0.1), r
