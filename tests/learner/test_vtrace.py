"""V-trace against slow per-element references written straight from the IMPALA formulas."""

from __future__ import annotations

import math

import pytest
import torch

from learner.vtrace import vtrace, vtrace_stats

T, N, GAMMA = 16, 8, 0.97


def random_batch(seed: int, dtype=torch.float64, log_prob_spread: float = 1.0) -> dict:
    g = torch.Generator().manual_seed(seed)
    behavior = -torch.rand(T, N, generator=g, dtype=dtype) * 3.0
    target = behavior + torch.randn(T, N, generator=g, dtype=dtype) * log_prob_spread
    dones = (torch.rand(T, N, generator=g) < 0.15).to(dtype)
    dones[:, 0] = 0.0  # one env bootstraps across the whole horizon
    dones[-1, 1] = 1.0  # and one ends exactly at the horizon, so the bootstrap must be masked
    return {
        "behavior_log_probs": behavior,
        "target_log_probs": target,
        "rewards": torch.randn(T, N, generator=g, dtype=dtype),
        "values": torch.randn(T, N, generator=g, dtype=dtype),
        "bootstrap_values": torch.randn(N, generator=g, dtype=dtype),
        "dones": dones,
    }


def reference_vtrace(b: dict, gamma: float, clip_rho: float, clip_c: float, lam: float = 1.0) -> tuple[list, list]:
    """vs by the forward-sum definition and advantages from it, one element at a time."""
    keys = ("behavior_log_probs", "target_log_probs", "rewards", "values", "bootstrap_values", "dones")
    bl, tl, r, v, boot, d = (b[k].tolist() for k in keys)
    n_t, n_n = len(r), len(r[0])

    def value_at(t: int, n: int) -> float:
        return boot[n] if t == n_t else v[t][n]

    rho = [[math.exp(tl[t][n] - bl[t][n]) for n in range(n_n)] for t in range(n_t)]
    delta = [[min(clip_rho, rho[t][n]) * (r[t][n] + gamma * (1 - d[t][n]) * value_at(t + 1, n) - v[t][n])
              for n in range(n_n)] for t in range(n_t)]
    vs = [[0.0] * n_n for _ in range(n_t)]
    for n in range(n_n):
        for t in range(n_t):
            total, weight = v[t][n], 1.0
            for s in range(t, n_t):
                total += weight * delta[s][n]
                weight *= gamma * lam * min(clip_c, rho[s][n]) * (1 - d[s][n])
            vs[t][n] = total

    def vs_at(t: int, n: int) -> float:
        return boot[n] if t == n_t else vs[t][n]

    adv = [[min(clip_rho, rho[t][n]) * (r[t][n] + gamma * (1 - d[t][n]) * vs_at(t + 1, n) - v[t][n])
            for n in range(n_n)] for t in range(n_t)]
    return vs, adv


def run(b: dict, gamma: float = GAMMA, clip_rho: float = 1.0, clip_c: float = 1.0, lam: float = 1.0,
        advantage: str = "impala"):
    return vtrace(**b, gamma=gamma, clip_rho=clip_rho, clip_c=clip_c, lam=lam, advantage=advantage)


@pytest.mark.parametrize("clip_rho,clip_c,lam", [(1.0, 1.0, 1.0), (2.0, 1.0, 1.0), (0.8, 1.5, 1.0), (1.0, 0.5, 1.0),
                                                 (1.0, 1.0, 0.95), (2.0, 1.0, 0.8), (0.8, 1.5, 0.5)])
def test_matches_forward_sum_reference(clip_rho, clip_c, lam):
    """vs and advantages equal the per-element IMPALA definitions with clipping, lambda and episode ends."""
    b = random_batch(seed=int(10 * clip_rho + clip_c))
    rho = torch.exp(b["target_log_probs"] - b["behavior_log_probs"])
    # Both sides of both clips must occur, or the test would not exercise the clipping.
    for clip in (clip_rho, clip_c):
        assert (rho > clip).any() and (rho < clip).any()
    assert b["dones"].sum() >= 5 and (b["dones"].sum(0) == 0).any()
    vs, adv = run(b, clip_rho=clip_rho, clip_c=clip_c, lam=lam)
    ref_vs, ref_adv = reference_vtrace(b, GAMMA, clip_rho, clip_c, lam)
    torch.testing.assert_close(vs, torch.tensor(ref_vs, dtype=torch.float64), rtol=1e-10, atol=1e-10)
    torch.testing.assert_close(adv, torch.tensor(ref_adv, dtype=torch.float64), rtol=1e-10, atol=1e-10)


def td_lambda1_returns(b: dict, gamma: float) -> list:
    """Discounted reward sums to the episode end, or to the horizon plus the discounted bootstrap."""
    r, d, boot = b["rewards"].tolist(), b["dones"].tolist(), b["bootstrap_values"].tolist()
    out = [[0.0] * N for _ in range(T)]
    for n in range(N):
        for t in range(T):
            total, ended = 0.0, False
            for s in range(t, T):
                total += gamma ** (s - t) * r[s][n]
                if d[s][n]:
                    ended = True
                    break
            if not ended:
                total += gamma ** (T - t) * boot[n]
            out[t][n] = total
    return out


def test_on_policy_reduces_to_monte_carlo_bootstrap_return():
    """With target == behaviour (rho = 1), vs is the TD(lambda=1) return cut at episode ends."""
    b = random_batch(seed=3)
    b["target_log_probs"] = b["behavior_log_probs"].clone()
    vs, adv = run(b, clip_rho=1.0, clip_c=1.0)
    ref = torch.tensor(td_lambda1_returns(b, GAMMA), dtype=torch.float64)
    torch.testing.assert_close(vs, ref, rtol=1e-10, atol=1e-10)
    next_vs = torch.cat([ref[1:], b["bootstrap_values"][None]])
    expected_adv = b["rewards"] + GAMMA * (1 - b["dones"]) * next_vs - b["values"]
    torch.testing.assert_close(adv, expected_adv, rtol=1e-10, atol=1e-10)


def gae_reference(rewards, values, bootstrap, terminated, timed_out, final_values, gamma, lam):
    """GAE(lambda) the textbook way: a terminal step bootstraps 0, a time-out its final state's value."""
    n_t, n_n = len(rewards), len(rewards[0])
    adv = [[0.0] * n_n for _ in range(n_t)]
    for n in range(n_n):
        running = 0.0
        for t in reversed(range(n_t)):
            if terminated[t][n]:
                next_value, running = 0.0, 0.0
            elif timed_out[t][n]:
                next_value, running = final_values[t][n], 0.0
            else:
                next_value = bootstrap[n] if t == n_t - 1 else values[t + 1][n]
            delta = rewards[t][n] + gamma * next_value - values[t][n]
            running = delta + gamma * lam * running
            adv[t][n] = running
    returns = [[adv[t][n] + values[t][n] for n in range(n_n)] for t in range(n_t)]
    return returns, adv


@pytest.mark.parametrize("lam", [0.0, 0.5, 0.95, 1.0])
def test_on_policy_targets_are_gae_lambda_returns(lam):
    """With rho = 1, vs equals GAE(lambda)'s lambda-returns across terminations and time-outs (1e-6),
    and the "gae" advantage equals GAE's advantage."""
    b = random_batch(seed=21)
    b["target_log_probs"] = b["behavior_log_probs"].clone()
    g = torch.Generator().manual_seed(22)
    raw = torch.randn(T, N, generator=g, dtype=torch.float64)
    timed_out = b["dones"].bool() & (torch.rand(T, N, generator=g) < 0.5)
    terminated = b["dones"].bool() & ~timed_out
    final_values = torch.randn(T, N, generator=g, dtype=torch.float64)
    assert timed_out.sum() >= 2 and terminated.sum() >= 2
    # What the collector sends: a time-out's reward with gamma * V(final state) folded in, done = 1.
    b["rewards"] = raw + GAMMA * final_values * timed_out
    vs, adv = run(b, lam=lam, advantage="gae")
    ref_returns, ref_adv = gae_reference(raw.tolist(), b["values"].tolist(), b["bootstrap_values"].tolist(),
                                         terminated.tolist(), timed_out.tolist(), final_values.tolist(), GAMMA, lam)
    torch.testing.assert_close(vs, torch.tensor(ref_returns, dtype=torch.float64), rtol=1e-6, atol=1e-6)
    torch.testing.assert_close(adv, torch.tensor(ref_adv, dtype=torch.float64), rtol=1e-6, atol=1e-6)


def vtrace_before_lambda(b: dict, gamma: float, clip_rho: float, clip_c: float):
    """The implementation as it stood before lambda (c_t = min(c_bar, rho_t)), kept to pin its numbers."""
    values, boot = b["values"], b["bootstrap_values"]
    rho = torch.exp(b["target_log_probs"] - b["behavior_log_probs"])
    rho_bar, c = rho.clamp(max=clip_rho), rho.clamp(max=clip_c)
    discount = gamma * (1.0 - b["dones"].to(values.dtype))
    nxt = torch.cat([values[1:], boot.unsqueeze(0)])
    deltas = rho_bar * (b["rewards"] + discount * nxt - values)
    decay = discount * c
    corrections = torch.empty_like(values)
    acc = torch.zeros_like(boot)
    for t in range(values.shape[0] - 1, -1, -1):
        acc = torch.addcmul(deltas[t], decay[t], acc, out=corrections[t])
    vs = values + corrections
    return vs, rho_bar * (b["rewards"] + discount * torch.cat([vs[1:], boot.unsqueeze(0)]) - values)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_lambda_one_reproduces_plain_vtrace_exactly(dtype):
    """lam = 1 gives bit-identical targets and advantages to V-trace without lambda; lam < 1 does not."""
    b = {k: x.to(dtype) for k, x in random_batch(seed=31).items()}
    vs, adv = run(b, clip_rho=1.2, clip_c=0.9, lam=1.0)
    old_vs, old_adv = vtrace_before_lambda(b, GAMMA, 1.2, 0.9)
    assert torch.equal(vs, old_vs) and torch.equal(adv, old_adv)
    assert not torch.allclose(run(b, clip_rho=1.2, clip_c=0.9, lam=0.95)[0], old_vs)


def test_gae_advantage_is_the_target_minus_the_value_off_policy_too():
    """advantage="gae" returns vs - V(x) whatever rho; the targets do not depend on the choice."""
    b = random_batch(seed=41)
    vs, adv = run(b, clip_rho=1.0, clip_c=1.0, lam=0.9, advantage="gae")
    vs_impala, adv_impala = run(b, clip_rho=1.0, clip_c=1.0, lam=0.9)
    assert torch.equal(vs, vs_impala)
    torch.testing.assert_close(adv, vs - b["values"], rtol=1e-12, atol=1e-12)
    assert not torch.allclose(adv, adv_impala)


def test_columns_are_independent():
    """Column n of a batched call equals a call on column n alone."""
    b = random_batch(seed=5)
    vs, adv = run(b, clip_rho=1.5, clip_c=0.9)
    for n in range(N):
        col = {k: (x[n:n + 1] if x.dim() == 1 else x[:, n:n + 1]) for k, x in b.items()}
        vs_n, adv_n = run(col, clip_rho=1.5, clip_c=0.9)
        torch.testing.assert_close(vs[:, n:n + 1], vs_n, rtol=0, atol=0)
        torch.testing.assert_close(adv[:, n:n + 1], adv_n, rtol=0, atol=0)


def test_done_masks_next_state():
    """A done at step t ignores V(x_{t+1}) and vs_{t+1}: changing them leaves step t untouched."""
    b = random_batch(seed=7)
    b["dones"].zero_()
    b["dones"][5] = 1.0
    vs, adv = run(b, clip_rho=1.3, clip_c=1.1)
    b2 = {k: x.clone() for k, x in b.items()}
    b2["values"][6:] += 100.0
    b2["rewards"][6:] -= 50.0
    b2["bootstrap_values"] += 100.0
    vs2, adv2 = run(b2, clip_rho=1.3, clip_c=1.1)
    torch.testing.assert_close(vs[:6], vs2[:6], rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(adv[:6], adv2[:6], rtol=1e-12, atol=1e-12)


def test_float32_no_grad_and_dtype():
    """float32 inputs give float32 outputs close to the float64 result, with no autograd graph."""
    b64 = random_batch(seed=11)
    b32 = {k: x.float().requires_grad_(k in ("values", "target_log_probs")) for k, x in b64.items()}
    vs32, adv32 = run(b32, clip_rho=1.0, clip_c=1.0)
    vs64, adv64 = run(b64, clip_rho=1.0, clip_c=1.0)
    assert vs32.dtype == adv32.dtype == torch.float32
    assert not vs32.requires_grad and not adv32.requires_grad
    torch.testing.assert_close(vs32.double(), vs64, rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(adv32.double(), adv64, rtol=1e-4, atol=1e-4)


def test_vtrace_stats_hand_computed():
    """Stats on a known batch: 2 of 4 rho above the clip, p99 is the largest rho, mean |delta| by hand."""
    behavior = torch.zeros(2, 2)
    target = torch.tensor([[math.log(2.0), math.log(0.5)], [0.0, math.log(4.0)]])
    stats = vtrace_stats(behavior, target, clip_rho=1.0)
    assert stats["rho_clip_fraction"].item() == pytest.approx(0.5)
    assert stats["rho_p99"].item() == pytest.approx(4.0)
    assert stats["log_prob_delta_abs_mean"].item() == pytest.approx((math.log(2) * 2 + math.log(4)) / 4)


def test_vtrace_stats_p99_nearest_rank():
    """On rho = 1..200 the 99th percentile by nearest rank is the 198th value."""
    rho = torch.arange(1, 201, dtype=torch.float64)
    stats = vtrace_stats(torch.zeros(200), torch.log(rho), clip_rho=150.5)
    assert stats["rho_p99"].item() == pytest.approx(198.0)
    assert stats["rho_clip_fraction"].item() == pytest.approx(50 / 200)
