"""Learning curve of a run from its TensorBoard events, against env steps and wall time: mean episode
return and length, the largest reward terms, the termination rate, and (for velocity-command tasks)
the tracking errors.

    python -m tools.plot_curve logs/appo/go2_joystick_flat/<run> --out docs/go2_learning_curve.png
    python -m tools.plot_curve logs/appo/g1_velocity_flat/<run> --out g1.png --terms 4 --control-dt 0.02
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

from common.cli import at_least
from tools.tb_scalars import read_scalars

TRACKING = ("Episode/tracking_error_xy", "Episode/tracking_error_yaw")


def read_series(run: Path) -> dict[str, np.ndarray]:
    """Per iteration: env steps, wall seconds since the first event, and every scalar (NaN where absent)."""
    scalars = read_scalars(run)
    if "perf/total_env_steps" not in scalars:
        raise SystemExit(f"error: {run} has no perf/total_env_steps events (not an APPO run directory?)")
    steps = {step: (value, wall) for wall, step, value in scalars["perf/total_env_steps"]}
    iters = sorted(steps)
    t0 = steps[iters[0]][1]
    out = {"iteration": np.array(iters), "env_steps": np.array([steps[i][0] for i in iters]),
           "wall_s": np.array([steps[i][1] - t0 for i in iters])}
    for tag, events in scalars.items():
        values = {step: value for _, step, value in events}
        out[tag] = np.array([values.get(i, np.nan) for i in iters])
    return out


def main_terms(series: dict[str, np.ndarray], count: int) -> list[str]:
    """The `count` reward-term tags with the largest mean magnitude over the run's last quarter."""
    tags = [t for t in series if t.startswith("Episode/reward_") and np.isfinite(series[t]).any()]

    def weight(tag: str) -> float:
        tail = series[tag][-max(1, len(series[tag]) // 4):]
        return float(np.nanmean(np.abs(tail))) if np.isfinite(tail).any() else 0.0

    return sorted(tags, key=weight, reverse=True)[:count]


def panels(series: dict[str, np.ndarray], terms: int, control_dt: float | None) -> list[tuple[str, dict]]:
    """(y label, {legend: values}) for each row the run has data for."""
    length = series.get("Train/mean_episode_length")
    rows = [("mean episode return", {"": series.get("Train/mean_reward")})]
    if length is not None:
        rows.append(("mean episode length (s)" if control_dt else "mean episode length (steps)",
                     {"": length * control_dt if control_dt else length}))
    chosen = main_terms(series, terms)
    if chosen:
        rows.append(("reward per episode, by term", {t.removeprefix("Episode/reward_"): series[t] for t in chosen}))
    if "Episode/timeout_rate" in series:
        rows.append(("terminated (not timed out)", {"": 1.0 - series["Episode/timeout_rate"]}))
    if all(t in series for t in TRACKING):
        rows.append(("RMS tracking error", {"xy velocity (m/s)": series[TRACKING[0]],
                                            "yaw rate (rad/s)": series[TRACKING[1]]}))
    return [(label, curves) for label, curves in rows if all(v is not None for v in curves.values())]


def plot(series: dict[str, np.ndarray], out: Path, title: str, terms: int = 4,
         control_dt: float | None = None) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = panels(series, terms, control_dt)
    fig, axes = plt.subplots(len(rows), 2, figsize=(11, 2.6 * len(rows) + 0.6), sharey="row", squeeze=False)
    for col, (x, label) in enumerate(((series["env_steps"] / 1e6, "env steps (millions)"),
                                       (series["wall_s"] / 60, "wall time (minutes)"))):
        for row, (ylabel, curves) in enumerate(rows):
            ax = axes[row, col]
            for name, values in curves.items():
                ax.plot(x, values, label=name or None)
            ax.set_ylabel(ylabel)
            ax.grid(alpha=0.3)
            if col == 0 and len(curves) > 1:
                ax.legend(fontsize=8)
        axes[-1, col].set_xlabel(label)
    fig.suptitle(title)
    fig.tight_layout()
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=100)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m tools.plot_curve", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("run", type=Path, help="run directory (holds the TensorBoard events)")
    p.add_argument("--out", type=Path, required=True, help="PNG to write")
    p.add_argument("--title", default="")
    p.add_argument("--terms", type=at_least(0), default=4, help="reward terms to plot (the largest by magnitude)")
    p.add_argument("--control-dt", type=float, help="seconds per env step: episode length in seconds, not steps")
    args = p.parse_args(argv)
    if args.control_dt is not None and not args.control_dt > 0:
        p.error(f"--control-dt must be positive, got {args.control_dt}")
    if not args.run.is_dir():
        p.error(f"run directory not found: {args.run}")
    series = read_series(args.run)
    plot(series, args.out, args.title or args.run.name, args.terms, args.control_dt)
    print(f"{args.out}: {len(series['iteration'])} iterations, {series['env_steps'][-1]:,.0f} env steps, "
          f"{series['wall_s'][-1] / 60:.1f} min")
    return 0


if __name__ == "__main__":
    sys.exit(main())
