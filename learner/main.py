"""appo-learner: receive rollouts, train with V-trace-corrected PPO, publish weights.

On one host (transport.kind=shm) it creates a shared-memory run directory and
prints it; start collectors with `appo-collector --shm-dir <that dir>`.
"""

from __future__ import annotations

import argparse
import os
import sys
import threading

import torch

from common.cli import add_config_args, config_from_args, install_stop_handlers
from common.cores import usable_cores
from common.logging import get_logger, setup_logging
from common.policy import ActorCritic, flat_weights_size
from common.rollout_spec import RolloutSpec
from common.shm_transport import LearnerShm
from common.task_spec import UnknownTaskError, task_spec
from learner.learner import CollectorsGone, Learner
from learner.run_dir import make_run_dir, save_config

log = get_logger("learner")


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="appo-learner", description=__doc__)
    add_config_args(p)
    p.add_argument("--log-dir", help="run directory (default logs/appo/<task>/<timestamp>)")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    setup_logging("learner")
    cfg = config_from_args(args)
    try:
        task = task_spec(cfg.task)
    except UnknownTaskError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if cfg.transport.kind != "shm":
        print("error: transport.kind=zmq is not available in this version; use shm on one host", file=sys.stderr)
        return 2
    torch.set_num_threads(cfg.training.learner_threads or usable_cores())
    torch.manual_seed(cfg.algo.seed)
    run_dir = make_run_dir(cfg, args.log_dir)
    save_config(cfg, run_dir)
    stop = threading.Event()
    install_stop_handlers(stop)
    spec = RolloutSpec.for_task(task, cfg.algo.num_envs, cfg.algo.steps_per_env)
    num_weights = flat_weights_size(ActorCritic.from_config(cfg, task))
    transport = LearnerShm(cfg.transport.shm_root, f"{run_dir.name}-{os.getpid()}", spec, num_weights)
    print(f"shm_dir={transport.run_dir}", flush=True)
    log.info("learner waiting for collectors", shm_dir=str(transport.run_dir), run_dir=str(run_dir))
    try:
        summary = Learner(cfg, task, run_dir, transport, stop).run()
    except CollectorsGone as exc:
        log.error("training stopped: no collectors", reason=str(exc))
        return 1
    finally:
        transport.request_stop()
        transport.close()
    log.info("done", status=summary["status"], iterations=summary["completed_iterations"])
    return 0


if __name__ == "__main__":
    sys.exit(main())
