"""Where a g1_walk_flat policy falls: against the reset's random root push, and with that push taken away.

    python -m benchmarks.walk_falls --load-run logs/appo/g1_walk_flat/RUN/model_1200.pt
    python -m benchmarks.walk_falls --load-run RUN.pt --envs 128 --json falls.json

Each of --envs envs runs one 20 s episode with the checkpoint's mean action, in appo-eval's play mode
(no observation noise), twice: as the task resets (root linear and angular velocity each component
~ U(-0.5, 0.5)), and with that random twist set to 0 (a diagnostic, not the task).  Reports how many
episodes last the 20 s, how many fall within 2 s, and the falls per band of the initial horizontal
speed and of the commanded speed.  A policy that only stands falls where the push needs a step.
"""

from __future__ import annotations

import argparse
import json
import sys

import numpy as np
import torch

from common.checkpoint_io import CheckpointError, add_checkpoint_args, policy_from_args
from common.cli import at_least

TASK = "g1_walk_flat"
SPEED_BANDS = ((0.0, 0.2), (0.2, 0.4), (0.4, 1.0))      # initial horizontal root speed, m/s
COMMAND_BANDS = ((0.0, 0.2), (0.2, 0.5), (0.5, 1.5))    # commanded xy speed, m/s
EARLY_STEPS = 100  # 2 s


def one_episode_each(model, envs: int, seed: int, push: bool) -> dict:
    """Every env's first episode: initial root speed, commanded speed, and the step it fell at (-1: did not)."""
    from collector.envs import make_env
    from tools.eval import use_play_settings

    env = make_env(TASK, envs, 1, seed=seed)
    use_play_settings(env)
    if not push:
        env.reset_root_vel = 0.0
    obs, _ = env.reset()
    speed = np.linalg.norm(env.qvel[:, :2], axis=1)
    command = np.linalg.norm(env.commands[:, :2], axis=1)
    fell = np.full(envs, -1)
    running = np.ones(envs, bool)
    for t in range(env.max_episode_steps):
        with torch.no_grad():
            actions = model.act_deterministic(torch.from_numpy(obs)).numpy()
        result = env.step(actions)
        fell[running & result.terminated] = t
        running &= ~(result.terminated | result.truncated)
        obs = result.obs
        if not running.any():
            break
    return {"speed": speed, "command": command, "fell": fell}


def _bands(values: np.ndarray, fell: np.ndarray, bands) -> list[dict]:
    return [{"from": lo, "to": hi, "episodes": int(np.sum((values >= lo) & (values < hi))),
             "fell": int(np.sum((values >= lo) & (values < hi) & (fell >= 0)))} for lo, hi in bands]


def summary(run: dict) -> dict:
    fell = run["fell"]
    return {"episodes": int(fell.size), "to_the_limit": int(np.sum(fell < 0)),
            "fell_within_2s": int(np.sum((fell >= 0) & (fell < EARLY_STEPS))),
            "by_initial_speed": _bands(run["speed"], fell, SPEED_BANDS),
            "by_command": _bands(run["command"], fell, COMMAND_BANDS)}


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m benchmarks.walk_falls", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    add_checkpoint_args(p)
    p.add_argument("--envs", type=at_least(1), default=64, help="episodes (one per env) of each run")
    p.add_argument("--seed", type=int, default=0, help="env seed")
    p.add_argument("--json", help="also write the figures here")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    torch.set_num_threads(1)
    try:
        loaded = policy_from_args(args, TASK)
        if loaded.task != TASK:
            raise ValueError(f"{loaded.path} is a {loaded.task} checkpoint; this measures {TASK}")
        runs = {name: summary(one_episode_each(loaded.model, args.envs, args.seed, push))
                for name, push in (("with_push", True), ("without_push", False))}
    except (CheckpointError, ValueError) as exc:
        print(f"walk_falls: {exc}", file=sys.stderr)
        return 2
    for name, r in runs.items():
        print(f"{name}: {r['to_the_limit']}/{r['episodes']} to the 20 s limit, {r['fell_within_2s']} fell within 2 s")
        for label, key in (("initial xy speed", "by_initial_speed"), ("commanded xy speed", "by_command")):
            print(f"  {label}: " + ", ".join(f"{b['from']}-{b['to']} m/s fell {b['fell']}/{b['episodes']}"
                                           for b in r[key]))
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"checkpoint": str(loaded.path), **runs}, f, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
