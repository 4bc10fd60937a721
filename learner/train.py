"""appo-train: the learner plus K local collectors over shared memory, on one machine."""

from __future__ import annotations

import argparse
import os
import sys
import threading

import torch

from common.cli import add_config_args, config_from_args, install_stop_handlers
from common.cores import split_cores, usable_cores
from common.logging import get_logger, setup_logging
from common.policy import ActorCritic, flat_weights_size
from common.rollout_spec import RolloutSpec
from common.shm_transport import LearnerShm
from common.task_spec import UnknownTaskError, resolve_task_spec
from learner.learner import CollectorsGone, Learner
from learner.local_collectors import LocalCollectors
from learner.run_dir import make_run_dir, save_config

log = get_logger("train")


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="appo-train", description=__doc__)
    add_config_args(p)
    p.add_argument("--collectors", type=int, default=1, help="local collector processes (default 1)")
    p.add_argument("--log-dir", help="run directory (default logs/appo/<task>/<timestamp>)")
    args = p.parse_intermixed_args(argv)
    if args.collectors < 1:
        p.error("--collectors must be >= 1")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    setup_logging("learner")
    cfg = config_from_args(args)
    try:
        task = resolve_task_spec(cfg.task)
    except UnknownTaskError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    learner_threads, collector_threads = split_cores(
        usable_cores(), args.collectors, cfg.training.learner_threads, cfg.training.collector_threads
    )
    torch.set_num_threads(learner_threads)
    torch.manual_seed(cfg.algo.seed)
    run_dir = make_run_dir(cfg, args.log_dir)
    config_path = save_config(cfg, run_dir)
    log.info("run", dir=str(run_dir), task=cfg.task, learner_threads=learner_threads, collector_threads=collector_threads)

    stop = threading.Event()
    install_stop_handlers(stop)
    spec = RolloutSpec.for_task(task, cfg.algo.num_envs, cfg.algo.steps_per_env)
    num_weights = flat_weights_size(ActorCritic.from_config(cfg, task))
    transport = LearnerShm(cfg.transport.shm_root, f"{run_dir.name}-{os.getpid()}", spec, num_weights)
    collectors = LocalCollectors(args.collectors, config_path, transport.run_dir, collector_threads, run_dir)
    try:
        learner = Learner(cfg, task, run_dir, transport, stop)
        learner.health.append(collectors.check)
        collectors.start()
        summary = learner.run()
    except CollectorsGone as exc:
        log.error("training stopped: no collectors", reason=str(exc))
        return 1
    finally:
        transport.request_stop()
        collectors.stop()
        collectors.check()
        transport.close()
    log.info("done", status=summary["status"], iterations=summary["completed_iterations"], summary=str(run_dir / "summary.json"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
