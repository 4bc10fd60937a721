"""appo-train: the learner plus K local collectors over shared memory on one machine, then a play of the result."""

from __future__ import annotations

import argparse
import sys
import threading

import torch

from common.cli import add_config_args, install_stop_handlers
from common.cores import split_cores, usable_cores
from common.logging import get_logger, setup_logging
from common.transport.shm import LearnerShm
from learner.learner import resolve_device
from learner.local_collectors import LocalCollectors
from learner.play_after import play_final_policy
from learner.run import run_learner
from learner.session import add_run_args, prepare

log = get_logger("train")


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="appo-train", description=__doc__)
    add_config_args(p)
    add_run_args(p)
    p.add_argument("--collectors", type=int, default=1, help="local collector processes (default 1)")
    args = p.parse_intermixed_args(argv)
    if args.collectors < 1:
        p.error("--collectors must be >= 1")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    setup_logging("learner")
    session = prepare(args, fetch_clip=True)  # one download, before any collector starts
    cfg = session.cfg
    if cfg.training.deterministic and args.collectors != 1:
        print("error: training.deterministic=true runs exactly one collector (--collectors 1)", file=sys.stderr)
        return 2
    split = split_cores(
        usable_cores(), args.collectors, cfg.training.learner_threads, cfg.training.collector_threads,
        accelerator=resolve_device(cfg.training.device).type != "cpu", collector_nice=cfg.training.collector_nice,
    )
    torch.set_num_threads(1 if cfg.training.deterministic else split.learner_threads)
    log.info("run", dir=str(session.run_dir), task=cfg.task, usable_cores=usable_cores(),
             learner_threads=split.learner_threads, collector_threads=split.collector_threads,
             cores_shared=split.shared, collector_nice=split.collector_nice)

    stop = threading.Event()
    install_stop_handlers(stop, cfg.training.stop_grace_s)
    transport = LearnerShm(cfg.transport.shm_root, session.shm_run_id, session.spec,
                           session.num_weights)
    collectors = LocalCollectors(args.collectors, session.config_path, transport.run_dir, split.collector_threads,
                                 session.run_dir, cfg.training.collector_max_restarts,
                                 cfg.training.collector_restart_backoff_s, nice=split.collector_nice)
    rc = run_learner(session, transport, stop, collectors)
    if rc == 0 and not stop.is_set() and not cfg.training.no_play:
        play_final_policy(session.run_dir, cfg, stop)  # a failed play is a warning: the run is complete
    return rc


if __name__ == "__main__":
    sys.exit(main())
