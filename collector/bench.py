"""Collector throughput against the physics ceiling, measured in one run.

    python -m collector.bench --task half_cheetah --num-envs 512

ceiling:   env.step with random actions (threaded physics + vectorised obs/reward), no policy
collector: the real rollout loop (policy inference, recording, timeout bootstrap), no learner
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


def measure_collector(collector, seconds: float) -> float:
    out = allocate(collector.spec)
    obs, critic = collector.env.reset()
    rollouts, start = 0, time.perf_counter()
    while time.perf_counter() - start < seconds:
        obs, critic, _ = collector.fill_rollout(out, obs, critic)
        rollouts += 1
    return rollouts * collector.spec.env_steps / (time.perf_counter() - start)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m collector.bench", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--task", default="half_cheetah")
    p.add_argument("--num-envs", type=int, default=512)
    p.add_argument("--threads", type=int, default=0, help="MuJoCo threads (0: all usable cores)")
    p.add_argument("--seconds", type=float, default=10.0, help="duration of each measurement")
    p.add_argument("--rounds", type=int, default=2, help="alternate ceiling/collector this many times")
    p.add_argument("--json", help="also write the figures to this file")
    args = p.parse_intermixed_args(argv)

    from collector.envs import make_env
    from collector.rollout import Collector

    cfg = load_config(extra={"task": args.task, "algo": {"num_envs": args.num_envs}})
    threads = args.threads or split_cores(usable_cores(), 1, learner_threads=1)[1] + 1
    torch.set_num_threads(1)
    env = make_env(args.task, args.num_envs, threads, seed=0)
    collector = Collector(cfg, env, channel=None, stop_event=threading.Event())
    rng = np.random.default_rng(0)
    ceiling, ours = [], []
    # Interleaved rounds so both see the same machine load.
    for _ in range(args.rounds):
        ceiling.append(measure_ceiling(env, args.seconds, rng))
        ours.append(measure_collector(collector, args.seconds))
    env.close()
    result = {
        "task": args.task,
        "num_envs": args.num_envs,
        "mujoco_threads": threads,
        "steps_per_env": cfg.algo.steps_per_env,
        "physics_ceiling_steps_per_s": float(np.median(ceiling)),
        "collector_steps_per_s": float(np.median(ours)),
        "ratio": float(np.median(ours) / np.median(ceiling)),
        "machine": f"{platform.machine()}, {usable_cores()} cores, {platform.processor() or platform.platform()}",
        "date": time.strftime("%Y-%m-%d"),
    }
    print(f"task {args.task}  envs {args.num_envs}  mujoco threads {threads}")
    print(f"physics ceiling : {result['physics_ceiling_steps_per_s']:12,.0f} env-steps/s")
    print(f"collector       : {result['collector_steps_per_s']:12,.0f} env-steps/s")
    print(f"ratio           : {result['ratio']:12.3f}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result, f, indent=2)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
