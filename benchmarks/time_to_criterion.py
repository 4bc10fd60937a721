"""Time to a criterion: train for a fixed wall time per seed, then find the first checkpoint that meets it.

    python -m benchmarks.time_to_criterion --task go2_joystick_flat --seeds 7,8,9 --minutes 6
    python -m benchmarks.time_to_criterion --task hopper --seeds 1,2,3 --minutes 8 --return-at-least 2410
    python -m benchmarks.time_to_criterion --task go2_joystick_flat --seeds 7 algo.algorithm.learning_rate=5e-4

Each seed is one `appo-train --task T algo.seed=S` (plus the KEY=VALUE overrides given), saving a
checkpoint every --save-every iterations, stopped with SIGTERM --minutes after its first iteration.
Then its checkpoints are evaluated in order as appo-eval does (--episodes deterministic episodes,
environment seed 0) until every criterion has been met, and the last one within the budget is
evaluated too.  A checkpoint's time is the wall time from the run's first iteration to the iteration
it was saved at (from TensorBoard's perf/total_env_steps).  Criteria, for tasks that track velocity
commands (Go2):
  walking  >= 90% of the episodes reach the time limit, xy velocity RMS error <= 0.25 m/s,
           yaw-rate RMS error <= 0.35 rad/s
  tight    the same with <= 0.15 m/s and <= 0.20 rad/s
and for any task with --return-at-least R:
  return   mean evaluated return >= R
The report: per seed, the first checkpoint meeting each criterion with its time and env steps, and
the figures of the last checkpoint within the budget; then the median time over the seeds (a seed
that never met a criterion counts as slower than the budget).
"""

from __future__ import annotations

import argparse
import json
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from common.checkpoint_io import checkpoints_in
from common.cli import at_least
from common.config import ConfigError, load_config
from tools.tb_scalars import wait_first_iteration

VELOCITY = {
    "walking": {"time_limit_fraction": (">=", 0.90), "velocity_xy_rms_error": ("<=", 0.25),
                "yaw_rate_rms_error": ("<=", 0.35)},
    "tight": {"time_limit_fraction": (">=", 0.90), "velocity_xy_rms_error": ("<=", 0.15),
              "yaw_rate_rms_error": ("<=", 0.20)},
}


def meets(figures: dict, criterion: dict) -> bool:
    """Whether evaluated figures satisfy every bound of a criterion (a missing figure fails it)."""
    for key, (op, bound) in criterion.items():
        value = figures.get(key)
        if value is None or not (value >= bound if op == ">=" else value <= bound):
            return False
    return True


def criteria_for(figures: dict, return_at_least: float | None) -> dict[str, dict]:
    """The criteria that apply to a task, from what its evaluation reports."""
    out = dict(VELOCITY) if "velocity_xy_rms_error" in figures else {}
    if return_at_least is not None:
        out["return"] = {"return_mean": (">=", return_at_least)}
    return out


def checkpoint_times(run: Path) -> dict[int, tuple[float, int]]:
    """iteration -> (seconds since the first iteration, env steps), from the run's TensorBoard scalars."""
    from tools.tb_scalars import read_scalars

    steps = read_scalars(run)["perf/total_env_steps"]
    t0 = steps[0][0]
    return {it: (wall - t0, int(value)) for wall, it, value in steps}


def train(task: str, seed: int, minutes: float, save_every: int, overrides: list[str], log_dir: Path,
          collectors: int) -> Path:
    """Run appo-train for `minutes` after its first iteration; the run directory."""
    run = log_dir / task / f"seed_{seed}"
    cmd = [sys.executable, "-m", "learner.train", "--task", task, "--collectors", str(collectors),
           f"algo.seed={seed}", f"algo.save_interval={save_every}", "algo.max_iterations=1000000",
           "training.keep_checkpoints=100000", f"training.log_dir={log_dir}", f"training.run_name=seed_{seed}",
           "training.console=false", "training.no_play=true", *overrides]
    print(f"$ {' '.join(cmd[1:])}", flush=True)
    with open(log_dir / f"train_seed_{seed}.log", "wb") as out:
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT)
        try:
            first = wait_first_iteration(proc, run)
            # A little past the budget, so that a checkpoint due right at it is written.
            deadline = first + minutes * 60 + 5
            while proc.poll() is None and time.monotonic() < deadline:
                time.sleep(0.5)
        finally:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
            proc.wait(timeout=120)
    if proc.returncode != 0:
        raise RuntimeError(f"appo-train exited {proc.returncode}; see {log_dir / f'train_seed_{seed}.log'}")
    return run


def evaluate(path: Path, episodes: int) -> dict:
    """appo-eval's figures for one checkpoint."""
    import torch

    from tools import eval as appo_eval

    torch.set_num_threads(1)
    figures = appo_eval.evaluate(appo_eval.parse_args(["--load-run", str(path), "--episodes", str(episodes)]))
    return {k: v for k, v in figures.items() if k not in ("returns", "lengths")}


def assess(run: Path, minutes: float, episodes: int, return_at_least: float | None) -> dict:
    """The first checkpoint meeting each criterion within the budget, and the last checkpoint's figures."""
    times = checkpoint_times(run)
    within = [(it, p) for it, p in sorted(checkpoints_in(run).items()) if it in times and times[it][0] <= minutes * 60]
    if not within:
        raise RuntimeError(f"no checkpoint of {run} within {minutes} minutes")
    first: dict[str, dict] = {}
    evaluated: dict[int, dict] = {}
    wanted: dict[str, dict] | None = None
    for it, path in within:
        figures = evaluated[it] = {**evaluate(path, episodes), "seconds": times[it][0], "env_steps": times[it][1]}
        print(f"  iteration {it:>5}  {times[it][0]:7.1f} s  " + _brief(figures), flush=True)
        wanted = wanted if wanted is not None else criteria_for(figures, return_at_least)
        for name, criterion in wanted.items():
            if name not in first and meets(figures, criterion):
                first[name] = {"iteration": it, "seconds": times[it][0], "env_steps": times[it][1]}
        if len(first) == len(wanted):
            break
    last_it, last_path = within[-1]
    if last_it not in evaluated:
        evaluated[last_it] = {**evaluate(last_path, episodes), "seconds": times[last_it][0],
                              "env_steps": times[last_it][1]}
        print(f"  iteration {last_it:>5}  {times[last_it][0]:7.1f} s  " + _brief(evaluated[last_it]), flush=True)
    return {"criteria": sorted(wanted or {}), "first": first, "last": {"iteration": last_it, **evaluated[last_it]},
            "evaluated": {str(k): v for k, v in evaluated.items()}}


def _brief(f: dict) -> str:
    out = f"return {f['return_mean']:9.2f}  time limit {f['time_limit_fraction']:.2f}"
    if "velocity_xy_rms_error" in f:
        out += f"  xy {f['velocity_xy_rms_error']:.3f} m/s  yaw {f['yaw_rate_rms_error']:.3f} rad/s"
    return out


def summarize(per_seed: dict[int, dict], minutes: float) -> dict:
    """Median time to each criterion over the seeds (a seed that missed it counts as beyond the budget)."""
    names = sorted({n for r in per_seed.values() for n in r["criteria"]})
    out = {}
    for name in names:
        times = [r["first"].get(name, {}).get("seconds", float("inf")) for r in per_seed.values()]
        median = statistics.median(times)
        out[name] = {"median_seconds": median if median != float("inf") else None,
                     "met_by": sum(t != float("inf") for t in times), "seeds": len(times)}
    returns = [r["last"]["return_mean"] for r in per_seed.values()]
    out["last_return_mean"] = sum(returns) / len(returns)
    out["minutes"] = minutes
    return out


def _hit(first: dict | None) -> str:
    if first is None:
        return "not met"
    return f"{first['seconds'] / 60:.2f} min (iteration {first['iteration']}, {first['env_steps']:,} env steps)"


def print_report(task: str, per_seed: dict[int, dict], summary: dict) -> None:
    print(f"\ntime to criterion  task {task}  budget {summary['minutes']} min")
    for seed, r in per_seed.items():
        hits = "  ".join(f"{n}: {_hit(r['first'].get(n))}" for n in r["criteria"])
        print(f"  seed {seed}:  {hits or 'no criterion'}")
        print(f"    last checkpoint (iteration {r['last']['iteration']}, {r['last']['seconds'] / 60:.2f} min):  "
              + _brief(r["last"]))
    for name, s in summary.items():
        if isinstance(s, dict):
            median = f"{s['median_seconds'] / 60:.2f} min" if s["median_seconds"] is not None else "not met"
            print(f"  median time to {name}: {median}  (met by {s['met_by']} of {s['seeds']} seeds)")
    print(f"  mean return of the last checkpoints: {summary['last_return_mean']:.2f}")


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m benchmarks.time_to_criterion", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--task", default="go2_joystick_flat")
    p.add_argument("--seeds", default="7,8,9", help="comma-separated algo.seed values, one run each")
    p.add_argument("--minutes", type=float, default=6.0, help="training wall time per seed, from its first iteration")
    p.add_argument("--save-every", type=at_least(1), default=5, help="checkpoint interval in iterations")
    p.add_argument("--episodes", type=at_least(1), default=20, help="evaluated episodes per checkpoint")
    p.add_argument("--return-at-least", type=float, help="add the criterion: mean evaluated return >= this")
    p.add_argument("--collectors", type=at_least(1), default=1, help="appo-train --collectors")
    p.add_argument("--log-dir", help="where the runs go (default: a temporary folder, removed)")
    p.add_argument("--json", help="write the report here")
    p.add_argument("overrides", nargs="*", help="KEY=VALUE config overrides for every run")
    args = p.parse_intermixed_args(argv)
    if not 0 < args.minutes < float("inf"):
        p.error(f"--minutes must be a positive number, got {args.minutes}")
    try:
        args.seed_list = [int(s) for s in args.seeds.split(",")]
    except ValueError:
        p.error(f"--seeds: expected comma-separated integers, got {args.seeds!r}")
    try:  # refused now, not when the first run starts
        load_config(args.overrides, extra={"task": args.task}, environ={})
    except ConfigError as exc:
        p.error(str(exc))
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="appo-ttc-") as tmp:
        log_dir = Path(args.log_dir or tmp).resolve()
        log_dir.mkdir(parents=True, exist_ok=True)
        per_seed = {}
        for seed in args.seed_list:
            run = train(args.task, seed, args.minutes, args.save_every, args.overrides, log_dir, args.collectors)
            per_seed[seed] = assess(run, args.minutes, args.episodes, args.return_at_least)
        summary = summarize(per_seed, args.minutes)
    print_report(args.task, per_seed, summary)
    if args.json:
        Path(args.json).write_text(json.dumps({"task": args.task, "overrides": args.overrides,
                                               "seeds": per_seed, "summary": summary}, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
