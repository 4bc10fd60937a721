"""How far a policy is from its own mirror image, where symmetry augmentation needs it to be one.

    python -m benchmarks.mirror_gap --load-run logs/appo/g1_walk_flat/RUN/model_1200.pt
    python -m benchmarks.mirror_gap --load-run RUN.pt --envs 64 --steps 300 --json gap.json

Runs the checkpoint's stochastic policy on its task (--envs envs, --steps control steps, env seed
--seed) and, for every sampled action a in observation x, compares log pi(a | x) with the same
policy's log pi(M_act a | M_obs x) on the mirror image.  Symmetry augmentation (algo.algorithm.symmetry,
mirror_log_probs=copied) gives each mirrored sample its original's behaviour log-prob, which is right
only where the gap is 0.  Prints the gap's mean and standard deviation and the fraction of samples
whose ratio exp(gap) lies outside [1 - clip, 1 + clip] (--clip, the PPO clip): that fraction of the
mirrored half starts an update clipped.
"""

from __future__ import annotations

import argparse
import json
import sys

import numpy as np
import torch

from common.checkpoint_io import CheckpointError, add_checkpoint_args, policy_from_args
from common.cli import at_least
from common.symmetry import task_mirror


def mirror_gaps(policy, task: str, envs: int, steps: int, seed: int) -> np.ndarray:
    """log pi(M a | M x) - log pi(a | x) [steps * envs] along the policy's own trajectories."""
    from collector.envs import make_env

    mirror = task_mirror(task)
    env = make_env(task, envs, 1, seed=seed)
    obs, _ = env.reset()
    generator = torch.Generator().manual_seed(seed)
    gaps = []
    for _ in range(steps):
        with torch.no_grad():
            dist = policy.distribution(torch.from_numpy(obs))
            actions = dist.mean + dist.stddev * torch.randn(dist.mean.shape, generator=generator)
            log_p = dist.log_prob(actions).sum(-1)
            mirrored = policy.distribution(torch.from_numpy(mirror.obs.apply(obs)))
            log_p_mirrored = mirrored.log_prob(torch.from_numpy(mirror.actions.apply(actions.numpy()))).sum(-1)
        gaps.append((log_p_mirrored - log_p).numpy())
        obs = env.step(actions.numpy()).obs
    return np.concatenate(gaps)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m benchmarks.mirror_gap", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    add_checkpoint_args(p)
    p.add_argument("--envs", type=at_least(1), default=32, help="envs stepped with the policy")
    p.add_argument("--steps", type=at_least(1), default=150, help="control steps per env")
    p.add_argument("--seed", type=int, default=0, help="env and sampling seed")
    p.add_argument("--clip", type=float, default=0.2, help="the PPO clip the ratio is compared with")
    p.add_argument("--json", help="also write the figures here")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    torch.set_num_threads(1)
    try:
        loaded = policy_from_args(args)
        gaps = mirror_gaps(loaded.model, loaded.task, args.envs, args.steps, args.seed)
    except (CheckpointError, ValueError) as exc:
        print(f"mirror_gap: {exc}", file=sys.stderr)
        return 2
    ratio = np.exp(gaps)
    out = {"checkpoint": str(loaded.path), "task": loaded.task, "samples": int(gaps.size),
           "gap_mean": float(gaps.mean()), "gap_std": float(gaps.std()),
           "outside_clip": float(np.mean(np.abs(ratio - 1.0) > args.clip)), "clip": args.clip}
    print(f"{loaded.task}  {loaded.path}  {out['samples']} samples")
    print(f"log pi(mirrored) - log pi(original): mean {out['gap_mean']:.3f}  std {out['gap_std']:.3f}")
    print(f"ratio outside [1 - {args.clip}, 1 + {args.clip}]: {out['outside_clip']:.3f}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(out, f, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
