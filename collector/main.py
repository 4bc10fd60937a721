"""appo-collector: step a batch of MuJoCo envs with the current policy and stream rollouts."""

from __future__ import annotations

import argparse
import sys
import threading

import torch

from common.cli import add_config_args, config_from_args, install_stop_handlers
from common.cores import split_cores, usable_cores
from common.logging import get_logger, setup_logging
from common.rollout_spec import RolloutSpec
from common.shm_transport import CollectorShm, TransportError
from common.task_spec import UnknownTaskError, task_spec

log = get_logger("collector")


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="appo-collector", description=__doc__)
    add_config_args(p)
    p.add_argument("--shm-dir", required=True, help="the learner's shared-memory run directory (printed by appo-learner)")
    p.add_argument("--collector-id", type=int, default=0, help="this collector's id on that host (0, 1, ...)")
    p.add_argument("--num-envs", type=int, help="environments stepped together (algo.num_envs)")
    p.add_argument("--threads", type=int, help="MuJoCo stepping threads (training.collector_threads)")
    p.add_argument("--max-rollouts", type=int, help="stop after sending this many rollouts")
    args = p.parse_args(argv)
    if args.collector_id < 0:
        p.error("--collector-id must be >= 0")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    setup_logging("collector")
    extra: dict = {}
    if args.num_envs is not None:
        extra.setdefault("algo", {})["num_envs"] = args.num_envs
    if args.threads is not None:
        extra.setdefault("training", {})["collector_threads"] = args.threads
    cfg = config_from_args(args, extra)
    try:
        task = task_spec(cfg.task)
    except UnknownTaskError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    threads = cfg.training.collector_threads or split_cores(usable_cores(), 1)[1]
    torch.set_num_threads(1)  # inference batches are small; MuJoCo threads get the cores

    from collector.envs import make_env  # MuJoCo import after argument errors are reported
    from collector.rollout import Collector

    stop = threading.Event()
    install_stop_handlers(stop)
    spec = RolloutSpec.for_task(task, cfg.algo.num_envs, cfg.algo.steps_per_env)
    try:
        channel = CollectorShm(args.shm_dir, args.collector_id, spec, cfg.transport.buffers_per_collector)
    except (TransportError, OSError) as exc:
        print(f"error: cannot join {args.shm_dir}: {exc}", file=sys.stderr)
        return 2
    seed = cfg.algo.seed + 1000 * (args.collector_id + 1)
    env = make_env(cfg.task, cfg.algo.num_envs, threads, seed)
    torch.manual_seed(seed)
    log.info("collector started", task=cfg.task, num_envs=cfg.algo.num_envs, threads=threads, id=args.collector_id)
    try:
        sent = Collector(cfg, env, channel, stop).run(args.max_rollouts)
    finally:
        env.close()
        channel.close()
    log.info("collector stopped", rollouts=sent)
    return 0


if __name__ == "__main__":
    sys.exit(main())
