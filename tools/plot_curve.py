"""Learning curve of a run from its TensorBoard events: mean reward and tracking error against
env steps and wall time.

    python -m tools.plot_curve logs/appo/go2_joystick_flat/<run> --out docs/go2_learning_curve.png
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

from tools.tb_scalars import read_scalars


def read_series(run: Path) -> dict[str, np.ndarray]:
    """Per iteration: env steps, wall seconds since the first event, and the curves (NaN where absent)."""
    scalars = read_scalars(run)
    if "perf/total_env_steps" not in scalars:
        raise SystemExit(f"error: {run} has no perf/total_env_steps events (not an APPO run directory?)")
    steps = {step: (value, wall) for wall, step, value in scalars["perf/total_env_steps"]}
    iters = sorted(steps)
    t0 = steps[iters[0]][1]
    out = {"iteration": np.array(iters), "env_steps": np.array([steps[i][0] for i in iters]),
           "wall_s": np.array([steps[i][1] - t0 for i in iters])}
    for tag in ("Train/mean_reward", "Episode/tracking_error_xy", "Episode/tracking_error_yaw"):
        values = {step: value for _, step, value in scalars.get(tag, [])}
        out[tag] = np.array([values.get(i, np.nan) for i in iters])
    return out


def plot(series: dict[str, np.ndarray], out: Path, title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(2, 2, figsize=(11, 7), sharey="row")
    for col, (x, label) in enumerate(((series["env_steps"] / 1e6, "env steps (millions)"),
                                       (series["wall_s"] / 60, "wall time (minutes)"))):
        axes[0, col].plot(x, series["Train/mean_reward"], color="tab:blue")
        axes[0, col].set_ylabel("mean episode return")
        axes[1, col].plot(x, series["Episode/tracking_error_xy"], label="xy velocity (m/s)", color="tab:orange")
        axes[1, col].plot(x, series["Episode/tracking_error_yaw"], label="yaw rate (rad/s)", color="tab:green")
        axes[1, col].set_ylabel("RMS tracking error (training episodes)")
        axes[1, col].set_xlabel(label)
        for ax in axes[:, col]:
            ax.grid(alpha=0.3)
    axes[1, 0].legend()
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
    args = p.parse_args(argv)
    series = read_series(args.run)
    plot(series, args.out, args.title or args.run.name)
    print(f"{args.out}: {len(series['iteration'])} iterations, {series['env_steps'][-1]:,.0f} env steps, "
          f"{series['wall_s'][-1] / 60:.1f} min")
    return 0


if __name__ == "__main__":
    sys.exit(main())
