"""The results of benchmarks/vs_rslrl.py: both learners' curves as JSON, CSV and a plot, and the printed table.

A run is a dict: learner ("appo" or "rsl_rl"), label, seed, num_envs, steps_per_env, iterations,
train_seconds, rows (one per iteration: benchmarks/rslrl_curve.COLUMNS, a figure missing where
that iteration had none) and eval (appo-eval's figures of its final policy).
"""

from __future__ import annotations

import csv
import json
import math
from pathlib import Path

from benchmarks.rslrl_curve import COLUMNS, CURVE_TAGS

# Plotted panels: (title, columns drawn in it, log scale).
PANELS = (
    ("mean episode return", ("return",), False),
    ("mean episode length (steps)", ("episode_length",), False),
    ("xy velocity RMS error (m/s)", ("tracking_error_xy",), False),
    ("yaw-rate RMS error (rad/s)", ("tracking_error_yaw",), False),
    ("learning rate", ("learning_rate",), True),
    ("mean policy std", ("policy_std",), False),
)
# Eval figures in the table: (column heading, key, format).
EVAL_COLUMNS = (
    ("return", "return_mean", "{:10.2f}"), ("+-", "return_std", "{:8.2f}"), ("length", "length_mean", "{:7.1f}"),
    ("time limit", "time_limit_fraction", "{:10.2f}"), ("xy m/s", "velocity_xy_rms_error", "{:7.3f}"),
    ("yaw rad/s", "yaw_rate_rms_error", "{:9.3f}"), ("body m", "body_pos_error_mean", "{:7.3f}"),
    ("clip", "clip_fraction_mean", "{:5.2f}"),
)
CURVE_COLUMNS = (
    ("return", "return", "{:10.2f}"), ("length", "episode_length", "{:7.1f}"),
    ("xy m/s", "tracking_error_xy", "{:7.3f}"), ("yaw rad/s", "tracking_error_yaw", "{:9.3f}"),
    ("lr", "learning_rate", "{:9.2e}"), ("std", "policy_std", "{:6.3f}"),
)
WALL = ("wall s", "wall_s", "{:8.1f}")


def appo_rows(run: Path) -> list[dict]:
    """An appo-train run's curve from its TensorBoard scalars, in the columns of an rsl_rl run's."""
    from tools.plot_curve import read_series

    series = read_series(run)
    rows = []
    for i in range(len(series["iteration"])):
        row = {"iteration": int(series["iteration"][i]), "env_steps": int(series["env_steps"][i]),
               "wall_s": float(series["wall_s"][i])}
        for name, tag in CURVE_TAGS.items():
            value = float(series[tag][i]) if tag in series else math.nan
            if math.isfinite(value):
                row[name] = value
        rows.append(row)
    return rows


def write_curves(runs: list[dict], json_path: Path, csv_path: Path, meta: dict) -> None:
    """Every run's rows: JSON (with the runs' settings and eval figures) and one long CSV."""
    json_path.write_text(json.dumps({**meta, "runs": runs}, indent=2))
    with csv_path.open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=["learner", "label", "seed", *COLUMNS])
        writer.writeheader()
        for run in runs:
            for row in run["rows"]:
                writer.writerow({"learner": run["learner"], "label": run["label"], "seed": run["seed"], **row})


def plot(runs: list[dict], out: Path, title: str) -> None:
    """The curves against env steps, one panel per figure any run has: a colour per learner, a line style per seed."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    panels = [p for p in PANELS if any(c in row for run in runs for row in run["rows"] for c in p[1])]
    labels = list(dict.fromkeys(run["label"] for run in runs))
    seeds = list(dict.fromkeys(run["seed"] for run in runs))
    styles = ["-", "--", ":", "-."]
    cols = 2
    nrows = math.ceil(len(panels) / cols)
    fig, axes = plt.subplots(nrows, cols, figsize=(12, 3.0 * nrows + 0.8), squeeze=False)
    for ax, (ylabel, columns, log) in zip(axes.flat, panels, strict=False):
        for run in runs:
            color = f"C{labels.index(run['label'])}"
            style = styles[seeds.index(run["seed"]) % len(styles)]
            for column in columns:
                points = [(r["env_steps"] / 1e6, r[column]) for r in run["rows"] if column in r]
                if points:
                    x, y = zip(*points, strict=True)
                    ax.plot(x, y, style, color=color, label=f"{run['label']}, seed {run['seed']}")
        ax.set_ylabel(ylabel)
        ax.set_xlabel("env steps (millions)")
        if log:
            ax.set_yscale("log")
        ax.grid(alpha=0.3)
    for ax in list(axes.flat)[len(panels):]:
        ax.set_visible(False)
    axes.flat[0].legend(fontsize=8)
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    plt.close(fig)


def curve_rows(rows: list[dict], budget: int, count: int = 4) -> list[dict]:
    """The rows the table shows: the last logged at or before each of the first count - 1 even fractions of the
    budget (the first row where none is), then the run's last row."""
    shown = []
    for k in range(1, count):
        before = [r for r in rows if r["env_steps"] <= budget * k // count]
        shown.append(before[-1] if before else rows[0])
    shown.append(rows[-1])
    return list({r["iteration"]: r for r in shown}.values())


def _width(heading: str, fmt: str) -> int:
    return max(len(heading), len(fmt.format(0.0)))


def _cells(figures: dict, columns) -> str:
    """`figures` under `columns` ((heading, key, format)); "-" where a figure is missing."""
    return "  ".join((fmt.format(figures[key]) if isinstance(figures.get(key), (int, float)) else "-")
                     .rjust(_width(heading, fmt)) for heading, key, fmt in columns)


def _heading(columns) -> str:
    return "  ".join(heading.rjust(_width(heading, fmt)) for heading, _, fmt in columns)


def table(runs: list[dict], budget: int) -> str:
    """Per seed and learner: the curve at even fractions of the budget, then the final evaluation."""
    width = max(len(r["label"]) for r in runs)
    head = f"  {'seed':>4}  {'learner':<{width}}  {'env steps':>11}  "
    curve_columns = [c for c in CURVE_COLUMNS if any(c[1] in row for r in runs for row in r["rows"])]
    lines = ["training curve (means over the recent episodes, as appo-train logs them; wall seconds from the "
             "first logged iteration)", head + _heading([*curve_columns, WALL])]
    for run in sorted(runs, key=lambda r: r["seed"]):
        for row in curve_rows(run["rows"], budget):
            lines.append(f"  {run['seed']:>4}  {run['label']:<{width}}  {row['env_steps']:>11,}  "
                         + _cells(row, [*curve_columns, WALL]))
    episodes = next((r["eval"]["episodes"] for r in runs if r.get("eval")), 0)
    eval_columns = [c for c in EVAL_COLUMNS if any(c[1] in r.get("eval", {}) for r in runs)]
    lines += [f"final policies, {episodes} deterministic episodes each (appo-eval's figures)",
              head + _heading(eval_columns)]
    for run in sorted(runs, key=lambda r: r["seed"]):
        lines.append(f"  {run['seed']:>4}  {run['label']:<{width}}  {run['env_steps']:>11,}  "
                     + _cells(run.get("eval", {}), eval_columns))
    return "\n".join(lines)
