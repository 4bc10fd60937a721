"""The APPO update's device-side learning rate, its host-sync-free minibatch loop, its CPU streams and checkpoints."""

from __future__ import annotations

import math

import pytest
import torch
from torch import nn

from common.config import load_config
from common.synthetic import synthetic_batch
from common.task_spec import task_spec
from learner.appo import _SUMS, APPO
from learner.lr_schedule import adaptive_lr, adaptive_lr_

TASK = task_spec("go2_joystick_flat")
CPU = torch.device("cpu")


def _cfg(*overrides: str):
    return load_config(["algo.num_envs=16", "algo.steps_per_env=6", "algo.policy.actor_hidden_dims=[32,16]",
                        "algo.policy.critic_hidden_dims=[24]", "training.device=cpu",
                        "training.precision=fp32", *overrides],  # exact float32 equalities below
                       extra={"task": "go2_joystick_flat"}, environ={})


def _appo(cfg, seed: int = 0) -> tuple[APPO, dict]:
    torch.manual_seed(seed)
    appo = APPO(cfg, TASK, CPU)
    batch = synthetic_batch(TASK, cfg.algo.num_envs, cfg.algo.steps_per_env, 1, CPU, appo.model, seed=3)
    with torch.no_grad():  # a target away from the current policy: a real KL from the first step
        for p in appo.target.actor.parameters():
            p.add_(0.05 * torch.randn_like(p))
    appo.update_normalizers(batch)
    return appo, batch


@pytest.fixture(params=[1, 2], ids=["one-stream", "two-streams"])
def threads(request):
    """Run under 1 torch thread (one stream) and 2 (actor and critic side by side)."""
    before = torch.get_num_threads()
    torch.set_num_threads(request.param)
    yield request.param
    torch.set_num_threads(before)


# ------------------------------------------------------------------ the learning rate on the device


KLS = [0.0, 0.02, 0.013, 0.012, 0.01 * 1.2, 0.01 / 1.2, 0.008, 0.0085, float("nan"), 1e-9, 5.0, 0.011, 1e-4]


@pytest.mark.parametrize("start", [1e-3, 1.05e-5, 9.5e-3])
def test_device_rule_gives_the_float_rule_sequence_bit_for_bit(start):
    """adaptive_lr_ on a float64 tensor walks exactly the float rule's rates (band edges, 0, NaN, floor, cap)."""
    lr_t, lr = torch.tensor(start, dtype=torch.float64), start
    seen = set()
    first = [5.0, 5.0] if start < 1e-4 else [1e-4, 1e-4]  # straight into the floor or the cap
    for kl in first + KLS * 3:
        kl32 = torch.tensor(kl, dtype=torch.float32)  # the KL is computed in float32 on the device
        lr = adaptive_lr(lr, kl32.item(), 0.01, 1.2, 1.1)  # the float rule on kl.item(), as a host-side loop
        adaptive_lr_(lr_t, kl32, 0.01, 1.2, 1.1)
        assert lr_t.item() == lr
        seen.add(lr)
    assert lr_t.dtype == torch.float64 and lr_t.dim() == 0
    assert len(seen) >= 3  # it moved
    assert {1.05e-5: min(seen) == 1e-5, 9.5e-3: max(seen) == 1e-2}.get(start, True)  # floor and cap reached


def _float_lr_steps(appo: APPO, minibatches: list[torch.Tensor]) -> list[float]:
    """The straightforward loop: kl.item(), the float rule, a float lr set per step, default Adam, torch's clipping."""
    c = appo.cfg
    optimizer = torch.optim.Adam(appo.model.parameters(), lr=c.learning_rate)
    lr, lrs = c.learning_rate, []
    for mb in minibatches:
        optimizer.zero_grad(set_to_none=True)
        actor_loss, *_, kl = appo._actor_loss_terms(mb, appo.target.log_std)
        lr = adaptive_lr(lr, kl.item(), c.desired_kl, c.kl_factor, c.lr_factor)
        for group in optimizer.param_groups:
            group["lr"] = lr
        critic_loss, _ = appo._critic_loss_terms(mb)
        (actor_loss + critic_loss).backward()
        if c.grad_clip == "per_network":
            nn.utils.clip_grad_norm_(appo._actor_params, c.max_grad_norm)
            nn.utils.clip_grad_norm_(appo._critic_params, c.max_grad_norm)
        else:
            nn.utils.clip_grad_norm_(appo.model.parameters(), c.max_grad_norm)
        optimizer.step()
        lrs.append(lr)
    return lrs


@pytest.mark.parametrize("band", [("0.01", "1e-3"), ("1e-7", "2e-5"), ("10.0", "8e-3")],
                         ids=["in-and-out", "down-to-floor", "up-to-cap"])
def test_tensor_lr_steps_equal_the_float_lr_reference(band, threads):
    """N minibatch steps with the on-device lr and fused Adam: the same lr sequence and parameters as a float lr."""
    desired_kl, lr0 = band
    # the default band's small steps, so that the rate takes several values before floor or cap
    cfg = _cfg(f"algo.algorithm.desired_kl={desired_kl}", f"algo.algorithm.learning_rate={lr0}",
               "algo.algorithm.kl_factor=1.2", "algo.algorithm.lr_factor=1.1")
    ours, batch = _appo(cfg)
    ref, _ = _appo(cfg)
    assert ours.optimizer.defaults["fused"] and ours.optimizer.param_groups[0]["lr"] is ours._lr
    packed = ours.process(batch)["packed"]
    g = torch.Generator().manual_seed(11)
    minibatches = [packed.index_select(0, torch.randperm(16, generator=g)[:8]).flatten(0, 1) for _ in range(12)]
    lrs = []
    with ours._streams() as streams:
        for mb in minibatches:
            ours._step(mb, streams)
            lrs.append(ours._lr.item())
    ref_lrs = _float_lr_steps(ref, minibatches)
    assert lrs == ref_lrs
    assert len(set(lrs)) >= 3  # the rate moved
    for p, q in zip(ours.model.parameters(), ref.model.parameters(), strict=True):
        torch.testing.assert_close(p, q, rtol=1e-5, atol=1e-7)


def test_no_host_sync_inside_the_minibatch_loop(monkeypatch):
    """Nothing in the epochs x minibatches loop reads a tensor back to Python."""
    appo, batch = _appo(_cfg("algo.algorithm.num_learning_epochs=2", "algo.algorithm.num_mini_batches=2"))
    packed = appo.process(batch)["packed"]

    def forbidden(*_args, **_kwargs):
        raise AssertionError("host synchronisation inside the minibatch loop")

    with monkeypatch.context() as m:
        for name in ("item", "tolist", "__bool__", "__float__", "__int__", "numpy", "cpu"):
            m.setattr(torch.Tensor, name, forbidden)
        sums, steps = appo._minibatch_loop(packed, abort=lambda: False)
    assert steps == 4 and sums.shape == (len(_SUMS),)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_no_cuda_sync_inside_the_minibatch_loop():
    """On CUDA the whole loop runs under sync-debug mode 'error'."""
    cfg = _cfg("training.device=cuda")
    torch.manual_seed(0)
    appo = APPO(cfg, TASK, torch.device("cuda"))
    batch = synthetic_batch(TASK, 16, 6, 1, torch.device("cuda"), appo.model, seed=3)
    appo.update_normalizers(batch)
    packed = appo.process(batch)["packed"]
    appo._minibatch_loop(packed, abort=lambda: False)  # warm-up (allocations, lazy optimizer state)
    torch.cuda.set_sync_debug_mode("error")
    try:
        appo._minibatch_loop(packed, abort=lambda: False)
    finally:
        torch.cuda.set_sync_debug_mode("default")
    assert appo.optimizer.defaults["fused"]


def test_learning_rate_is_a_float_and_metrics_report_it():
    """learning_rate is a float as of the last update; Loss/learning_rate and the lr tensor agree."""
    appo, batch = _appo(_cfg("algo.algorithm.desired_kl=1e-7"))
    assert isinstance(appo.learning_rate, float) and appo.learning_rate == 1e-3
    metrics = appo.update(batch)
    assert isinstance(appo.learning_rate, float)
    assert metrics["Loss/learning_rate"] == appo.learning_rate == appo._lr.item() < 1e-3
    assert all(isinstance(v, float) and math.isfinite(v) for v in metrics.values())
    appo.learning_rate = 2e-4  # the setter is set_learning_rate
    assert appo.learning_rate == 2e-4 and appo._lr.item() == 2e-4
    assert appo.optimizer.param_groups[0]["lr"] is appo._lr


def test_abort_keeps_what_was_done():
    """An abort after the first minibatch still returns finite metrics over the steps taken."""
    appo, batch = _appo(_cfg())
    calls = []
    metrics = appo.update(batch, abort=lambda: calls.append(1) or len(calls) >= 1)
    assert math.isfinite(metrics["Loss/value"]) and appo.num_updates == 1


# ------------------------------------------------------------------ streams and compile


def test_one_and_two_streams_compute_the_same_update():
    """The actor and critic side by side (2 threads) give the update of one stream (1 thread)."""
    results = []
    before = torch.get_num_threads()
    try:
        for n in (1, 2):
            torch.set_num_threads(n)
            appo, batch = _appo(_cfg("algo.algorithm.num_learning_epochs=3", "algo.algorithm.num_mini_batches=2"))
            assert bool(appo._stream_threads()) == (n == 2)
            torch.manual_seed(5)
            metrics = appo.update(batch)
            results.append((metrics, [p.detach().clone() for p in appo.model.parameters()]))
    finally:
        torch.set_num_threads(before)
    (m1, p1), (m2, p2) = results
    for a, b in zip(p1, p2, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)
    for k in m1:
        assert m1[k] == pytest.approx(m2[k], rel=1e-4, abs=1e-6), k
    assert torch.get_num_threads() == before


@pytest.mark.slow
def test_compiled_update_equals_eager(threads):
    """training.compile=true computes the same update (after compiling on the first minibatch)."""
    results = []
    for flag in ("false", "true"):
        appo, batch = _appo(_cfg(f"training.compile={flag}"))
        for _ in range(2):
            torch.manual_seed(5)
            appo.update(batch)
        results.append([p.detach().clone() for p in appo.model.parameters()])
    for a, b in zip(*results, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-5)


# ------------------------------------------------------------------ checkpoints


def test_resume_continues_exactly(tmp_path):
    """Save after one update, load into a fresh APPO: the next update is identical, the lr tensor rebound."""
    a, batch = _appo(_cfg())
    a.update(batch)
    state = a.state_dict()
    assert isinstance(state["learning_rate"], float)
    assert all(isinstance(g["lr"], float) for g in state["optimizer"]["param_groups"])
    torch.save(state, tmp_path / "s.pt")
    b, _ = _appo(_cfg(), seed=9)
    b.load_state_dict(torch.load(tmp_path / "s.pt", weights_only=True))
    assert b.optimizer.param_groups[0]["lr"] is b._lr and b.optimizer.param_groups[0]["fused"]
    assert b.learning_rate == a.learning_rate and b.num_updates == 1
    for x in (a, b):
        torch.manual_seed(5)
        x.update(batch)
    for p, q in zip(a.model.parameters(), b.model.parameters(), strict=True):
        assert torch.equal(p, q)
    assert a.learning_rate == b.learning_rate


def test_loads_an_optimizer_saved_without_fused_kernels():
    """A checkpoint written by the float-lr loop (plain Adam, float lr, CPU step counters) loads and trains."""
    a, batch = _appo(_cfg())
    plain = torch.optim.Adam(a.model.parameters(), lr=5e-4)
    for p in a.model.parameters():
        p.grad = torch.ones_like(p)
    plain.step()
    state = {**a.state_dict(), "optimizer": plain.state_dict(), "learning_rate": 5e-4}
    b, _ = _appo(_cfg(), seed=2)
    b.load_state_dict(state)
    group = b.optimizer.param_groups[0]
    assert group["fused"] and group["lr"] is b._lr and b.learning_rate == 5e-4
    metrics = b.update(batch)
    assert math.isfinite(metrics["Loss/surrogate"])


def test_chunked_process_equals_one_pass(threads):
    """Forward passes a few envs at a time (as on a CPU at full size) give the one-pass fixed quantities."""
    appo, batch = _appo(_cfg())
    whole = {k: v.clone() for k, v in appo.process(batch).items()}
    appo.chunk_rows = 2 * batch["obs"].shape[0] + 1  # 2 envs a chunk, 8 chunks
    assert len(appo._env_chunks(16, batch["obs"].shape[0])) == 8
    chunked = appo.process(batch)
    for k, v in whole.items():
        torch.testing.assert_close(chunked[k], v, rtol=1e-6, atol=1e-6)
    assert not whole["packed"].isnan().any()


def test_minibatch_in_parts_gives_the_whole_minibatch_step(threads):
    """Backpropagating a minibatch in row parts (weighted by their share) is the whole minibatch's step."""
    results = []
    for rows in (0, 20):  # 0: one part; 20 rows: 48-row minibatches in 3 parts (16, 16, 16)
        appo, batch = _appo(_cfg("algo.algorithm.num_learning_epochs=2", "algo.algorithm.num_mini_batches=2"))
        appo.chunk_rows = rows
        packed = appo.process(batch)["packed"]
        assert len(appo._row_chunks(packed[:8].flatten(0, 1))) == (3 if rows else 1)
        torch.manual_seed(5)
        metrics = appo.update(batch)
        results.append((metrics, [p.detach().clone() for p in appo.model.parameters()]))
    (m1, p1), (m2, p2) = results
    for a, b in zip(p1, p2, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)
    for k in m1:
        assert m1[k] == pytest.approx(m2[k], rel=1e-5, abs=1e-7), k


# ------------------------------------------------------------------ gradient clipping and update metrics


def _set_grads(appo: APPO, actor_norm: float, critic_norm: float) -> None:
    """Gradients of the given norm on each network: the same direction in every element."""
    actor = [appo.model.log_std, *appo.model.actor.parameters()]
    critic = list(appo.model.critic.parameters())
    for params, norm in ((actor, actor_norm), (critic, critic_norm)):
        count = sum(p.numel() for p in params)
        for p in params:
            p.grad = torch.full_like(p, norm / math.sqrt(count))


def _norm(params) -> float:
    return math.sqrt(sum(float(p.grad.square().sum()) for p in params))


@pytest.mark.parametrize("mode,after", [("per_network", (1.0, 0.5)),
                                        ("joint", (3.0 / math.hypot(3.0, 0.5), 0.5 / math.hypot(3.0, 0.5)))])
def test_gradient_clipping_per_network_or_joint(mode, after):
    """per_network clips each network's gradient to max_grad_norm alone; joint scales both by one factor."""
    appo, _ = _appo(_cfg(f"algo.algorithm.grad_clip={mode}", "algo.algorithm.max_grad_norm=1.0"))
    _set_grads(appo, 3.0, 0.5)
    actor_norm, critic_norm = appo._clip_gradients()
    assert (actor_norm.item(), critic_norm.item()) == pytest.approx((3.0, 0.5), rel=1e-5)  # before clipping
    actor = [appo.model.log_std, *appo.model.actor.parameters()]
    assert (_norm(actor), _norm(appo.model.critic.parameters())) == pytest.approx(after, rel=1e-4)


def test_update_reports_each_networks_gradient_norm_and_explained_variance():
    """The update's metrics hold each network's pre-clip norm (their hypot is the global one) and the
    critic's explained variance, which fitting the critic on one batch raises."""
    appo, batch = _appo(_cfg("algo.algorithm.num_learning_epochs=8", "algo.algorithm.learning_rate=3e-3",
                             "algo.algorithm.schedule=fixed"))
    first = appo.update(batch)
    assert first["Train/actor_gradient_norm"] > 0 and first["Train/critic_gradient_norm"] > 0
    # Per-step hypot averaged over steps is at least the hypot of the averages (triangle inequality).
    assert first["Train/global_gradient_norm"] >= math.hypot(first["Train/actor_gradient_norm"],
                                                             first["Train/critic_gradient_norm"]) * (1 - 1e-6)
    for _ in range(5):
        last = appo.update(batch)
    assert first["Train/value_explained_variance"] < last["Train/value_explained_variance"] <= 1.0


@pytest.mark.parametrize("overrides,bound", [(("algo.algorithm.desired_kl=1e-7", "algo.algorithm.lr_min=5e-4"), 5e-4),
                                             (("algo.algorithm.desired_kl=10", "algo.algorithm.lr_max=2e-3"), 2e-3)],
                         ids=["floor", "cap"])
def test_adaptive_rate_stays_within_the_configured_bounds(overrides, bound):
    """The adaptive rate stops at lr_min going down and at lr_max going up (20 steps would pass both)."""
    appo, batch = _appo(_cfg(*overrides))
    appo.update(batch)
    assert appo.learning_rate == pytest.approx(bound, rel=1e-12)
