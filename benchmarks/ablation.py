"""Learning changes at equal env steps: appo-train once per variant and seed, back to back, then compare.

    python -m benchmarks.ablation --task g1_velocity_flat --env-steps 2000000 --seeds 1,2 \\
        --variant base= --variant lam1=algo.algorithm.lam=1.0 \\
        --variant band=algo.algorithm.kl_factor=2.0,algo.algorithm.lr_factor=1.5 [--out DIR] [KEY=VALUE ...]

Each variant is NAME=KEY=VALUE[,KEY=VALUE...] (empty after the first '=' for the task's defaults);
the trailing KEY=VALUE overrides apply to every variant.  Every run trains for the same number of
iterations, ceil(env steps / (num_envs x steps_per_env)), one run at a time, so the runs share the
cores alike.  For each run it prints the training curve (mean episode length, return and, for
command tasks, the xy tracking error) at a few env-step points, and the final checkpoint's
appo-eval figures (deterministic, play mode); --json writes all of it.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

import numpy as np

from benchmarks import appo_run

CURVE_TAGS = ("Train/mean_episode_length", "Train/mean_reward", "Episode/tracking_error_xy", "Loss/learning_rate",
              "Policy/mean_std", "Train/approx_kl")
EVAL_KEYS = ("return_mean", "length_mean", "time_limit_fraction", "velocity_xy_rms_error",
             "commanded_xy_speed_rms", "measured_xy_speed_rms", "slope_vx", "body_pos_error_mean", "clip_fraction_mean")


def parse_variant(text: str) -> tuple[str, list[str]]:
    """NAME=KEY=VALUE,KEY=VALUE -> (NAME, [KEY=VALUE, ...])."""
    name, sep, rest = text.partition("=")
    if not sep or not name:
        raise ValueError(f"variant {text!r}: expected NAME=KEY=VALUE[,KEY=VALUE...] (or NAME= for none)")
    overrides = [o for o in rest.split(",") if o]
    for o in overrides:
        if "=" not in o:
            raise ValueError(f"variant {name}: {o!r} is not KEY=VALUE")
    return name, overrides


def iterations_for(env_steps: int, task: str, overrides: list[str]) -> tuple[int, int]:
    """(iterations, env steps per iteration) of a run of `task` with `overrides` (checked by loading the config)."""
    from common.config import load_config

    cfg = load_config(overrides, extra={"task": task}, environ={})
    per = cfg.algo.num_envs * cfg.algo.steps_per_env
    return max(1, math.ceil(env_steps / per)), per


def curve(run: Path, points: list[int]) -> dict[str, list[float | None]]:
    """Each of CURVE_TAGS at the given env-step points (the last logged value at or before each)."""
    from tools.tb_scalars import read_scalars

    scalars = read_scalars(run)
    steps = {it: v for _, it, v in scalars["perf/total_env_steps"]}
    out: dict[str, list[float | None]] = {}
    for tag in CURVE_TAGS:
        series = [(steps[it], v) for _, it, v in scalars.get(tag, []) if it in steps]
        xs = np.array([s for s, _ in series])
        out[tag] = [float(series[np.searchsorted(xs, p, side="right") - 1][1])
                    if len(xs) and xs[0] <= p else None for p in points]
    return out


def _fmt(v) -> str:
    return "-" if v is None else f"{v:.3g}"


def report(results: list[dict], points: list[int]) -> str:
    """One Markdown table: a row per variant and seed."""
    head = ["variant", "seed", *[f"length@{p / 1e6:g}M" for p in points], *[f"return@{p / 1e6:g}M" for p in points],
            "xy err (train, last)", "lr (last)", "std (last)", *[f"eval {k}" for k in EVAL_KEYS], "minutes"]
    lines = ["| " + " | ".join(head) + " |", "|" + " --- |" * len(head)]
    for r in results:
        c = r["curve"]
        row = [r["variant"], str(r["seed"]), *[_fmt(v) for v in c["Train/mean_episode_length"]],
               *[_fmt(v) for v in c["Train/mean_reward"]], _fmt(c["Episode/tracking_error_xy"][-1]),
               _fmt(c["Loss/learning_rate"][-1]), _fmt(c["Policy/mean_std"][-1]),
               *[_fmt(r["eval"].get(k)) for k in EVAL_KEYS], f"{r['minutes']:.1f}"]
        lines.append("| " + " | ".join(row) + " |")
    return "\n".join(lines)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m benchmarks.ablation", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--task", required=True)
    p.add_argument("--env-steps", type=int, required=True, help="env steps per run")
    p.add_argument("--seeds", default="1", help="comma-separated seeds (default 1)")
    p.add_argument("--variant", action="append", required=True, metavar="NAME=KEY=VALUE[,...]")
    p.add_argument("--points", type=int, default=4, help="curve points, evenly spaced up to the budget (default 4)")
    p.add_argument("--episodes", type=int, default=20, help="appo-eval episodes for each final policy")
    p.add_argument("--out", default="logs/ablation", help="runs and results go here (default logs/ablation)")
    p.add_argument("--json", help="write every figure here")
    p.add_argument("overrides", nargs="*", metavar="KEY=VALUE", help="config overrides for every variant")
    args = p.parse_args(argv)
    try:
        args.seeds = [int(s) for s in args.seeds.split(",")]
        args.variant = [parse_variant(v) for v in args.variant]
    except ValueError as exc:
        p.error(str(exc))
    if args.env_steps <= 0:
        p.error("--env-steps must be positive")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    from common.config import ConfigError

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    try:
        plan = [(name, [*args.overrides, *o], *iterations_for(args.env_steps, args.task, [*args.overrides, *o]))
                for name, o in args.variant]
    except ConfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    results = []
    for name, overrides, iterations, per in plan:
        points = [int(round(per * iterations * (i + 1) / args.points)) for i in range(args.points)]
        for seed in args.seeds:
            run_name = f"{name}_seed{seed}"
            try:
                run, seconds = appo_run.train(args.task, seed, iterations, overrides, out.resolve(), run_name,
                                              out / f"{run_name}.log")
            except RuntimeError as exc:
                print(f"error: {exc}", file=sys.stderr)
                return 1
            figures = appo_run.evaluate(run, args.episodes)
            results.append({"variant": name, "seed": seed, "overrides": overrides, "run": str(run),
                            "minutes": seconds / 60, "curve": curve(run, points),
                            "eval": {k: figures[k] for k in EVAL_KEYS if k in figures}})
            print(report(results[-1:], points), flush=True)
            if args.json:
                Path(args.json).write_text(json.dumps(results, indent=1))
    print(report(results, points))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
