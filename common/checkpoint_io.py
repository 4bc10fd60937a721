"""Reading checkpoints back: which file a run means, and the policy inside it.

A checkpoint is the dict `learner.Learner.save()` writes (model_<iter>.pt):
appo{model, target, optimizer, learning_rate, num_updates}, iteration,
policy_version, total_env_steps, best_mean_reward, config, task.  Loading is
weights-only (`torch.load(weights_only=True)`): a checkpoint from elsewhere can
hold tensors and plain containers, never code that runs on load.  A checkpoint of
mjlab's G1 walker from before its rename loads with its task's new name.
"""

from __future__ import annotations

import argparse
import hashlib
import re
from dataclasses import dataclass
from pathlib import Path

import torch

from common.config import AppoConfig, ConfigError, config_from_dict
from common.policy import ActorCritic
from common.task_plugins import resolve_task_spec
from common.weight_layout import input_angles

_MODEL_FILE = re.compile(r"^model_(\d+)\.pt$")


class CheckpointError(RuntimeError):
    """A checkpoint or run that cannot be used, with the file or directory named."""


DIGEST_KEY = "sha256"

# mjlab's G1 walker was saved as g1_walk_flat (99 actor observations) until that name went to the seed's walker.
RENAMED_FROM, RENAMED_TO, RENAMED_OBS_DIM = "g1_walk_flat", "g1_velocity_flat", 99


def state_digest(obj) -> str:
    """SHA-256 over every value of a checkpoint dict (tensor bytes included), in a fixed order.

    torch.load notices a torn zip, but a flipped byte inside tensor data loads
    silently; the digest stored beside the data catches that.
    """
    h = hashlib.sha256()

    def walk(x) -> None:
        if isinstance(x, torch.Tensor):
            t = x.detach().to("cpu").contiguous().reshape(-1)
            h.update(f"T{t.dtype}{tuple(x.shape)}".encode())
            h.update(t.view(torch.uint8).numpy().tobytes() if t.numel() else b"")
        elif isinstance(x, dict):
            h.update(b"D")
            for k in sorted(x, key=str):
                if k == DIGEST_KEY:
                    continue
                h.update(repr(k).encode())
                walk(x[k])
        elif isinstance(x, (list, tuple)):
            h.update(f"L{len(x)}".encode())
            for v in x:
                walk(v)
        else:
            h.update(repr(x).encode())

    walk(obj)
    return h.hexdigest()


def load_checkpoint(path: str | Path, map_location: str | torch.device = "cpu") -> dict:
    """The checkpoint dict at `path`, refused unless it is a readable, intact APPO checkpoint."""
    path = Path(path)
    if not path.is_file():
        raise CheckpointError(f"checkpoint {path} does not exist")
    try:
        state = torch.load(path, map_location=map_location, weights_only=True)
    except Exception as exc:  # torch raises several types for torn or foreign files
        raise CheckpointError(f"checkpoint {path} is unreadable or corrupt: {exc}") from None
    if not isinstance(state, dict) or not isinstance(state.get("appo"), dict) or "model" not in state["appo"]:
        raise CheckpointError(f"checkpoint {path} is not an APPO checkpoint (no appo.model weights)")
    if state.get(DIGEST_KEY) != state_digest(state):
        raise CheckpointError(f"checkpoint {path} is corrupt: its contents do not match the stored SHA-256")
    _rename_task(state)  # after the digest check: the digest covers the file as written
    return state


def _rename_task(state: dict) -> None:
    """An old g1_walk_flat checkpoint with the walker's actor width is mjlab's walker: it loads as g1_velocity_flat."""
    config, weights = state.get("config"), state["appo"]["model"]
    mean = weights.get("obs_normalizer.mean") if isinstance(weights, dict) else None
    if (isinstance(config, dict) and config.get("task") == RENAMED_FROM and isinstance(mean, torch.Tensor)
            and mean.numel() == RENAMED_OBS_DIM):
        state["config"] = {**config, "task": RENAMED_TO}
        if state.get("task") == RENAMED_FROM:
            state["task"] = RENAMED_TO


def renamed_note(*tasks: str | None) -> str:
    """A parenthesis for a message naming the renamed task or its old name: what g1_velocity_flat was called."""
    if not {RENAMED_FROM, RENAMED_TO} & set(tasks):
        return ""
    return f" ({RENAMED_TO} was called {RENAMED_FROM} before its rename)"


def check_not_old_name(task: str | None, policy_task: str, path: Path) -> None:
    """Refuse --task g1_walk_flat for a g1_velocity_flat checkpoint: that name is no longer its task."""
    if task == RENAMED_FROM and policy_task == RENAMED_TO:
        raise CheckpointError(f"checkpoint {path} is a {RENAMED_TO} policy{renamed_note(RENAMED_TO)}; "
                              f"give --task {RENAMED_TO}, or no --task")


def latest_valid_checkpoint(run_dir: Path, log=None) -> tuple[Path, dict] | None:
    """The newest checkpoint of a run that loads and verifies; damaged newer ones are skipped (and logged)."""
    for _, path in sorted(checkpoints_in(run_dir).items(), reverse=True):
        try:
            return path, load_checkpoint(path)
        except CheckpointError as exc:
            if log is not None:
                log.warning("skipping damaged checkpoint", path=str(path), error=str(exc))
    return None


# ---------------------------------------------------------------- which file


def checkpoints_in(run_dir: Path) -> dict[int, Path]:
    """Iteration -> model_<iteration>.pt of one run directory."""
    found = {}
    for p in run_dir.iterdir():
        m = _MODEL_FILE.match(p.name)
        if m and p.is_file():
            found[int(m.group(1))] = p
    return found


def runs_of(task_dir: Path) -> list[Path]:
    """Run directories holding at least one checkpoint, oldest first.

    Runs are ordered by when they started (their config.yaml is written once, at
    the start), so a custom run_name sorts by time like the default timestamps.
    """
    runs = [d for d in task_dir.iterdir() if d.is_dir() and checkpoints_in(d)]

    def started(d: Path) -> tuple[float, str]:
        marker = d / "config.yaml"
        return ((marker if marker.is_file() else d).stat().st_mtime, d.name)

    return sorted(runs, key=started)


def find_checkpoint(load_run: str, task: str | None, log_root: str | Path = "logs/appo",
                    checkpoint: int | None = None) -> Path:
    """The checkpoint file `load_run` means.

    load_run: a checkpoint file; a run directory; a negative index into the runs of
    <log_root>/<task> (-1 the newest, -2 the one before); or a run name there.
    checkpoint: model_<checkpoint>.pt of that run (None: the latest one).
    """
    given = Path(load_run)
    if given.is_file():
        if checkpoint is not None:
            raise CheckpointError(f"--checkpoint {checkpoint} cannot select within the file {given}; "
                                  "give its run directory")
        return given
    run_dir = given if given.is_dir() else _run_in_task_dir(load_run, task, Path(log_root))
    return _checkpoint_of_run(run_dir, checkpoint)


def _run_in_task_dir(load_run: str, task: str | None, log_root: Path) -> Path:
    if not task:
        raise CheckpointError(f"{load_run!r} is neither a checkpoint file nor a run directory; "
                              "give --task to look it up among the runs of that task")
    task_dir = log_root / task
    if not task_dir.is_dir():
        raise CheckpointError(f"no runs of task {task!r}: {task_dir} does not exist")
    try:
        index = int(load_run)
    except ValueError:
        run_dir = task_dir / load_run
        if not run_dir.is_dir():
            raise CheckpointError(f"run {load_run!r} not found in {task_dir}") from None
        return run_dir
    runs = runs_of(task_dir)
    if index >= 0 or -index > len(runs):
        raise CheckpointError(f"run index {index} is out of range: {task_dir} holds {len(runs)} run(s) with "
                              "checkpoints (-1 is the newest)")
    return runs[index]


def _checkpoint_of_run(run_dir: Path, checkpoint: int | None) -> Path:
    found = checkpoints_in(run_dir)
    if not found:
        raise CheckpointError(f"run {run_dir} holds no checkpoint (model_<iteration>.pt)")
    if checkpoint is None:
        return found[max(found)]
    if checkpoint not in found:
        raise CheckpointError(f"run {run_dir} has no model_{checkpoint}.pt; it has iterations {sorted(found)}")
    return found[checkpoint]


def add_checkpoint_args(p: argparse.ArgumentParser) -> None:
    """The flags naming a checkpoint (appo-eval, appo-export); pass them to find_checkpoint."""
    p.add_argument("--task", help="task whose runs --load-run indexes; appo-eval also runs it "
                                  "(default: the checkpoint's own task)")
    p.add_argument("--load-run", default="-1",
                   help="-1 newest run of <log-root>/<task>, -2 the one before, ...; a run name there; "
                        "a run directory; or a checkpoint file (default -1)")
    p.add_argument("--checkpoint", type=int, metavar="N", help="use model_N.pt of the run (default: the latest)")
    p.add_argument("--log-root", default="logs/appo", help="where runs live (training.log_dir, default logs/appo)")


def policy_from_args(args: argparse.Namespace, task: str | None = None) -> LoadedPolicy:
    """The policy of the checkpoint that add_checkpoint_args' flags name (`task` where --task is not given)."""
    return load_policy(find_checkpoint(args.load_run, args.task or task, args.log_root, args.checkpoint))


# ---------------------------------------------------------------- the policy


@dataclass
class LoadedPolicy:
    """A checkpoint's actor-critic with the run's config, file, iteration and task."""

    model: ActorCritic   # eval mode, on the CPU
    config: AppoConfig   # the run's resolved configuration
    path: Path
    iteration: int
    task: str            # the configured task string (resolvable by make_env)

    @property
    def obs_dim(self) -> int:
        return self.model.obs_normalizer.in_dim

    @property
    def act_dim(self) -> int:
        return self.model.act_dim


def load_policy(path: str | Path) -> LoadedPolicy:
    """The actor-critic of a checkpoint, sized from its own weights (no task lookup needed)."""
    path = Path(path)
    state = load_checkpoint(path)
    try:
        cfg = config_from_dict(state["config"])
    except (KeyError, TypeError, ConfigError) as exc:
        raise CheckpointError(f"checkpoint {path} has no usable config: {exc}") from None
    weights = state["appo"]["model"]
    try:  # the task's spec only where the config asks for its angle columns (a plugin's import can be slow)
        angles = input_angles(cfg.algo.policy, resolve_task_spec(cfg.task)) if cfg.algo.policy.periodic_inputs \
            else ((), ())
    except ValueError as exc:
        raise CheckpointError(f"checkpoint {path}: {exc}") from None
    try:
        # The normalisers' widths are the networks' inputs: one column more per angle than the raw observation.
        dims = (weights["obs_normalizer.mean"].numel() - len(angles[0]),
                weights["critic_normalizer.mean"].numel() - len(angles[1]), weights["log_std"].numel())
        model = ActorCritic(*dims, cfg.algo.policy, cfg.algo.empirical_normalization, *angles)
        model.load_state_dict(weights)
    except (KeyError, RuntimeError) as exc:
        raise CheckpointError(f"checkpoint {path}: weights do not fit its configured network: {exc}") from None
    return LoadedPolicy(model.eval(), cfg, path, int(state.get("iteration", 0)), cfg.task)
