"""Collector throughput against the physics ceiling, measured in one run.

    python -m benchmarks.physics --task half_cheetah --num-envs 512

ceiling:   env.step of one batch of N envs (threaded physics + vectorised obs/reward), no policy,
           with random actions drawn afresh each step from the initial policy's distribution,
           N(0, init_noise_std^2) per action dim (arrays drawn before the clock starts)
collector: the real rollout loop on the collector's env (make_collector_env: two double-buffered
           groups from 256 envs on) with policy inference, recording and timeout bootstrap, no learner
held:      (--held-ceiling) the ceiling's env.step with one uniform [-1, 1] action array per round, held
replay:    (--replay-ceiling) the ceiling's env.step fed the actions the collector's policy sampled in
           its last rollout, cycled: the collector's own physics workload without the policy.

The physics cost per step depends on the actions: held actions let Go2 robots settle into cheap
static poses, uniform [-1, 1] drawn every step makes them flail and costs more than the actions a
policy samples (see BENCHMARKS.md, section "Collector against the physics ceiling, 2 and 16 cores"),
hence a ceiling drawn from the distribution the collector's policy samples at the start.

Figures are medians over the rounds; a ratio is the median of the rounds' own ratios (each
round measures its figures back to back, so the machine's slow drifts divide out).
`run(...)` returns the figures as a dict (the --json file's content).
"""

from __future__ import annotations

import argparse
import json
import platform
import threading
import time

import numpy as np
import torch

from common.cli import at_least, duration
from common.config import load_config
from common.cores import collector_mujoco_threads, usable_cores
from common.rollout_spec import allocate


def measure_physics(env, seconds: float, actions: list[np.ndarray]) -> float:
    """env.step throughput from reset, step k taking actions[k % len(actions)] (no policy)."""
    env.reset()
    steps, start = 0, time.perf_counter()
    while time.perf_counter() - start < seconds:
        env.step(actions[steps % len(actions)])
        steps += 1
    return steps * env.num_envs / (time.perf_counter() - start)


def random_policy_actions(env, std: float, count: int, rng: np.random.Generator) -> list[np.ndarray]:
    """`count` action arrays drawn from N(0, std^2), the initial policy's spread around a zero mean."""
    shape = (env.num_envs, env.spec.act_dim)
    return [(std * rng.standard_normal(shape)).astype(np.float32) for _ in range(count)]


def held_actions(env, rng: np.random.Generator) -> list[np.ndarray]:
    """One uniform [-1, 1] action array, to be held for a whole measurement."""
    return [rng.uniform(-1, 1, size=(env.num_envs, env.spec.act_dim)).astype(np.float32)]


def replay_actions(rollout_actions: np.ndarray) -> list[np.ndarray]:
    """A rollout's actions [N, T, act_dim] as T per-step arrays."""
    return [np.ascontiguousarray(rollout_actions[:, t]) for t in range(rollout_actions.shape[1])]


def measure_collector(collector, seconds: float, out: dict[str, np.ndarray] | None = None) -> tuple[float, dict]:
    """(env-steps/s, main-thread ms per control step in inference+recording and in the env).

    `out` (default: a fresh rollout) holds the last rollout afterwards."""
    out = allocate(collector.spec) if out is None else out
    obs, critic = collector.env.reset()
    rollouts, infer_ms, step_ms, start = 0, 0.0, 0.0, time.perf_counter()
    while time.perf_counter() - start < seconds:
        obs, critic, perf = collector.fill_rollout(out, obs, critic)
        infer_ms += perf["infer_ms"]
        step_ms += perf["step_ms"]
        rollouts += 1
    rate = rollouts * collector.spec.env_steps / (time.perf_counter() - start)
    steps = rollouts * collector.spec.steps
    return rate, {"infer_ms": infer_ms / steps, "step_ms": step_ms / steps}


def round_ratios(ours: list[float], ceiling: list[float]) -> list[float]:
    """ours / ceiling within each round."""
    return [a / b for a, b in zip(ours, ceiling, strict=True)]


def paired_ratio(ours: list[float], ceiling: list[float]) -> float:
    """Median over rounds of ours / ceiling within each round.

    A round's figures are measured back to back, so a slow spell of a shared machine
    (whose speed can wander over minutes) divides out of its ratio.
    """
    return float(np.median(round_ratios(ours, ceiling)))


def run(task: str, num_envs: int, threads: int = 0, seconds: float = 10.0, rounds: int = 3,
        replay_ceiling: bool = False, held_ceiling: bool = False, collector_threads: int = 0) -> dict:
    """Interleaved ceiling/collector(/held/replay) rounds in this process; the figures as a JSON-ready dict.

    `threads` cores (0: all usable): the ceiling steps on all of them, the collector on as many MuJoCo
    threads as appo-collector takes from them (`collector_mujoco_threads`; `collector_threads` if given),
    its main thread on the rest.
    """
    from collector.envs import make_collector_env, make_env
    from collector.rollout import Collector

    cfg = load_config(extra={"task": task, "algo": {"num_envs": num_envs}})
    threads = threads or usable_cores()
    collector_threads = collector_threads or collector_mujoco_threads(threads)
    torch.set_num_threads(1)  # as appo-collector: inference on the main thread, MuJoCo threads get the cores
    env = make_env(task, num_envs, threads, seed=0)
    collector_env = make_collector_env(task, num_envs, collector_threads, seed=0)
    collector = Collector(cfg, collector_env, channel=None, stop_event=threading.Event())
    rng = np.random.default_rng(0)
    random_actions = random_policy_actions(env, cfg.algo.policy.init_noise_std, cfg.algo.steps_per_env, rng)
    out = allocate(collector.spec)
    figures: dict[str, list[float]] = {"physics_ceiling_steps_per_s": [], "collector_steps_per_s": []}
    phases = []
    try:
        # Interleaved rounds so all see the same machine load.
        for _ in range(rounds):
            figures["physics_ceiling_steps_per_s"].append(measure_physics(env, seconds, random_actions))
            rate, phase = measure_collector(collector, seconds, out)
            figures["collector_steps_per_s"].append(rate)
            phases.append(phase)
            if held_ceiling:
                figures.setdefault("held_ceiling_steps_per_s", []).append(
                    measure_physics(env, seconds, held_actions(env, rng)))
            if replay_ceiling:
                figures.setdefault("replay_ceiling_steps_per_s", []).append(
                    measure_physics(env, seconds, replay_actions(out["actions"])))
    finally:
        env.close()
        collector_env.close()
    median = {k: float(np.median(v)) for k, v in figures.items()}
    ours = median["collector_steps_per_s"]
    extra = {}
    for name in ("held", "replay"):
        if f"{name}_ceiling_steps_per_s" in median:
            extra[f"{name}_ceiling_steps_per_s"] = median[f"{name}_ceiling_steps_per_s"]
            extra[f"{name}_ratio"] = paired_ratio(figures["collector_steps_per_s"],
                                                  figures[f"{name}_ceiling_steps_per_s"])
    return {
        "task": task,
        "num_envs": num_envs,
        "mujoco_threads": threads,
        "collector_mujoco_threads": collector_threads,
        "collector_groups": len(collector.groups),
        "steps_per_env": cfg.algo.steps_per_env,
        "random_action_std": cfg.algo.policy.init_noise_std,
        "physics_ceiling_steps_per_s": median["physics_ceiling_steps_per_s"],
        "collector_steps_per_s": ours,
        "ratio": paired_ratio(figures["collector_steps_per_s"], figures["physics_ceiling_steps_per_s"]),
        "round_ratios": round_ratios(figures["collector_steps_per_s"], figures["physics_ceiling_steps_per_s"]),
        "ratio_of_medians": ours / median["physics_ceiling_steps_per_s"],
        # Per control step of all N envs, main thread: policy inference + recording, and stepping
        # the env (with two groups: waiting for the physics and the NumPy work of each step).
        "collector_infer_ms_per_step": float(np.median([p["infer_ms"] for p in phases])),
        "collector_env_ms_per_step": float(np.median([p["step_ms"] for p in phases])),
        "ceiling_ms_per_step": float(num_envs / median["physics_ceiling_steps_per_s"] * 1e3),
        **extra,
        "rounds": figures,
        "machine": f"{platform.machine()}, {usable_cores()} cores, {platform.processor() or platform.platform()}",
        "date": time.strftime("%Y-%m-%d"),
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.physics", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--task", default="half_cheetah")
    p.add_argument("--num-envs", type=at_least(1), default=512)
    p.add_argument("--threads", type=at_least(0), default=0,
                   help="cores: the ceiling's MuJoCo threads, shared by the collector's (0: all usable cores)")
    p.add_argument("--collector-threads", type=at_least(0), default=0,
                   help="the collector's MuJoCo threads (0: as appo-collector takes them from --threads cores)")
    p.add_argument("--seconds", type=duration(), default=10.0, help="duration of each measurement")
    p.add_argument("--rounds", type=at_least(1), default=3, help="alternate ceiling/collector this many times")
    p.add_argument("--replay-ceiling", action="store_true",
                   help="also measure env.step replaying the collector's sampled actions (see above)")
    p.add_argument("--held-ceiling", action="store_true",
                   help="also measure env.step with one uniform random action array held (see above)")
    p.add_argument("--json", help="also write the figures to this file")
    args = p.parse_intermixed_args(argv)

    result = run(args.task, args.num_envs, args.threads, args.seconds, args.rounds, args.replay_ceiling,
                 args.held_ceiling, args.collector_threads)
    print(f"task {args.task}  envs {args.num_envs}  mujoco threads: ceiling {result['mujoco_threads']}, "
          f"collector {result['collector_mujoco_threads']}  collector groups {result['collector_groups']}")
    print(f"physics ceiling : {result['physics_ceiling_steps_per_s']:12,.0f} env-steps/s  "
          f"(random actions, std {result['random_action_std']})")
    print(f"collector       : {result['collector_steps_per_s']:12,.0f} env-steps/s  "
          f"(main thread per step: inference {result['collector_infer_ms_per_step']:.1f} ms, "
          f"env {result['collector_env_ms_per_step']:.1f} ms)")
    per_round = ", ".join(f"{r:.3f}" for r in result["round_ratios"])
    print(f"ratio           : {result['ratio']:12.3f}  (median of the rounds' ratios: {per_round})")
    if args.held_ceiling:
        print(f"held ceiling    : {result['held_ceiling_steps_per_s']:12,.0f} env-steps/s  "
              f"(collector / held {result['held_ratio']:.3f})")
    if args.replay_ceiling:
        print(f"replay ceiling  : {result['replay_ceiling_steps_per_s']:12,.0f} env-steps/s  "
              f"(collector / replay {result['replay_ratio']:.3f})")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result, f, indent=2)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
