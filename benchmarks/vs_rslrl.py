"""The reference learner beside ours: rsl_rl's PPO and appo-train on the same env, envs, seeds and env-step budget.

    python -m benchmarks.vs_rslrl --task go2_joystick_flat --num-envs 2048 --env-steps 5000000 --seeds 1,2
    python -m benchmarks.vs_rslrl --task g1_velocity_flat --num-envs 512 --env-steps 2000000 --std-contenders 1.0,0.5
    python -m benchmarks.vs_rslrl --task inverted_pendulum --num-envs 64 --env-steps 200000 --out runs/ip \\
        algo.algorithm.learning_rate=1e-3

Per seed, one after the other (never at the same time):
  1. rsl_rl (rsl-rl-lib 5.4.2, unmodified; `make rslrl` installs it) with the reference's G1 PPO
     settings (benchmarks/rslrl_train.py), once per --std-contenders value (default: 1.0, the
     reference's, and the initial std appo-train runs the task with: its preset's, or an override's), on the env an
     appo-train collector steps (collector.envs.make_collector_env, same task options, seeded as
     appo-train seeds its collector) behind rsl_rl's VecEnv (benchmarks/rslrl_env.py);
  2. `appo-train --task T algo.num_envs=N algo.seed=SEED` plus the KEY=VALUE overrides given (for
     appo-train only), one local collector.
Each learner runs ceil(--env-steps / (N x its steps per env)) iterations: rsl_rl 24 steps per env,
appo-train its config's algo.steps_per_env.  Then each final policy is evaluated as appo-eval does
(tools/eval.py: --episodes deterministic mean-action episodes, env seed 0, the G1 tasks in play mode).

Writes to --out (default logs/vs_rslrl/<task>_<time>; it must be empty or new):
  curves.json, curves.csv  every run's curve against env steps: mean episode return and length,
                           time-out rate, xy and yaw-rate tracking errors where the task has commands,
                           learning rate, mean policy std (the rsl_rl side counted by the adapter as
                           appo-train's collector and learner count them); curves.json adds the
                           settings and evaluations
  curves.png               the curves, a colour per learner, a line style per seed
  eval.json                appo-eval's figures of every final policy (return, episode length,
                           fraction reaching the time limit, tracking errors, motion-tracking body errors)
  appo/, rslrl_std<S>/     the runs themselves (appo-train's run directories; rsl_rl's logs and policy.pt)
  *.log                    each training process's output
and prints a table: per seed and learner, the curve at a quarter, half and three quarters of the
budget and at the run's end, then the final evaluation.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
import time
from pathlib import Path

from benchmarks import appo_run
from common.cli import at_least
from common.config import ConfigError, load_config
from common.hub import motion_clip

# Modules the rsl_rl side and the results need (the `rslrl` extra and rsl-rl-lib itself).
NEEDED = ("rsl_rl", "tensordict", "git", "matplotlib", "tensorboard")
INSTALL_HINT = ("install the rslrl extra: make rslrl (pip install 'appo[rslrl]', then "
                "pip install --no-deps rsl-rl-lib==5.4.2)")
# Settings this tool gives appo-train itself; an override of one would break the comparison or the bookkeeping.
OWNED_KEYS = ("task", "algo.num_envs", "algo.seed", "algo.max_iterations", "algo.save_interval",
              "training.log_dir", "training.run_name")


def missing_modules() -> list[str]:
    """The modules missing for NEEDED ones to import (rsl_rl without tensordict names tensordict)."""
    os.environ.setdefault("GIT_PYTHON_REFRESH", "quiet")  # GitPython without a git binary: rsl_rl never calls it
    missing = []
    for name in NEEDED:
        try:
            __import__(name)
        except ModuleNotFoundError as exc:
            missing.append((exc.name or name).split(".")[0])
    return list(dict.fromkeys(missing))


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m benchmarks.vs_rslrl", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--task", default="go2_joystick_flat")
    p.add_argument("--num-envs", type=at_least(1), help="envs of both learners (default: appo-train's for the task)")
    p.add_argument("--env-steps", type=at_least(1), required=True, help="env-step budget of each run")
    p.add_argument("--seeds", default="1", help="comma-separated seeds, one run of each learner per seed")
    p.add_argument("--std-contenders", help="comma-separated initial stds of rsl_rl runs (default: 1.0 and "
                   "appo-train's algo.policy.init_noise_std for the task)")
    p.add_argument("--episodes", type=at_least(1), default=20, help="evaluated episodes per final policy")
    p.add_argument("--threads", type=at_least(1), help="rsl_rl side: MuJoCo and torch threads (default: the cores)")
    p.add_argument("--rslrl-device", default="cpu", help="rsl_rl's torch device (default cpu)")
    p.add_argument("--out", help="results folder, empty or new (default: logs/vs_rslrl/<task>_<time>)")
    p.add_argument("overrides", nargs="*", metavar="KEY=VALUE", help="config overrides for appo-train")
    args = p.parse_intermixed_args(argv)
    try:
        args.seed_list = list(dict.fromkeys(int(s) for s in args.seeds.split(",")))
    except ValueError:
        p.error(f"--seeds: expected comma-separated integers, got {args.seeds!r}")
    for item in args.overrides:
        key = item.split("=", 1)[0].strip()
        if key in OWNED_KEYS:
            p.error(f"override {item!r}: {key} is set by this tool (use --task, --num-envs, --seeds, --env-steps)")
    try:
        from common.task_plugins import resolve_task_spec

        resolve_task_spec(args.task)
        extra = {"task": args.task, **({"algo": {"num_envs": args.num_envs}} if args.num_envs else {})}
        args.config = load_config(args.overrides, extra=extra)
    except (ConfigError, ValueError) as exc:  # UnknownTaskError is a ValueError
        p.error(str(exc))
    args.num_envs = args.config.algo.num_envs
    ours = args.config.algo.policy.init_noise_std
    try:
        stds = [float(s) for s in args.std_contenders.split(",")] if args.std_contenders else [1.0, ours]
    except ValueError:
        p.error(f"--std-contenders: expected comma-separated numbers, got {args.std_contenders!r}")
    if not all(0 < s < math.inf for s in stds):
        p.error(f"--std-contenders: every std must be a positive number, got {args.std_contenders}")
    args.std_list = list(dict.fromkeys(stds))
    args.out = Path(args.out or f"logs/vs_rslrl/{args.task.replace(':', '_')}_{time.strftime('%Y-%m-%d_%H-%M-%S')}")
    if args.out.exists() and (not args.out.is_dir() or any(args.out.iterdir())):
        p.error(f"--out {args.out}: not an empty folder (the runs would mix with earlier ones)")
    return args


def _run(cmd: list[str], log: Path) -> float:
    """Run one training process with its output in `log`; its wall seconds.  Raises RuntimeError if it fails."""
    print(f"$ {' '.join(cmd[1:])}", flush=True)
    start = time.monotonic()
    with log.open("wb") as f:
        rc = subprocess.run(cmd, stdout=f, stderr=subprocess.STDOUT).returncode
    if rc != 0:
        raise RuntimeError(f"{cmd[2]} exited {rc}; see {log}")
    return time.monotonic() - start


def evaluate_rslrl(policy: Path, task: str, motion_file: str | None, episodes: int) -> dict:
    """appo-eval's figures of an rsl_rl policy: its env, play settings and episode loop, with rsl_rl's mean action."""
    from benchmarks.rslrl_train import load_policy
    from collector.envs import make_env
    from common.cores import usable_cores
    from tools import eval as appo_eval

    model = load_policy(policy)
    env = make_env(task, episodes, usable_cores(), 0, motion_file=motion_file)
    appo_eval.use_play_settings(env)
    try:
        results = appo_eval.run_episodes(env, model, episodes)
    finally:
        env.close()
    return {"task": task, "checkpoint": str(policy), "num_envs": episodes, "seed": 0,
            **appo_run.eval_figures(results.figures())}


def run_rslrl(args: argparse.Namespace, seed: int, std: float) -> dict:
    """Train and evaluate one rsl_rl contender."""
    iterations = math.ceil(args.env_steps / (args.num_envs * 24))
    folder = args.out / f"rslrl_std{std:g}" / f"seed_{seed}"
    motion_file = motion_clip(args.config)
    cmd = [sys.executable, "-m", "benchmarks.rslrl_train", "--task", args.task, "--num-envs", str(args.num_envs),
           "--iterations", str(iterations), "--seed", str(seed), "--init-std", repr(std), "--out", str(folder),
           "--device", args.rslrl_device]
    cmd += ["--motion-file", motion_file] if motion_file else []
    cmd += ["--threads", str(args.threads)] if args.threads else []
    seconds = _run(cmd, args.out / f"train_rslrl_std{std:g}_seed_{seed}.log")
    record = json.loads((folder / "curve.json").read_text())
    return {"learner": "rsl_rl", "label": f"rsl_rl std {std:g}", "seed": seed, "init_std": std,
            "num_envs": args.num_envs, "steps_per_env": record["steps_per_env"], "iterations": iterations,
            "env_steps": record["rows"][-1]["env_steps"], "process_seconds": seconds, "dir": str(folder),
            "rsl_rl_version": record["rsl_rl_version"], "train_cfg": record["train_cfg"], "rows": record["rows"],
            "eval": evaluate_rslrl(folder / "policy.pt", args.task, motion_file, args.episodes)}


def run_appo(args: argparse.Namespace, seed: int) -> dict:
    """Train and evaluate appo-train on one seed."""
    from benchmarks.vs_rslrl_report import appo_rows

    steps_per_env = args.config.algo.steps_per_env
    iterations = math.ceil(args.env_steps / (args.num_envs * steps_per_env))
    run, seconds = appo_run.train(args.task, seed, iterations, [f"algo.num_envs={args.num_envs}", *args.overrides],
                                  (args.out / "appo").resolve(), f"seed_{seed}",
                                  args.out / f"train_appo_seed_{seed}.log")
    rows = appo_rows(run)
    return {"learner": "appo", "label": "appo", "seed": seed, "init_std": args.config.algo.policy.init_noise_std,
            "num_envs": args.num_envs, "steps_per_env": steps_per_env, "iterations": iterations,
            "env_steps": rows[-1]["env_steps"], "process_seconds": seconds, "dir": str(run),
            "overrides": args.overrides, "rows": rows, "eval": appo_run.evaluate(run, args.episodes)}


def write_results(args: argparse.Namespace, runs: list[dict]) -> None:
    """curves.json, curves.csv, curves.png and eval.json in --out."""
    from benchmarks import vs_rslrl_report as report

    meta = {"task": args.task, "num_envs": args.num_envs, "env_steps_budget": args.env_steps,
            "seeds": args.seed_list, "std_contenders": args.std_list, "episodes": args.episodes}
    report.write_curves(runs, args.out / "curves.json", args.out / "curves.csv", meta)
    report.plot(runs, args.out / "curves.png", f"{args.task}: rsl_rl PPO vs appo-train, {args.num_envs} envs")
    evals = [{"learner": r["learner"], "label": r["label"], "seed": r["seed"], "env_steps": r["env_steps"],
              "figures": r["eval"]} for r in runs]
    (args.out / "eval.json").write_text(json.dumps({**meta, "evaluations": evals}, indent=2))


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    missing = missing_modules()
    if missing:
        print(f"error: {', '.join(missing)} missing; {INSTALL_HINT}", file=sys.stderr)
        return 2
    import torch

    from benchmarks.vs_rslrl_report import table

    torch.set_num_threads(1)  # as appo-eval: one small MLP forward per step, the cores go to MuJoCo
    args.out.mkdir(parents=True, exist_ok=True)
    runs: list[dict] = []
    try:
        for seed in args.seed_list:
            runs += [run_rslrl(args, seed, std) for std in args.std_list]
            runs.append(run_appo(args, seed))
    except RuntimeError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    write_results(args, runs)
    print(f"\nvs rsl_rl  task {args.task}  {args.num_envs} envs  budget {args.env_steps:,} env steps")
    print(table(runs, args.env_steps))
    print(f"results: {args.out}/curves.json, curves.csv, curves.png, eval.json")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
