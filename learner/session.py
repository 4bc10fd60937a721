"""What appo-learner and appo-train share before the loop starts: config, task, run directory,
resume, and the Learner itself."""

from __future__ import annotations

import argparse
import os
import sys
import threading
from dataclasses import dataclass
from pathlib import Path

import torch

from common.checkpoint_io import CheckpointError
from common.cli import config_from_args
from common.config import AppoConfig
from common.hub import HubError, motion_clip
from common.logging import get_logger
from common.policy import ActorCritic, flat_weights_size
from common.rollout_spec import RolloutSpec
from common.task_plugins import resolve_task_spec
from common.task_spec import TaskSpec, UnknownTaskError
from common.transport.interface import LearnerTransport
from learner.learner import Learner
from learner.resume import ResumeError, check_compatible, check_task, find_resume_checkpoint, learning_rate_override
from learner.run_dir import make_run_dir, save_config

log = get_logger("learner")


def add_run_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--log-dir", help="run directory (default logs/appo/<task>/<timestamp>)")
    p.add_argument("--resume", metavar="PATH|latest",
                   help="continue from a checkpoint file, a run directory's newest good checkpoint, or 'latest' "
                        "(the newest good one of --log-dir, else of the newest run of the task; a fresh start "
                        "if there is none)")


@dataclass
class Session:
    """A prepared run: resolved config and task, run directory, saved config.yaml and the state to resume from."""

    cfg: AppoConfig
    task: TaskSpec
    run_dir: Path
    config_path: Path
    resume_state: dict | None

    @property
    def spec(self) -> RolloutSpec:
        return RolloutSpec.for_task(self.task, self.cfg.algo.num_envs, self.cfg.algo.steps_per_env)

    @property
    def shm_run_id(self) -> str:
        """The shared-memory directory's name: fixed by config (containers), else unique per process."""
        return self.cfg.transport.shm_run_id or f"{self.run_dir.name}-{os.getpid()}"

    @property
    def num_weights(self) -> int:
        return flat_weights_size(ActorCritic.from_config(self.cfg, self.task))

    def learner(self, transport: LearnerTransport, stop: threading.Event) -> Learner:
        learner = Learner(self.cfg, self.task, self.run_dir, transport, stop)
        if self.resume_state is not None:
            learner.load_state_dict(self.resume_state)
            lr = learning_rate_override(self.resume_state["config"], self.cfg)
            if lr is not None:
                learner.appo.set_learning_rate(lr)
            log.info("resumed", iteration=learner.progress.iteration, policy_version=learner.progress.policy_version,
                     env_steps=learner.progress.total_env_steps, learning_rate=learner.appo.learning_rate)
        return learner


def _fail(message: str) -> None:
    print(f"error: {message}", file=sys.stderr)
    raise SystemExit(2)


def prepare(args: argparse.Namespace, extra: dict | None = None, fetch_clip: bool = False) -> Session:
    """Resolve config and task, pick up a checkpoint to resume, make the run directory; exit 2 on bad input.

    fetch_clip: find (or download) the task's reference motion first, for local collectors to find on disk."""
    cfg = config_from_args(args, extra)
    state, run_dir_arg = None, args.log_dir
    if args.resume:
        try:
            found = find_resume_checkpoint(args.resume, cfg.task, cfg.training.log_dir, args.log_dir)
        except CheckpointError as exc:
            _fail(str(exc))
        if found is None:
            log.info("nothing to resume; starting fresh", resume=args.resume)
        else:
            path, state = found
            # A task named now is checked first: the saved options (symmetry) may not fit another task's config.
            if args.task or cfg.task != AppoConfig.model_fields["task"].default:
                try:
                    check_task(state["config"], cfg.task)
                except ResumeError as exc:
                    _fail(str(exc))
            cfg = config_from_args(args, extra, base=state["config"])
            try:
                check_compatible(state["config"], cfg)
            except ResumeError as exc:
                _fail(str(exc))
            run_dir_arg = run_dir_arg or str(path.parent)
            log.info("resuming", checkpoint=str(path))
    if cfg.training.deterministic:
        torch.use_deterministic_algorithms(True)
    try:
        task = resolve_task_spec(cfg.task)
    except UnknownTaskError as exc:
        _fail(str(exc))
    if fetch_clip:
        try:
            motion_clip(cfg)
        except HubError as exc:
            _fail(str(exc))
    torch.manual_seed(cfg.algo.seed)
    run_dir = make_run_dir(cfg, run_dir_arg)
    return Session(cfg, task, run_dir, save_config(cfg, run_dir), state)
