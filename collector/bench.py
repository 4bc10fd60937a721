"""Collector throughput against the physics ceiling, measured in one run.

    python -m collector.bench --task half_cheetah --num-envs 512

ceiling:   env.step of one batch of N envs with random actions (threaded physics + vectorised
           obs/reward), no policy; one action array drawn per round and held
collector: the real rollout loop on the collector's env (make_collector_env: two double-buffered
           groups from 256 envs on) with policy inference, recording and timeout bootstrap, no learner
replay:    (--replay-ceiling) the ceiling's env.step fed the actions the collector's policy sampled in
           its last rollout, cycled: the collector's own physics workload without the policy.  The
           physics cost per step depends on the actions: held actions let Go2 robots settle into
           cheap static poses, varying ones do not.

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

from common.config import load_config
from common.cores import split_cores, usable_cores
from common.rollout_spec import allocate


def measure_ceiling(env, seconds: float, rng: np.random.Generator) -> float:
    actions = rng.uniform(-1, 1, size=(env.num_envs, env.spec.act_dim)).astype(np.float32)
    env.reset()
    steps, start = 0, time.perf_counter()
    while time.perf_counter() - start < seconds:
        env.step(actions)
        steps += 1
    return steps * env.num_envs / (time.perf_counter() - start)


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


def measure_replay(env, seconds: float, actions: np.ndarray) -> float:
    """env.step fed actions [N, T, act_dim] (a rollout's), step t using actions[:, t % T]."""
    steps_t = [np.ascontiguousarray(actions[:, t]) for t in range(actions.shape[1])]
    env.reset()
    steps, start = 0, time.perf_counter()
    while time.perf_counter() - start < seconds:
        env.step(steps_t[steps % len(steps_t)])
        steps += 1
    return steps * env.num_envs / (time.perf_counter() - start)


def run(task: str, num_envs: int, threads: int = 0, seconds: float = 10.0, rounds: int = 2,
        replay_ceiling: bool = False) -> dict:
    """Interleaved ceiling/collector(/replay) rounds in this process; the figures as a JSON-ready dict."""
    from collector.envs import make_collector_env, make_env
    from collector.rollout import Collector

    cfg = load_config(extra={"task": task, "algo": {"num_envs": num_envs}})
    threads = threads or split_cores(usable_cores(), 1, learner_threads=1)[1] + 1
    torch.set_num_threads(1)  # as appo-collector: inference on the main thread, MuJoCo threads get the cores
    env = make_env(task, num_envs, threads, seed=0)
    collector_env = make_collector_env(task, num_envs, threads, seed=0)
    collector = Collector(cfg, collector_env, channel=None, stop_event=threading.Event())
    rng = np.random.default_rng(0)
    out = allocate(collector.spec)
    ceiling, ours, phases, replay = [], [], [], []
    try:
        # Interleaved rounds so all see the same machine load.
        for _ in range(rounds):
            ceiling.append(measure_ceiling(env, seconds, rng))
            rate, phase = measure_collector(collector, seconds, out)
            ours.append(rate)
            phases.append(phase)
            if replay_ceiling:
                replay.append(measure_replay(env, seconds, out["actions"]))
    finally:
        env.close()
        collector_env.close()
    extra = {}
    if replay_ceiling:
        extra = {"replay_ceiling_steps_per_s": float(np.median(replay)),
                 "replay_ratio": float(np.median(ours) / np.median(replay))}
    return {
        "task": task,
        "num_envs": num_envs,
        "mujoco_threads": threads,
        "collector_groups": len(collector.groups),
        "steps_per_env": cfg.algo.steps_per_env,
        "physics_ceiling_steps_per_s": float(np.median(ceiling)),
        "collector_steps_per_s": float(np.median(ours)),
        "ratio": float(np.median(ours) / np.median(ceiling)),
        # Per control step of all N envs, main thread: policy inference + recording, and stepping
        # the env (with two groups: waiting for the physics and the NumPy work of each step).
        "collector_infer_ms_per_step": float(np.median([p["infer_ms"] for p in phases])),
        "collector_env_ms_per_step": float(np.median([p["step_ms"] for p in phases])),
        "ceiling_ms_per_step": float(num_envs / np.median(ceiling) * 1e3),
        **extra,
        "rounds": {"physics_ceiling_steps_per_s": ceiling, "collector_steps_per_s": ours,
                   **({"replay_ceiling_steps_per_s": replay} if replay_ceiling else {})},
        "machine": f"{platform.machine()}, {usable_cores()} cores, {platform.processor() or platform.platform()}",
        "date": time.strftime("%Y-%m-%d"),
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m collector.bench", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--task", default="half_cheetah")
    p.add_argument("--num-envs", type=int, default=512)
    p.add_argument("--threads", type=int, default=0, help="MuJoCo threads (0: all usable cores)")
    p.add_argument("--seconds", type=float, default=10.0, help="duration of each measurement")
    p.add_argument("--rounds", type=int, default=2, help="alternate ceiling/collector this many times")
    p.add_argument("--replay-ceiling", action="store_true",
                   help="also measure env.step replaying the collector's sampled actions (see above)")
    p.add_argument("--json", help="also write the figures to this file")
    args = p.parse_intermixed_args(argv)

    result = run(args.task, args.num_envs, args.threads, args.seconds, args.rounds, args.replay_ceiling)
    print(f"task {args.task}  envs {args.num_envs}  mujoco threads {result['mujoco_threads']}  "
          f"collector groups {result['collector_groups']}")
    print(f"physics ceiling : {result['physics_ceiling_steps_per_s']:12,.0f} env-steps/s")
    print(f"collector       : {result['collector_steps_per_s']:12,.0f} env-steps/s  "
          f"(main thread per step: inference {result['collector_infer_ms_per_step']:.1f} ms, "
          f"env {result['collector_env_ms_per_step']:.1f} ms)")
    print(f"ratio           : {result['ratio']:12.3f}")
    if args.replay_ceiling:
        print(f"replay ceiling  : {result['replay_ceiling_steps_per_s']:12,.0f} env-steps/s  "
              f"(collector / replay {result['replay_ratio']:.3f})")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result, f, indent=2)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
