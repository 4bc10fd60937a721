"""One run of rsl_rl's PPO (rsl-rl-lib 5.4.2, unmodified) on the project's env, with the reference's G1 PPO settings.

    python -m benchmarks.rslrl_train --task go2_joystick_flat --num-envs 2048 --iterations 20 --seed 1 \\
        --init-std 1.0 --out DIR [--motion-file CLIP.npz] [--threads K] [--device cpu]

benchmarks/vs_rslrl.py runs it as a subprocess per seed and std.  The env is the one an
appo-train collector steps (collector.envs.make_collector_env, seeded as appo-train seeds its
first collector: seed + 1000) behind rsl_rl's VecEnv (benchmarks/rslrl_env.py).  The settings
(`train_cfg`): actor and critic [512, 256, 128] ELU with empirical observation normalisation, a
Gaussian with a learned state-independent std starting at --init-std, 24 steps per env; PPO with
lr 1e-3 under the adaptive schedule (desired KL 0.01), 5 epochs of 4 minibatches, clip 0.2,
gamma 0.99, lambda 0.95, value loss coefficient 1.0 with the clipped value loss, entropy
coefficient 0.01 (0.005 for g1_motion_tracking), gradient norm 1.0.

Writes to --out: rsl_rl's own log (TensorBoard events, model_<it>.pt, its git-diff folder),
curve.json (the rows of benchmarks/rslrl_curve.py and the settings) and policy.pt (the final actor
with its observation normaliser, and what `load_policy` needs to rebuild it).
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import random
from importlib.metadata import version
from pathlib import Path

import numpy as np
import torch

from common.cli import at_least
from common.cores import usable_cores

STEPS_PER_ENV = 24
RSLRL_VERSION = "5.4.2"  # the train_cfg layout below is this release's
MODEL = {"class_name": "MLPModel", "hidden_dims": [512, 256, 128], "activation": "elu", "obs_normalization": True}
OBS_GROUPS = {"actor": ["policy"], "critic": ["critic"]}


def train_cfg(task: str, init_std: float, save_interval: int) -> dict:
    """OnPolicyRunner's train_cfg: the reference's G1 PPO settings with the actor's initial std `init_std`."""
    return {
        "num_steps_per_env": STEPS_PER_ENV,
        "save_interval": save_interval,
        "obs_groups": copy.deepcopy(OBS_GROUPS),
        "actor": {**copy.deepcopy(MODEL), "distribution_cfg": {
            "class_name": "GaussianDistribution", "init_std": init_std, "std_type": "scalar"}},
        "critic": copy.deepcopy(MODEL),
        "algorithm": {
            "class_name": "PPO", "learning_rate": 1e-3, "schedule": "adaptive", "desired_kl": 0.01,
            "num_learning_epochs": 5, "num_mini_batches": 4, "clip_param": 0.2, "gamma": 0.99, "lam": 0.95,
            "value_loss_coef": 1.0, "use_clipped_value_loss": True, "max_grad_norm": 1.0, "optimizer": "adam",
            "entropy_coef": 0.005 if task == "g1_motion_tracking" else 0.01,
            "normalize_advantage_per_mini_batch": False, "rnd_cfg": None, "symmetry_cfg": None,
        },
        "logger": "tensorboard",
        "check_for_nan": True,
    }


def policy_std(actor) -> torch.Tensor:
    """The actor's current std per action, from its parameter (as the next rollout samples with it)."""
    d = actor.distribution
    if d.std_type == "scalar":
        return d.std_param.detach().clamp(*d.std_range)
    return d.log_std_param.detach().clamp(*d.log_std_range).exp()


def learner_figures(alg) -> dict[str, float]:
    """The curve's learner columns: rsl_rl's current learning rate and mean policy std."""
    return {"learning_rate": float(alg.learning_rate), "policy_std": float(policy_std(alg.get_policy()).mean())}


def train(task: str, num_envs: int, iterations: int, seed: int, init_std: float, out: Path, threads: int,
          device: str = "cpu", motion_file: str | None = None) -> dict:
    """Train for `iterations` rsl_rl iterations; write rsl_rl's log, curve.json and policy.pt to `out`."""
    # GitPython, which rsl_rl's logger imports, refuses to import without a git binary unless told to stay quiet.
    os.environ.setdefault("GIT_PYTHON_REFRESH", "quiet")
    from rsl_rl.runners import OnPolicyRunner

    from benchmarks.rslrl_curve import TrainingCurve
    from benchmarks.rslrl_env import RslRlEnv
    from collector.envs import make_collector_env

    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)
    torch.set_num_threads(threads)
    out.mkdir(parents=True, exist_ok=True)
    cfg = train_cfg(task, init_std, save_interval=iterations)
    curve = TrainingCurve(num_envs, STEPS_PER_ENV)
    env = RslRlEnv(make_collector_env(task, num_envs, threads, seed + 1000, motion_file=motion_file), curve)
    try:
        # rsl_rl pops class names out of the dicts it is given: it gets a copy, `cfg` stays whole for the record.
        runner = OnPolicyRunner(env, copy.deepcopy(cfg), log_dir=str(out), device=device)
        curve.probe = lambda: learner_figures(runner.alg)
        runner.learn(iterations, init_at_random_ep_len=False)
        rows = curve.close()
        spec = env.env.spec
        torch.save({"actor_state_dict": runner.alg.get_policy().state_dict(), "actor_cfg": cfg["actor"],
                    "obs_dim": spec.obs_dim, "act_dim": spec.act_dim, "task": task}, out / "policy.pt")
    finally:
        env.close()
    record = {"task": task, "num_envs": num_envs, "steps_per_env": STEPS_PER_ENV, "iterations": iterations,
              "seed": seed, "init_std": init_std, "device": device, "threads": threads,
              "rsl_rl_version": version("rsl-rl-lib"), "train_cfg": cfg, "rows": rows}
    (out / "curve.json").write_text(json.dumps(record, indent=2))
    return record


class MeanActionPolicy:
    """An rsl_rl actor as tools/eval.run_episodes drives a policy: the mean action of normalised observations."""

    def __init__(self, actor):
        self.actor = actor.eval()  # eval mode also freezes the observation normaliser's statistics

    def act_deterministic(self, obs: torch.Tensor) -> torch.Tensor:
        from tensordict import TensorDict

        # Without stochastic_output the actor returns its distribution's deterministic output: the mean.
        return self.actor(TensorDict({"policy": obs}, batch_size=[obs.shape[0]]))


def load_policy(path: Path) -> MeanActionPolicy:
    """The final actor a `train` run saved in policy.pt."""
    from rsl_rl.utils import resolve_callable
    from tensordict import TensorDict

    saved = torch.load(path, map_location="cpu", weights_only=False)
    cfg = copy.deepcopy(saved["actor_cfg"])
    actor_class = resolve_callable(cfg.pop("class_name"))
    dummy = TensorDict({"policy": torch.zeros(1, saved["obs_dim"])}, batch_size=[1])
    actor = actor_class(dummy, {"actor": ["policy"]}, "actor", saved["act_dim"], **cfg)
    actor.load_state_dict(saved["actor_state_dict"])
    return MeanActionPolicy(actor)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m benchmarks.rslrl_train", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--task", required=True)
    p.add_argument("--num-envs", type=at_least(1), required=True)
    p.add_argument("--iterations", type=at_least(1), required=True, help="rsl_rl iterations (24 steps per env each)")
    p.add_argument("--seed", type=int, required=True)
    p.add_argument("--init-std", type=float, default=1.0, help="the actor's initial std (default 1.0)")
    p.add_argument("--out", required=True, help="folder for rsl_rl's log, curve.json and policy.pt")
    p.add_argument("--motion-file", help="the clip of a motion-tracking task (task_options.motion_file)")
    p.add_argument("--threads", type=at_least(1), help="MuJoCo and torch threads (default: the usable cores)")
    p.add_argument("--device", default="cpu", help="rsl_rl's torch device (default cpu; the env stays on the CPU)")
    args = p.parse_args(argv)
    if not 0 < args.init_std < float("inf"):
        p.error(f"--init-std must be a positive number, got {args.init_std}")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    train(args.task, args.num_envs, args.iterations, args.seed, args.init_std, Path(args.out),
          args.threads or usable_cores(), args.device, args.motion_file)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
