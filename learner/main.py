"""appo-learner: receive rollouts, train with V-trace-corrected PPO, publish weights.

On one host (transport.kind=shm) it creates a shared-memory run directory and
prints it; start collectors with `appo-collector --shm-dir <that dir>`.
Across hosts (--listen, or transport.kind=zmq) collectors connect with
`appo-collector --learner tcp://HOST:PORT`.
"""

from __future__ import annotations

import argparse
import sys
import threading

import torch

from common.cli import add_config_args, install_stop_handlers
from common.cores import usable_cores
from common.logging import get_logger, setup_logging
from common.transport.curve import CurveError
from common.transport.factory import learner_transport
from learner.run import run_learner
from learner.session import add_run_args, prepare

log = get_logger("learner")


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="appo-learner", description=__doc__)
    add_config_args(p)
    add_run_args(p)
    p.add_argument("--listen", help="serve collectors over ZeroMQ on this endpoint, e.g. tcp://0.0.0.0:5555")
    return p.parse_intermixed_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    setup_logging("learner")
    session = prepare(args, {"transport": {"kind": "zmq", "listen": args.listen}} if args.listen else None)
    cfg = session.cfg
    torch.set_num_threads(1 if cfg.training.deterministic else (cfg.training.learner_threads or usable_cores()))
    stop = threading.Event()
    install_stop_handlers(stop, cfg.training.stop_grace_s)
    try:
        transport = learner_transport(cfg, session.spec, session.num_weights, session.shm_run_id)
    except (CurveError, OSError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if cfg.transport.kind == "shm":
        print(f"shm_dir={transport.run_dir}", flush=True)
    where = str(transport.run_dir) if cfg.transport.kind == "shm" else cfg.transport.listen
    log.info("learner waiting for collectors", transport=cfg.transport.kind, at=where, run_dir=str(session.run_dir))
    return run_learner(session, transport, stop, idle_when_complete=cfg.training.idle_when_complete)


if __name__ == "__main__":
    sys.exit(main())
