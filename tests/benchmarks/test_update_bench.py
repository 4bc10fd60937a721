"""The benchmark compares like with like: its straightforward reference update and ours compute the
same fixed quantities, gradients, parameters, learning rates and metrics on the same batch."""

from __future__ import annotations

import json

import pytest
import torch
from pydantic import ValidationError

from benchmarks.update import ReferenceAPPO, main, measure
from common.config import load_config
from common.synthetic import synthetic_batch
from common.task_spec import task_spec
from learner.appo import APPO

TASK = task_spec("go2_joystick_flat")


def _cfg(*overrides: str):
    return load_config(["algo.num_envs=16", "algo.steps_per_env=6", "algo.policy.actor_hidden_dims=[32,16]",
                        "algo.policy.critic_hidden_dims=[24]", "training.device=cpu",
                        "training.precision=fp32", *overrides],  # exact float32 equalities below
                       extra={"task": "go2_joystick_flat"}, environ={})


def _pair(cfg, rollouts: int = 1):
    """Ours and the reference from the same initial weights, and one batch with fitted normalizers."""
    torch.manual_seed(0)
    ours = APPO(cfg, TASK, torch.device("cpu"))
    ref = ReferenceAPPO(cfg, TASK, torch.device("cpu"))
    batch = synthetic_batch(TASK, cfg.algo.num_envs, cfg.algo.steps_per_env, rollouts, torch.device("cpu"),
                            ours.model, seed=3)
    # A target that differs from the current policy, so the KL, the IMPACT truncation and the
    # importance weights are all exercised.
    with torch.no_grad():
        for p in ours.target.actor.parameters():
            p.add_(0.05 * torch.randn_like(p))
        ours.target.log_std.add_(0.1)
    ours.update_normalizers(batch)
    ref.model.load_state_dict(ours.model.state_dict())
    ref.target.load_state_dict(ours.target.state_dict())
    return ours, ref, batch


@pytest.fixture(params=[1, 2], ids=["one-stream", "two-streams"])
def threads(request):
    """Ours under 1 torch thread (one stream) and 2 (actor and critic side by side)."""
    before = torch.get_num_threads()
    torch.set_num_threads(request.param)
    yield request.param
    torch.set_num_threads(before)


def _close(a, b, rtol=2e-5, atol=2e-6):
    torch.testing.assert_close(a, b, rtol=rtol, atol=atol)


def test_process_matches_reference():
    """Values, V-trace targets, normalized advantages, target log-probs and means agree."""
    ours, ref, batch = _pair(_cfg())
    a, b = ours.process(batch), ref.process(batch)
    for k in ("values", "returns", "advantages", "target_log_probs", "target_mu"):
        _close(a[k], b[k])
    assert (a["target_log_probs"] - batch["log_probs"]).abs().max() > 0.01  # off-policy for real


def test_one_step_gradients_match_reference():
    """One epoch, one minibatch: the same gradients on every parameter and the same first lr change."""
    ours, ref, batch = _pair(_cfg("algo.algorithm.num_learning_epochs=1", "algo.algorithm.num_mini_batches=1"))
    torch.manual_seed(1)
    mo = ours.update(batch)
    torch.manual_seed(1)
    mr = ref.update(batch)
    for (name, p), q in zip(ours.model.named_parameters(), ref.model.parameters(), strict=True):
        assert p.grad is not None and p.grad.abs().sum() > 0, name
        _close(p.grad, q.grad)
    assert mo["Loss/learning_rate"] == mr["learning_rate"] != ours.cfg.learning_rate


@pytest.mark.parametrize("overrides", [
    (),
    ("algo.algorithm.use_clipped_value_loss=false", "algo.algorithm.tau=0.5"),
    ("algo.algorithm.schedule=fixed", "algo.algorithm.optimizer=sgd"),
    ("algo.algorithm.lam=0.8", "algo.algorithm.advantage=gae", "algo.algorithm.grad_clip=per_network",
     "algo.algorithm.max_grad_norm=0.05", "algo.algorithm.lr_max=4e-3", "algo.algorithm.kl_factor=2.0",
     "algo.algorithm.lr_factor=1.5"),
])
def test_full_update_matches_reference(overrides, threads):
    """Several epochs x minibatches: parameters, target, lr and every metric agree."""
    cfg = _cfg("algo.algorithm.num_learning_epochs=3", "algo.algorithm.num_mini_batches=2",
               "algo.algorithm.learning_rate=3e-3", *overrides)
    ours, ref, batch = _pair(cfg, rollouts=2)
    for _ in range(2):  # the second update starts from a moved target and a changed lr
        torch.manual_seed(7)
        mo = ours.update(batch)
        torch.manual_seed(7)
        mr = ref.update(batch)
        for p, q in zip(ours.model.parameters(), ref.model.parameters(), strict=True):
            _close(p, q)
        for p, q in zip(ours.target.parameters(), ref.target.parameters(), strict=True):
            _close(p, q)
        assert mo["Loss/learning_rate"] == mr["learning_rate"]
        pairs = {"Loss/surrogate": "surrogate", "Loss/value": "value", "Loss/entropy": "entropy",
                 "Train/approx_kl": "kl", "Train/clip_fraction": "clip", "Train/global_gradient_norm": "grad_norm",
                 "Train/vtrace_rho_clip_fraction": "rho_clip", "Train/vtrace_rho_p99": "rho_p99",
                 "Train/behavior_to_current_log_prob_delta": "lp_delta", "Policy/mean_std": "mean_std",
                 "Train/value_explained_variance": "explained_variance"}
        for k, r in pairs.items():
            assert mo[k] == pytest.approx(mr[r], rel=1e-4, abs=1e-6), k
    assert ours.learning_rate == ref.learning_rate


def test_reference_loss_is_not_trivially_equal():
    """The comparison can fail: a different clip parameter in the reference changes the parameters."""
    cfg = _cfg("algo.algorithm.num_learning_epochs=2", "algo.algorithm.num_mini_batches=2")
    ours, ref, batch = _pair(cfg)
    ref.cfg = ref.cfg.model_copy(update={"clip_param": 0.05})
    torch.manual_seed(7)
    ours.update(batch)
    torch.manual_seed(7)
    ref.update(batch)
    diff = max((p - q).abs().max().item() for p, q in zip(ours.model.parameters(), ref.model.parameters(), strict=True))
    assert diff > 1e-5


def test_bench_command_writes_its_figures(tmp_path, capsys):
    """The CLI runs both contenders on tiny sizes and writes the figures appo-bench reads."""
    out = tmp_path / "update.json"
    assert main(["--task", "inverted_pendulum", "--num-envs", "8", "--steps-per-env", "4", "--seconds", "0",
                 "--device", "cpu", "--json", str(out)]) == 0
    res = json.loads(out.read_text())
    for k in ("ours_samples_per_s", "reference_samples_per_s", "ratio", "ours_env_steps_per_s", "epochs", "threads"):
        assert res[k] > 0, k
    assert set(res["phases_ms"]) == {"process", "minibatch_loop", "target_update", "metrics"}
    assert "ours / reference" in capsys.readouterr().out


def test_bf16_measure_reports_ours_in_bf16_and_fp32():
    """measure(precision="bf16") times ours in bf16 and in fp32 against the fp32 reference, and says so."""
    res = measure(_cfg(), seconds=0, device="cpu", precision="bf16", min_rounds=1)
    assert res["precision"] == "bf16"
    for k in ("ours_samples_per_s", "ours_fp32_samples_per_s", "reference_samples_per_s", "ratio", "fp32_ratio"):
        assert res[k] > 0, k
    assert res["ratio"] == res["ours_samples_per_s"] / res["reference_samples_per_s"]
    assert res["fp32_ratio"] == res["ours_fp32_samples_per_s"] / res["reference_samples_per_s"]
    plain = measure(_cfg(), seconds=0, device="cpu", min_rounds=1)
    assert plain["precision"] == "fp32" and "ours_fp32_samples_per_s" not in plain and "fp32_ratio" not in plain


def test_measure_refuses_an_unknown_precision():
    """A precision outside fp32/bf16 is refused by the config's validation, naming the field."""
    with pytest.raises(ValidationError, match="precision"):
        measure(_cfg(), seconds=0, device="cpu", precision="fp16", min_rounds=1)


def test_bf16_bench_command_prints_the_precision(capsys):
    """--precision bf16 shows the precision in the header and ours in fp32 beside ours in bf16."""
    assert main(["--task", "inverted_pendulum", "--num-envs", "8", "--steps-per-env", "4", "--seconds", "0",
                 "--device", "cpu", "--precision", "bf16"]) == 0
    out = capsys.readouterr().out
    assert "precision bf16" in out and "ours_fp32" in out and "ours_fp32 / reference" in out


def test_bench_command_defaults_to_the_tasks_precision(capsys):
    """Without --precision, ours runs at the task config's training.precision (fp32 for inverted_pendulum)."""
    assert main(["--task", "inverted_pendulum", "--num-envs", "8", "--steps-per-env", "4", "--seconds", "0",
                 "--device", "cpu"]) == 0
    out = capsys.readouterr().out
    assert "precision fp32" in out and "ours_fp32" not in out
