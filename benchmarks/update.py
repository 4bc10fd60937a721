"""Learner update benchmark: our APPO update against the same update written the straightforward way.

    python -m benchmarks.update --task go2_joystick_flat                  # the task's preset sizes
    python -m benchmarks.update --num-envs 2048 --steps-per-env 24 --seconds 60 --json update.json
    python -m benchmarks.update --compile                                  # also torch.compile'd, with compile time
    python -m benchmarks.update --precision bf16                           # ours in bf16, and in fp32 alongside

Synthetic rollouts of the task's real shapes (TaskSpec dims, the RolloutSpec layout
the learner stages) are built on the training device; actions and behaviour
log-probs come from the initial policy, so importance weights start near 1 as in
training.  Each round runs one update of every contender from the same starting
weights, in alternating order (ours, reference, reference, ours, ...), until the
time budget is spent; the rates use the median update time of each.

  ours       learner.appo.APPO: process (normalize once, V-trace, pack env-major) + update
             (no host sync in the minibatch loop, on-device adaptive lr, fused optimizer)
  ours_fp32  with --precision bf16: ours in float32 too, in the same rounds (ours is then bf16)
  reference  ReferenceAPPO below: torch.distributions.Normal, separate actor and critic
             calls, a Python loop over time for V-trace, .item() on the KL and every metric
             each minibatch, a float lr set per step, default optimizer settings;
             always float32: --precision applies to ours only

Both do the same math on the same batch with the same network, epochs and
minibatches (tests/benchmarks/test_update_bench.py checks that they compute the same
losses, gradients and parameters).  samples/s = batch samples x epochs / update time.
On CUDA the host-to-device copy of one rollout from pinned memory is timed too.
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import platform
import statistics
import time

import torch
from torch import nn
from torch.distributions import Normal, kl_divergence

from common.cli import at_least, duration
from common.config import AppoConfig, load_config
from common.cores import usable_cores
from common.policy import ActorCritic
from common.precision import resolve_precision
from common.rollout_spec import RolloutSpec
from common.synthetic import synthetic_batch
from common.task_plugins import resolve_task_spec
from common.task_spec import TaskSpec
from learner.appo import APPO
from learner.lr_schedule import adaptive_lr
from learner.vtrace import vtrace_stats


class ReferenceAPPO:
    """The APPO update of docs/design.md#the-algorithm as a reasonable first implementation would write it."""

    def __init__(self, cfg: AppoConfig, task: TaskSpec, device: torch.device):
        self.cfg = cfg.algo.algorithm
        self.device = device
        self.model = ActorCritic.from_config(cfg, task).to(device)
        self.target = copy.deepcopy(self.model).requires_grad_(False)
        self.target.obs_normalizer = self.model.obs_normalizer
        self.target.critic_normalizer = self.model.critic_normalizer
        self.learning_rate = self.cfg.learning_rate
        params = self.model.parameters()
        if self.cfg.optimizer == "adam":
            self.optimizer = torch.optim.Adam(params, lr=self.learning_rate)
        elif self.cfg.optimizer == "adamw":
            self.optimizer = torch.optim.AdamW(params, lr=self.learning_rate)
        else:
            self.optimizer = torch.optim.SGD(params, lr=self.learning_rate, momentum=0.9)
        self.num_updates = 0

    @torch.no_grad()
    def process(self, batch: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        c = self.cfg
        values = self.model.value(batch["critic"])
        bootstrap = self.model.value(batch["last_critic"])
        target_dist = self.target.distribution(batch["obs"])
        target_log_probs = target_dist.log_prob(batch["actions"]).sum(-1)
        # V-trace, a Python loop over time.
        rho = torch.exp(target_log_probs - batch["log_probs"])
        rho_bar = torch.clamp(rho, max=c.rho_clip)
        cs = c.lam * torch.clamp(rho, max=c.c_clip)
        not_done = 1.0 - batch["dones"]
        num_steps = values.shape[0]
        vs = torch.zeros_like(values)
        advantages = torch.zeros_like(values)
        next_vs, next_value = bootstrap, bootstrap
        for t in reversed(range(num_steps)):
            delta = rho_bar[t] * (batch["rewards"][t] + c.gamma * not_done[t] * next_value - values[t])
            vs[t] = values[t] + delta + c.gamma * not_done[t] * cs[t] * (next_vs - next_value)
            if c.advantage == "gae":
                advantages[t] = vs[t] - values[t]
            else:
                advantages[t] = rho_bar[t] * (batch["rewards"][t] + c.gamma * not_done[t] * next_vs - values[t])
            next_vs, next_value = vs[t], values[t]
        advantages = (advantages - advantages.mean()) / (advantages.std() + 1e-8)
        return {"values": values, "returns": vs, "advantages": advantages, "target_log_probs": target_log_probs,
                "target_mu": target_dist.mean, "target_sigma": target_dist.stddev}

    def update(self, batch: dict[str, torch.Tensor]) -> dict[str, float]:
        c = self.cfg
        fixed = self.process(batch)
        stats = vtrace_stats(batch["log_probs"], fixed["target_log_probs"], c.rho_clip)
        data = {**{k: batch[k] for k in ("obs", "critic", "actions", "log_probs")}, **fixed}
        num_envs = batch["obs"].shape[1]
        mb_size = max(1, num_envs // c.num_mini_batches)
        totals = {k: 0.0 for k in ("surrogate", "value", "entropy", "clip", "grad_norm", "kl")}
        steps = 0
        for _ in range(c.num_learning_epochs):
            perm = torch.randperm(num_envs, device=self.device)
            for start in range(0, num_envs - mb_size + 1, mb_size):
                mb = {k: v[:, perm[start : start + mb_size]].flatten(0, 1) for k, v in data.items()}
                for k, v in self.step(mb).items():
                    totals[k] += v
                steps += 1
        self.num_updates += 1
        if self.num_updates % c.target_update_freq == 0:
            with torch.no_grad():
                for name in ("actor", "log_std"):
                    src, dst = getattr(self.model, name), getattr(self.target, name)
                    src_params = [src] if isinstance(src, nn.Parameter) else list(src.parameters())
                    dst_params = [dst] if isinstance(dst, nn.Parameter) else list(dst.parameters())
                    for s, d in zip(src_params, dst_params, strict=True):
                        d.mul_(1 - c.tau).add_(s, alpha=c.tau)
        out = {k: v / steps for k, v in totals.items()}
        residual, returns = fixed["returns"] - fixed["values"], fixed["returns"]
        out["explained_variance"] = (1.0 - residual.var() / returns.var()).item()
        out.update(learning_rate=self.learning_rate, rho_clip=stats["rho_clip_fraction"].item(),
                   rho_p99=stats["rho_p99"].item(), lp_delta=stats["log_prob_delta_abs_mean"].item(),
                   mean_std=self.model.log_std.exp().mean().item())
        return out

    def step(self, mb: dict[str, torch.Tensor]) -> dict[str, float]:
        c = self.cfg
        dist = self.model.distribution(mb["obs"])
        log_probs = dist.log_prob(mb["actions"]).sum(-1)
        entropy = dist.entropy().sum(-1).mean()
        values = self.model.value(mb["critic"])
        with torch.no_grad():
            target = Normal(mb["target_mu"], mb["target_sigma"])
            kl = kl_divergence(target, Normal(dist.mean, dist.stddev)).sum(-1).mean().item()
        if c.schedule == "adaptive":
            self.learning_rate = adaptive_lr(self.learning_rate, kl, c.desired_kl, c.kl_factor, c.lr_factor,
                                             c.lr_min, c.lr_max)
            for group in self.optimizer.param_groups:
                group["lr"] = self.learning_rate
        # IMPACT ratio min(1, exp(b - p)) * exp(log pi - b), clipped surrogate, clipped value loss.
        b, p = mb["log_probs"], mb["target_log_probs"]
        ratio = torch.clamp(torch.exp(b - p), max=1.0) * torch.exp(log_probs - b)
        adv = mb["advantages"]
        surrogate = torch.max(-adv * ratio, -adv * torch.clamp(ratio, 1 - c.clip_param, 1 + c.clip_param)).mean()
        errors = (values - mb["returns"]).pow(2)
        if c.use_clipped_value_loss:
            clipped = mb["values"] + torch.clamp(values - mb["values"], -c.clip_param, c.clip_param)
            v_loss = torch.max(errors, (clipped - mb["returns"]).pow(2)).mean()
        else:
            v_loss = errors.mean()
        loss = surrogate + c.value_loss_coef * v_loss - c.entropy_coef * entropy
        self.optimizer.zero_grad()
        loss.backward()
        if c.grad_clip == "per_network":
            actor = [self.model.log_std, *self.model.actor.parameters()]
            grad_norm = torch.hypot(nn.utils.clip_grad_norm_(actor, c.max_grad_norm),
                                    nn.utils.clip_grad_norm_(self.model.critic.parameters(), c.max_grad_norm))
        else:
            grad_norm = nn.utils.clip_grad_norm_(self.model.parameters(), c.max_grad_norm)
        self.optimizer.step()
        clip_fraction = ((ratio.detach() - 1.0).abs() > c.clip_param).float().mean()
        return {"surrogate": surrogate.item(), "value": v_loss.item(), "entropy": entropy.item(),
                "clip": clip_fraction.item(), "grad_norm": grad_norm.item(), "kl": kl}


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _timed(fn, device: torch.device) -> float:
    _sync(device)
    t = time.perf_counter()
    fn()
    _sync(device)
    return time.perf_counter() - t


def _h2d_seconds(spec: RolloutSpec, device: torch.device, repeats: int = 10) -> float:
    """Median time of one rollout's host-to-device copy from pinned memory (as ring -> staging)."""
    src = {k: torch.zeros(s).pin_memory() for k, s in spec.shapes().items()}
    dst = {k: torch.empty(s, device=device) for k, s in spec.shapes().items()}

    def copy_all() -> None:
        for k, t in src.items():
            dst[k].copy_(t, non_blocking=True)

    copy_all()
    return statistics.median(_timed(copy_all, device) for _ in range(repeats))


# ------------------------------------------------------------------ measurement


def _with_training(cfg: AppoConfig, **changes) -> AppoConfig:
    """`cfg` with these training.* values, validated (a bad precision is refused by name)."""
    training = type(cfg.training).model_validate({**cfg.training.model_dump(), **changes})
    return cfg.model_copy(update={"training": training})


def measure(cfg: AppoConfig, seconds: float, device: torch.device | str = "auto", rollouts: int = 0,
            compile: bool = False, threads: int = 0, min_rounds: int = 3, precision: str = "fp32") -> dict:
    """Ours vs the reference on one synthetic batch of `cfg`'s task and sizes, interleaved in rounds.

    rollouts: rollouts per batch (0: the staging pool's capacity, training.replay_queue_size).
    compile: also measure ours with torch.compile (and its compile time).
    threads: torch threads for every contender (0: all usable cores).
    precision: training.precision of ours (and ours_compiled; `auto` resolved for `device`); with
    bf16, ours in fp32 is measured too, as ours_fp32.  The reference stays float32.
    """
    from learner.learner import resolve_device

    device = resolve_device(device) if isinstance(device, str) else device
    setting, precision = precision, resolve_precision(precision, device)
    threads = threads or usable_cores()
    torch.set_num_threads(threads)
    task = resolve_task_spec(cfg.task)
    a = cfg.algo
    rollouts = rollouts or cfg.training.replay_queue_size
    torch.manual_seed(a.seed)
    contenders: dict[str, APPO | ReferenceAPPO] = {
        "ours": APPO(_with_training(cfg, compile=False, precision=precision), task, device),
        "reference": ReferenceAPPO(cfg, task, device),
    }
    if precision != "fp32":
        contenders["ours_fp32"] = APPO(_with_training(cfg, compile=False, precision="fp32"), task, device)
    if compile:
        contenders["ours_compiled"] = APPO(_with_training(cfg, compile=True, precision=precision), task, device)
    first = contenders["ours"]
    batch = synthetic_batch(task, a.num_envs, a.steps_per_env, rollouts, device, first.model, a.seed)
    first.update_normalizers(batch)
    initial = {k: v.clone() for k, v in first.model.state_dict().items()}
    initial_target = {k: v.clone() for k, v in first.target.state_dict().items()}

    def reset(c) -> None:
        c.model.load_state_dict(initial)
        c.target.load_state_dict(initial_target)
        c.optimizer.state.clear()
        if isinstance(c, APPO):
            c.set_learning_rate(cfg.algo.algorithm.learning_rate)
        else:
            c.learning_rate = cfg.algo.algorithm.learning_rate
            for group in c.optimizer.param_groups:
                group["lr"] = c.learning_rate

    times: dict[str, list[float]] = {k: [] for k in contenders}
    phases: list[dict] = []
    first_update_s: dict[str, float] = {}

    def run(name: str, record: bool) -> None:
        c = contenders[name]
        reset(c)
        torch.manual_seed(a.seed + 1)  # the same minibatch permutations for every contender
        timings: dict = {}
        if isinstance(c, APPO):
            dt = _timed(lambda: c.update(batch, timings=timings), device)
        else:
            dt = _timed(lambda: c.update(batch), device)
        if not record:
            first_update_s[name] = dt
            return
        times[name].append(dt)
        if name == "ours":
            phases.append(timings)

    for name in contenders:  # warm-up (allocator, kernels; compilation for ours_compiled)
        run(name, record=False)
    order = list(contenders)
    deadline = time.monotonic() + seconds
    rounds = 0
    while rounds < min_rounds or time.monotonic() < deadline:
        for name in (order if rounds % 2 == 0 else order[::-1]):
            run(name, record=True)
        rounds += 1

    samples = a.steps_per_env * a.num_envs * rollouts
    epochs = cfg.algo.algorithm.num_learning_epochs
    median = {k: statistics.median(v) for k, v in times.items()}
    res: dict = {
        "task": task.name, "device": str(device), "threads": threads, "torch": torch.__version__,
        "machine": f"{platform.machine()}, {usable_cores()} usable cores of {os.cpu_count()}",
        "num_envs": a.num_envs, "steps_per_env": a.steps_per_env, "rollouts_per_batch": rollouts,
        "batch_samples": samples, "epochs": epochs, "minibatches": cfg.algo.algorithm.num_mini_batches,
        "actor_hidden_dims": a.policy.actor_hidden_dims, "critic_hidden_dims": a.policy.critic_hidden_dims,
        "precision": precision, "precision_setting": setting, "rounds": rounds,
    }
    for k in contenders:
        res[f"{k}_update_s_median"] = median[k]
        res[f"{k}_update_s_min"] = min(times[k])
        res[f"{k}_samples_per_s"] = samples * epochs / median[k]
    res["ours_env_steps_per_s"] = a.steps_per_env * a.num_envs / median["ours"]
    res["ratio"] = res["ours_samples_per_s"] / res["reference_samples_per_s"]
    # Each one's fastest update: the least disturbed by other processes sharing the cores.
    res["ratio_best"] = res["reference_update_s_min"] / res["ours_update_s_min"]
    if "ours_fp32" in contenders:
        res["fp32_ratio"] = res["ours_fp32_samples_per_s"] / res["reference_samples_per_s"]
        res["fp32_ratio_best"] = res["reference_update_s_min"] / res["ours_fp32_update_s_min"]
    res["phases_ms"] = {k: 1e3 * statistics.median(p[k] for p in phases) for k in phases[0]}
    if device.type == "cuda":
        res["phases_ms"]["h2d_copy_per_rollout"] = 1e3 * _h2d_seconds(
            RolloutSpec.for_task(task, a.num_envs, a.steps_per_env), device)
    if compile:
        res["compiled_ratio"] = res["ours_compiled_samples_per_s"] / res["reference_samples_per_s"]
        res["compiled_ratio_best"] = res["reference_update_s_min"] / res["ours_compiled_update_s_min"]
        res["compile_first_update_s"] = first_update_s["ours_compiled"]
        res["compile_overhead_s"] = first_update_s["ours_compiled"] - median["ours_compiled"]
        # A run of N iterations gains N * (uncompiled - compiled) and pays the overhead once.
        saved = median["ours"] - median["ours_compiled"]
        res["compile_break_even_iterations"] = res["compile_overhead_s"] / saved if saved > 0 else None
    return res


def print_table(res: dict) -> None:
    print(f"\nlearner update  task {res['task']}  {res['num_envs']} envs x {res['steps_per_env']} steps x "
          f"{res['rollouts_per_batch']} rollout(s) = {res['batch_samples']:,} samples, {res['epochs']} epochs x "
          f"{res['minibatches']} minibatches  device {res['device']}  {res['threads']} threads  "
          f"torch {res['torch']}  precision {res['precision']}  {res['rounds']} rounds")
    names = [k for k in ("ours", "ours_fp32", "ours_compiled", "reference") if f"{k}_samples_per_s" in res]
    for k in names:
        print(f"  {k:<14} {res[f'{k}_samples_per_s']:>12,.0f} samples/s   update median "
              f"{1e3 * res[f'{k}_update_s_median']:8.1f} ms  min {1e3 * res[f'{k}_update_s_min']:8.1f} ms")
    print(f"  ours / reference: {res['ratio']:.2f}x (medians), {res['ratio_best']:.2f}x (fastest updates)")
    if "fp32_ratio" in res:
        print(f"  ours_fp32 / reference: {res['fp32_ratio']:.2f}x (medians), {res['fp32_ratio_best']:.2f}x "
              f"(fastest updates); {res['precision']} / fp32: {res['ratio'] / res['fp32_ratio']:.2f}x")
    if "compiled_ratio" in res:
        be = res["compile_break_even_iterations"]
        print(f"  compiled / reference: {res['compiled_ratio']:.2f}x ({res['compiled_ratio_best']:.2f}x fastest); "
              f"first compiled update "
              f"{res['compile_first_update_s']:.1f} s (overhead {res['compile_overhead_s']:.1f} s, "
              f"break-even after {'never' if be is None else f'{be:.0f} updates'})")
    print("  ours per phase (median):")
    for k, v in res["phases_ms"].items():
        print(f"    {k:<22} {v:9.1f} ms")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.update", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--task", default="go2_joystick_flat")
    p.add_argument("--num-envs", type=at_least(0), default=0, help="envs per rollout (default: the task's preset)")
    p.add_argument("--steps-per-env", type=at_least(0), default=0, help="rollout length (default: the task's preset)")
    p.add_argument("--rollouts", type=at_least(0), default=0,
                   help="rollouts per batch (default: training.replay_queue_size of the task's config)")
    p.add_argument("--seconds", type=duration(allow_zero=True), default=30.0,
                   help="time budget for the measured rounds")
    p.add_argument("--device", default="auto", help="auto (cuda, else mps, else cpu), cpu, cuda, cuda:N, mps")
    p.add_argument("--threads", type=at_least(0), default=0, help="torch threads for both (default: all usable cores)")
    p.add_argument("--compile", action="store_true", help="also measure ours with torch.compile")
    p.add_argument("--precision", choices=("auto", "fp32", "bf16"),
                   help="training.precision of ours (default: the task's config, as training runs; the reference "
                        "stays fp32); bf16 also measures ours in fp32")
    p.add_argument("--json", help="write every figure here")
    args = p.parse_args(argv)
    sizes = {k: v for k, v in (("num_envs", args.num_envs), ("steps_per_env", args.steps_per_env)) if v}
    extra: dict = {"task": args.task, **({"algo": sizes} if sizes else {})}
    cfg = load_config(extra=extra, environ={})
    res = measure(cfg, args.seconds, args.device, args.rollouts, args.compile, args.threads,
                  precision=args.precision or cfg.training.precision)
    print_table(res)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(res, f, indent=2)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
