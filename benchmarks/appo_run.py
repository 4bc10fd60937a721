"""One appo-train run of a fixed number of iterations, and appo-eval's figures of its last checkpoint.

Shared by the benchmarks that compare learners or settings at equal env steps (benchmarks.ablation,
benchmarks.vs_rslrl): each run is its own process, one at a time, so runs share the cores alike.
"""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path


def train(task: str, seed: int, iterations: int, overrides: list[str], log_dir: Path, run_name: str,
          log: Path) -> tuple[Path, float]:
    """appo-train for `iterations` updates, its output in `log`; (run directory, wall seconds)."""
    cmd = [sys.executable, "-m", "learner.train", "--task", task, f"algo.seed={seed}",
           f"algo.max_iterations={iterations}", f"algo.save_interval={iterations}", f"training.log_dir={log_dir}",
           f"training.run_name={run_name}", "training.console=false", "training.no_play=true", *overrides]
    print(f"$ {' '.join(cmd[1:])}", flush=True)
    start = time.monotonic()
    with log.open("wb") as out:
        rc = subprocess.run(cmd, stdout=out, stderr=subprocess.STDOUT, check=False).returncode
    if rc != 0:
        raise RuntimeError(f"appo-train exited {rc}; see {log}")
    return log_dir / task / run_name, time.monotonic() - start


def eval_figures(figures: dict) -> dict:
    """appo-eval's figures without the per-episode lists."""
    return {k: v for k, v in figures.items() if k not in ("returns", "lengths", "clip_fractions")}


def evaluate(run: Path, episodes: int) -> dict:
    """appo-eval's figures of a run's last checkpoint (deterministic policy, play mode)."""
    from tools import eval as appo_eval

    return eval_figures(appo_eval.evaluate(appo_eval.parse_args(["--load-run", str(run), "--episodes",
                                                                   str(episodes)])))
