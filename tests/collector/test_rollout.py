"""The collector's rollout loop on real MuJoCo envs: the double-buffered groups against one-at-a-time stepping,
with either inference backend."""

from __future__ import annotations

import threading

import numpy as np
import pytest
import torch

from collector.envs import EnvGroups, make_env
from collector.envs.batched import BatchedEnv
from collector.envs.go2.task import Go2JoystickFlat
from collector.envs.gym_tasks import HalfCheetah
from collector.rollout import Collector
from common.config import AppoConfig, load_config
from common.policy import ActorCritic, flat_weights
from common.rollout_spec import allocate

T = 6


def _groups(cls: type[BatchedEnv], n: int, groups: int, seed: int, max_steps: int) -> EnvGroups:
    return EnvGroups.build(lambda k, t, s, st: cls(k, t, s, max_episode_steps=max_steps, stepper=st),
                           n, groups, 2, seed)


def _published(cfg: AppoConfig, env) -> ActorCritic:
    """The actor-critic whose flat weights every test collector loads (the same for a given config)."""
    torch.manual_seed(0)
    return ActorCritic.from_config(cfg, env.spec)


def _collector(env, overlap: bool = True, precision: str = "auto", inference: str = "torch") -> Collector:
    cfg = load_config(extra={"task": env.spec.name, "algo": {"num_envs": env.num_envs, "steps_per_env": T},
                             "training": {"precision": precision, "collector_inference": inference}}, environ={})
    c = Collector(cfg, env, channel=None, stop_event=threading.Event(), overlap=overlap)
    c.inference.load(flat_weights(_published(cfg, env)))
    return c


def _rollouts(c: Collector, count: int, seed: int = 3) -> tuple[list[dict[str, np.ndarray]], list[dict]]:
    """`count` consecutive rollouts from a fresh reset, and the episode summaries after each."""
    c.inference.seed(seed)
    obs, critic = c.env.reset()
    outs, stats = [], []
    for _ in range(count):
        out = allocate(c.spec)
        obs, critic, _ = c.fill_rollout(out, obs, critic)
        outs.append(out)
        stats.append(c.episodes.summary())
    return outs, stats


def _assert_same(a: list[dict[str, np.ndarray]], b: list[dict[str, np.ndarray]]) -> None:
    for x, y in zip(a, b, strict=True):
        assert x.keys() == y.keys()
        for k in x:
            np.testing.assert_array_equal(x[k], y[k], err_msg=k)


@pytest.mark.parametrize("cls,inference", [(Go2JoystickFlat, "torch"), (HalfCheetah, "torch"),
                                           (Go2JoystickFlat, "numpy")])
def test_overlapped_groups_give_the_rollouts_of_one_at_a_time_stepping(cls, inference):
    """With fixed seed and weights, the double-buffered loop writes bit-identical rollouts and episode stats."""
    envs = [_groups(cls, 12, 2, seed=7, max_steps=4) for _ in range(2)]
    overlapped = _collector(envs[0], overlap=True, inference=inference)
    plain = _collector(envs[1], overlap=False, inference=inference)
    assert all(g.overlap for g in overlapped.groups) and not any(g.overlap for g in plain.groups)
    a, stats_a = _rollouts(overlapped, 3)
    b, stats_b = _rollouts(plain, 3)
    for env in envs:
        env.close()
    assert sum(out["truncated"].sum() for out in a) > 0  # timeout bootstraps were exercised
    _assert_same(a, b)
    assert stats_a == stats_b and stats_a[-1]["episodes"] > 0


def test_one_group_is_the_plain_env():
    """An EnvGroups of one group records exactly what the plain env (same generator) records."""
    grouped = _groups(HalfCheetah, 8, 1, seed=2, max_steps=5)
    env = HalfCheetah(8, 2, 0, max_episode_steps=5)
    env.rng = np.random.default_rng(2).spawn(1)[0]
    a_col = _collector(grouped)
    b_col = _collector(env)
    assert a_col.groups[0].overlap and not b_col.groups[0].overlap
    a, _ = _rollouts(a_col, 2)
    b, _ = _rollouts(b_col, 2)
    grouped.close()
    env.close()
    _assert_same(a, b)


@pytest.mark.parametrize("precision,inference", [("fp32", "torch"), ("bf16", "torch"), ("bf16", "numpy")])
def test_grouped_rollout_is_complete_and_consistent(precision, inference):
    """Every row of every field is written; log-probs are the policy's; time limits end every episode together.

    NumPy inference is float32 whatever the precision."""
    env = _groups(HalfCheetah, 10, 2, seed=1, max_steps=4)  # half_cheetah never terminates
    c = _collector(env, precision=precision, inference=inference)
    (out,), _ = _rollouts(c, 1)
    env.close()
    for k, v in out.items():
        assert np.isfinite(v).all(), k  # allocate() poisons with NaN
    policy = _published(c.cfg, env)
    obs = torch.from_numpy(out["obs"].reshape(-1, c.spec.obs_dim))
    actions = torch.from_numpy(out["actions"].reshape(-1, c.spec.act_dim))
    with torch.no_grad():
        fp32 = policy.distribution(obs).log_prob(actions).sum(-1).reshape(c.spec.num_envs, T)
        mu = policy.actor_mean(policy.obs_normalizer(obs), torch.bfloat16)
        bf16 = torch.distributions.Normal(mu, policy.log_std.exp()).log_prob(actions).sum(-1)
    if precision == "fp32" or inference == "numpy":
        np.testing.assert_allclose(out["log_probs"], fp32.numpy(), rtol=1e-6, atol=1e-5)
    else:  # the density of the bf16 means the actions were drawn around, not of the fp32 ones
        np.testing.assert_allclose(out["log_probs"], bf16.reshape(c.spec.num_envs, T).numpy(), rtol=1e-3, atol=1e-3)
        assert np.abs(out["log_probs"] - fp32.numpy()).max() > 1e-4
    ends = np.zeros((c.spec.num_envs, T), np.float32)
    ends[:, 3] = 1.0  # step index 3 is the 4th step of the first episode
    np.testing.assert_array_equal(out["dones"], ends)
    np.testing.assert_array_equal(out["truncated"], ends)
    assert not np.array_equal(out["obs"][:5, 0], out["obs"][5:, 0])  # the two groups are seeded apart


@pytest.mark.parametrize("inference", ["torch", "numpy"])
def test_deterministic_reset_reproduces_a_grouped_rollout(inference):
    """_reset_for(version) reseeds every group and the action noise, so the same version gives the same rollout."""
    env = _groups(Go2JoystickFlat, 8, 2, seed=0, max_steps=100)
    c = _collector(env, inference=inference)
    outs = []
    for _ in range(2):
        obs, critic = c._reset_for(5)
        out = allocate(c.spec)
        c.fill_rollout(out, obs, critic)
        outs.append(out)
    obs, critic = c._reset_for(6)
    other = allocate(c.spec)
    c.fill_rollout(other, obs, critic)
    env.close()
    _assert_same([outs[0]], [outs[1]])
    assert not np.array_equal(outs[0]["obs"], other["obs"])


@pytest.mark.parametrize("inference", ["torch", "numpy"])
def test_plain_env_loop_is_unchanged_by_the_grouping_code(inference):
    """On a plain env the loop samples over all N envs at once, as before the groups."""
    env = make_env("half_cheetah", 6, 1, seed=9)
    c = _collector(env, inference=inference)
    c.inference.seed(11)
    obs, critic = env.reset()
    out = allocate(c.spec)
    c.fill_rollout(out, obs, critic)
    c.inference.seed(11)
    actions, log_probs = c.inference.sample(obs)
    env.close()
    np.testing.assert_array_equal(out["obs"][:, 0], obs)
    np.testing.assert_array_equal(out["actions"][:, 0], actions)
    np.testing.assert_array_equal(out["log_probs"][:, 0], log_probs)


def test_episode_tracker_rows_equal_a_whole_step():
    """Stepping the tracker group by group (row slices) gives the totals and summary of one whole step."""
    from collector.rollout import EpisodeTracker

    rng = np.random.default_rng(0)
    whole, parts = EpisodeTracker(7, ("a", "b")), EpisodeTracker(7, ("a", "b"))
    halves = [slice(0, 3), slice(3, 7)]
    for _ in range(6):
        rewards = rng.standard_normal(7)
        terms = {"a": rng.standard_normal(7), "b": rng.standard_normal(7)}
        done, trunc = rng.random(7) < 0.3, rng.random(7) < 0.1
        tracking = rng.random((2, 7))
        whole.step(rewards, terms, done, trunc & done, tracking)
        for rows in halves:
            parts.step(rewards[rows], {k: v[rows] for k, v in terms.items()}, done[rows], (trunc & done)[rows],
                       tracking[:, rows], rows=rows)
    np.testing.assert_array_equal(whole.ret, parts.ret)
    np.testing.assert_array_equal(whole.track_n, parts.track_n)
    a, b = whole.summary(), parts.summary()
    assert a["episodes"] == b["episodes"] > 0
    for k in ("return_mean", "length_mean", "timeout_rate", "tracking_xy_rms", "tracking_yaw_rms"):
        assert a[k] == pytest.approx(b[k], rel=1e-12)
