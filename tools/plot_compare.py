"""Several runs' mean episode return (or another scalar) against wall time on one plot
(ours, other settings, other tools).

    python -m tools.plot_compare --out docs/half_cheetah_8min.png \
        "preset=logs/appo/half_cheetah/<run>" "5 epochs=logs/appo/half_cheetah/<other>"

Any TensorBoard directory with a `Train/mean_reward` scalar works; wall time counts
from the run's first event of that tag's file (start-up before it is not shown).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from tools.tb_scalars import read_scalars


def reward_vs_time(run: Path, tag: str = "Train/mean_reward") -> tuple[list[float], list[float]]:
    """(minutes since the run's first scalar, value) of one tag."""
    scalars = read_scalars(run)
    if tag not in scalars:
        raise SystemExit(f"error: {run} has no {tag} scalar")
    t0 = min(events[0][0] for events in scalars.values())
    return [(w - t0) / 60 for w, _, _ in scalars[tag]], [v for _, _, v in scalars[tag]]


def parse_run(text: str) -> tuple[str, Path]:
    label, sep, path = text.partition("=")
    if not sep or not label or not path:
        raise argparse.ArgumentTypeError(f"expected LABEL=RUN_DIR, got {text!r}")
    return label, Path(path)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m tools.plot_compare", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("runs", nargs="+", type=parse_run, help="LABEL=RUN_DIR")
    p.add_argument("--out", type=Path, required=True, help="PNG to write")
    p.add_argument("--title", default="")
    p.add_argument("--tag", default="Train/mean_reward", help="scalar to plot (e.g. Train/mean_episode_length)")
    p.add_argument("--ylabel", default="mean episode return (training episodes)")
    p.add_argument("--target", type=float, help="draw a horizontal line at this return")
    args = p.parse_args(argv)

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 5))
    for label, run in args.runs:
        minutes, values = reward_vs_time(run, args.tag)
        ax.plot(minutes, values, label=label)
        print(f"{label}: {len(values)} points, last {values[-1]:.0f} at {minutes[-1]:.1f} min")
    if args.target is not None:
        ax.axhline(args.target, color="grey", linestyle="--", label=f"target {args.target:g}")
    ax.set_xlabel("wall time (minutes)")
    ax.set_ylabel(args.ylabel)
    ax.grid(alpha=0.3)
    ax.legend()
    ax.set_title(args.title)
    fig.tight_layout()
    args.out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(args.out, dpi=100)
    return 0


if __name__ == "__main__":
    sys.exit(main())
