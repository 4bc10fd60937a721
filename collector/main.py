"""appo-collector: step a batch of MuJoCo envs with the current policy and stream rollouts.

Same host as the learner:  appo-collector --task T --shm-dir /dev/shm/appo-...
Another host:              appo-collector --task T --learner tcp://HOST:5555

Needs no torch: without it (or with training.collector_inference=numpy) the policy
runs in NumPy, and nothing this process imports pulls torch in.
"""

from __future__ import annotations

import argparse
import secrets
import sys
import threading
import zlib

from collector.inference import InferenceUnavailable, limit_inference_threads, resolve_backend
from common.cli import add_config_args, config_from_args, install_stop_handlers
from common.cores import collector_mujoco_threads, lower_priority, usable_cores
from common.hub import HubError, motion_clip
from common.logging import get_logger, setup_logging
from common.rollout_spec import RolloutSpec
from common.task_plugins import resolve_task_spec
from common.task_spec import UnknownTaskError
from common.transport.curve import CurveError
from common.transport.factory import collector_transport
from common.transport.interface import TransportError
from common.transport.shm import claim_collector_id
from common.weight_layout import layout_for

log = get_logger("collector")


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="appo-collector", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    add_config_args(p)
    where = p.add_mutually_exclusive_group()
    where.add_argument("--shm-dir", help="the learner's shared-memory run directory (same host)")
    where.add_argument("--learner", help="the learner's address tcp://HOST:PORT (transport.learner)")
    p.add_argument("--collector-id", default="auto",
                   help="this collector's id (0, 1, ...), which picks its seed; 'auto' (default): with --shm-dir the "
                   "lowest free one on this host; with --learner one drawn from transport.collector_name (the same "
                   "every time), else at random, so replicas get distinct seeds")
    p.add_argument("--num-envs", type=int, help="environments stepped together (algo.num_envs)")
    p.add_argument("--threads", type=int, help="MuJoCo stepping threads (training.collector_threads)")
    p.add_argument("--max-rollouts", type=int, help="stop after sending this many rollouts")
    args = p.parse_intermixed_args(argv)
    if args.collector_id != "auto":
        if not args.collector_id.isdigit():
            p.error(f"--collector-id must be a number >= 0 or 'auto', not {args.collector_id!r}")
        args.collector_id = int(args.collector_id)
    return args


ID_RANGE = 1_000_000  # ids drawn for remote collectors: a clash between two of them is one in a million


def id_from_name(name: str) -> int:
    """A named remote collector's id: the same every time it starts, so its seed is too."""
    return zlib.crc32(name.encode()) % ID_RANGE


def _extra(args: argparse.Namespace) -> dict:
    extra: dict = {}
    if args.num_envs is not None:
        extra.setdefault("algo", {})["num_envs"] = args.num_envs
    if args.threads is not None:
        extra.setdefault("training", {})["collector_threads"] = args.threads
    if args.learner:
        extra.setdefault("transport", {}).update(kind="zmq", learner=args.learner)
    return extra


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    setup_logging("collector")
    cfg = config_from_args(args, _extra(args))
    if not args.shm_dir and not cfg.transport.learner:
        print("error: give --shm-dir (same host) or --learner tcp://HOST:PORT (transport.learner)", file=sys.stderr)
        return 2
    try:
        task = resolve_task_spec(cfg.task)
    except UnknownTaskError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    try:
        backend = resolve_backend(cfg.training.collector_inference, cfg.training.collector_device)
    except InferenceUnavailable as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    # Standalone, the collector's host is its own; appo-train sets threads and nice for a shared one.
    threads = cfg.training.collector_threads or collector_mujoco_threads(usable_cores())
    nice = max(0, cfg.training.collector_nice)
    lower_priority(nice)  # before the physics and inference threads start, which inherit it
    # Inference runs on this thread, mostly while the physics of the other env group runs on
    # the MuJoCo threads (make_collector_env shares `threads` between the groups): one inference thread.
    limit_inference_threads(backend)

    from collector.envs import UnknownSimError, make_collector_env  # MuJoCo import after argument errors are reported
    from collector.envs.g1.motion import ClipError
    from collector.rollout import Collector
    from collector.status import start_collector_status

    stop = threading.Event()
    install_stop_handlers(stop)
    spec = RolloutSpec.for_task(task, cfg.algo.num_envs, cfg.algo.steps_per_env)
    num_weights = layout_for(cfg, task).size
    try:
        if args.collector_id == "auto" and args.shm_dir:
            # The lock fd stays open for the process's life: the id is ours until we exit.
            args.collector_id, _id_lock = claim_collector_id(args.shm_dir)
        elif args.collector_id == "auto":
            # Unnamed: a random id, since host and pid repeat across containers on the host network.
            name = cfg.transport.collector_name
            args.collector_id = id_from_name(name) if name else secrets.randbelow(ID_RANGE)
        channel = collector_transport(cfg, spec, num_weights, args.collector_id, args.shm_dir)
    except (TransportError, CurveError, OSError) as exc:
        print(f"error: cannot connect: {exc}", file=sys.stderr)
        return 2
    seed = cfg.algo.seed + 1000 * (args.collector_id + 1)
    try:
        env = make_collector_env(cfg.task, cfg.algo.num_envs, threads, seed,
                                 motion_file=motion_clip(cfg), sim=cfg.training.sim_backend)
    except (ClipError, HubError, UnknownSimError) as exc:  # a clip refused or not found; an engine the task lacks
        channel.close()
        print(f"error: {exc}", file=sys.stderr)
        return 2
    log.info("collector started", task=cfg.task, num_envs=cfg.algo.num_envs, threads=threads, id=args.collector_id,
             inference=backend, nice=nice)
    collector = Collector(cfg, env, channel, stop, seed)
    status = None
    try:
        status = start_collector_status(collector)
        sent = collector.run(args.max_rollouts)
        lost = collector.learner_lost()
    finally:
        if status:
            status.stop()
        env.close()
        channel.close()
    fatal = getattr(channel, "fatal", None)
    if fatal:
        print(f"error: {fatal}", file=sys.stderr)
        return 2
    if lost:
        # Non-zero, so that a restart policy brings the collector back for the restarted learner.
        print("error: the learner went away without ending the run", file=sys.stderr)
        return 1
    log.info("collector stopped", rollouts=sent)
    return 0


if __name__ == "__main__":
    sys.exit(main())
