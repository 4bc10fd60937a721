"""training.precision=bf16: the hidden layers of every learner pass run in bfloat16, the output layers,
losses and state stay float32, and the update stays close to the float32 one on every code path."""

from __future__ import annotations

import threading

import pytest
import torch
from torch import nn

from common.config import load_config
from common.synthetic import synthetic_batch
from common.task_spec import task_spec
from learner.appo import APPO

TASK = task_spec("go2_joystick_flat")
CPU = torch.device("cpu")
# (torch threads, rows per forward/backward part): one stream in one pass; actor and critic side by
# side (critic on the helper thread) in 3 row parts per 48-row minibatch.
PATHS = {"one-pass": (1, 0), "side-by-side-in-parts": (2, 20)}


def _cfg(precision: str, *overrides: str):
    return load_config(["algo.num_envs=16", "algo.steps_per_env=6", "algo.policy.actor_hidden_dims=[32,16]",
                        "algo.policy.critic_hidden_dims=[24]", "training.device=cpu",
                        "algo.algorithm.num_learning_epochs=2", "algo.algorithm.num_mini_batches=2",
                        f"training.precision={precision}", *overrides],
                       extra={"task": "go2_joystick_flat"}, environ={})


def _appo(cfg, chunk_rows: int = 0) -> tuple[APPO, dict]:
    """An APPO from seed 0 with a target away from the current policy, and a batch with fitted normalizers."""
    torch.manual_seed(0)
    appo = APPO(cfg, TASK, CPU)
    appo.chunk_rows = chunk_rows
    batch = synthetic_batch(TASK, cfg.algo.num_envs, cfg.algo.steps_per_env, 1, CPU, appo.model, seed=3)
    with torch.no_grad():
        for p in appo.target.actor.parameters():
            p.add_(0.05 * torch.randn_like(p))
    appo.update_normalizers(batch)
    return appo, batch


@pytest.fixture(params=list(PATHS), ids=list(PATHS))
def path(request):
    """The update's CPU paths: (threads, chunk_rows), under that many torch threads."""
    threads, chunk_rows = PATHS[request.param]
    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    yield threads, chunk_rows
    torch.set_num_threads(before)


def _update(precision: str, chunk_rows: int, *overrides: str) -> tuple[APPO, dict, torch.Tensor]:
    """One update from the common start: (appo, metrics, the change of every parameter, flattened)."""
    appo, batch = _appo(_cfg(precision, *overrides), chunk_rows)
    start = torch.cat([p.detach().flatten() for p in appo.model.parameters()])
    torch.manual_seed(5)
    metrics = appo.update(batch)
    change = torch.cat([p.detach().flatten() for p in appo.model.parameters()]) - start
    return appo, metrics, change


def _relative_error(a: torch.Tensor, b: torch.Tensor) -> float:
    return ((a - b).norm() / b.norm()).item()


# bf16 keeps 8 significant bits (~3 decimal digits): each hidden activation and gradient is off by
# up to ~0.4%.  Losses and KL, means over many samples, then agree within ~1%.  Adam's first steps
# move each weight by about lr * sign(gradient), so weights whose gradient is near zero may move the
# other way: the parameter change as a whole differs by a few % (about 4% here); 10% still tells a
# wrong update (another minibatch, a missing term) from rounding.
CHANGE_RTOL = 0.10
LOSS_RTOL = 0.02


def test_bf16_update_is_close_to_fp32(path):
    """From the same start a bf16 update gives about the fp32 losses, KL, gradient norm and parameter change."""
    _, chunk_rows = path
    _, m32, change32 = _update("fp32", chunk_rows)
    _, m16, change16 = _update("bf16", chunk_rows)
    assert 0 < _relative_error(change16, change32) < CHANGE_RTOL
    for k in ("Loss/value", "Train/approx_kl", "Train/global_gradient_norm", "Loss/entropy"):
        assert m16[k] == pytest.approx(m32[k], rel=LOSS_RTOL), k
    # The surrogate is a mean of normalized advantages times ratios near 1: near 0, so compared absolutely.
    assert m16["Loss/surrogate"] == pytest.approx(m32["Loss/surrogate"], abs=2e-3)
    assert m16["Loss/learning_rate"] == m32["Loss/learning_rate"]


def test_bf16_keeps_parameters_optimizer_state_and_outputs_float32(path):
    """After a bf16 update parameters, target, optimizer state, means and values are all float32."""
    appo, _, _ = _update("bf16", path[1])
    for name, t in [*appo.model.state_dict().items(), *appo.target.state_dict().items()]:
        assert t.dtype == (torch.float64 if name.endswith("count") else torch.float32), name
    state = [t for st in appo.optimizer.state.values() for t in st.values() if torch.is_tensor(t)]
    assert state and all(t.dtype == torch.float32 for t in state)
    x = torch.randn(5, TASK.obs_dim)
    assert appo.model.actor_mean(x, appo.hidden_dtype).dtype == torch.float32
    assert appo.model.critic_value(torch.randn(5, TASK.critic_dim), appo.hidden_dtype).dtype == torch.float32


def _record_linear_dtypes(appo: APPO) -> list[tuple[str, bool, torch.dtype, torch.dtype, str]]:
    """Hooks on every Linear of the model and the target: (net, is the output layer, in, out dtype, thread)."""
    seen: list = []
    for owner, model in (("model", appo.model), ("target", appo.target)):
        for net_name in ("actor", "critic"):
            net = getattr(model, net_name)
            linears = [m for m in net if isinstance(m, nn.Linear)]
            for layer in linears:
                def hook(_module, inputs, output, key=f"{owner}.{net_name}", head=layer is linears[-1]):
                    seen.append((key, head, inputs[0].dtype, output.dtype, threading.current_thread().name))
                layer.register_forward_hook(hook)
    return seen


@pytest.mark.parametrize("precision, hidden", [("bf16", torch.bfloat16), ("fp32", torch.float32)])
def test_hidden_layers_run_in_the_configured_dtype_on_every_pass(precision, hidden, path):
    """Every hidden Linear outputs bf16 under bf16 (on the helper thread too); output layers stay float32."""
    threads, chunk_rows = path
    appo, batch = _appo(_cfg(precision), chunk_rows)
    seen = _record_linear_dtypes(appo)
    torch.manual_seed(5)
    appo.update(batch)
    assert {key for key, *_ in seen} == {"model.actor", "model.critic", "target.actor"}
    for key, head, dtype_in, dtype_out, _ in seen:
        if head:
            assert (dtype_in, dtype_out) == (torch.float32, torch.float32), key
        else:
            assert dtype_out == hidden, key
    critic_threads = {thread for key, *_, thread in seen if key == "model.critic"}
    assert any(t.startswith("appo-critic") for t in critic_threads) == (threads == 2)


def test_bf16_output_layer_runs_in_float32_inside_an_outer_autocast():
    """actor_mean's output layer computes in float32 even when the caller already runs under bf16 autocast."""
    appo, _ = _appo(_cfg("bf16"))
    seen = _record_linear_dtypes(appo)
    with torch.autocast(device_type="cpu", dtype=torch.bfloat16):
        mu = appo.model.actor_mean(torch.randn(4, TASK.obs_dim), torch.bfloat16)
    assert mu.dtype == torch.float32
    assert [(d_in, d_out) for key, head, d_in, d_out, _ in seen if head] == [(torch.float32, torch.float32)]


def test_bf16_compiled_update_is_close_to_eager():
    """training.compile with bf16 computes the eager bf16 update (within bf16 rounding), not the fp32 one."""
    # Slow: compiles two small functions once (long with a cold inductor cache).
    _, m16, eager16 = _update("bf16", 0)
    _, _, eager32 = _update("fp32", 0)
    appo, m_compiled, compiled16 = _update("bf16", 0, "training.compile=true")
    assert appo.compiled
    assert _relative_error(compiled16, eager16) < CHANGE_RTOL
    assert m_compiled["Loss/value"] == pytest.approx(m16["Loss/value"], rel=LOSS_RTOL)
    # Autocast inside the compiled function is not dropped: the result is not the fp32 one.
    assert _relative_error(compiled16, eager32) > 1e-4
