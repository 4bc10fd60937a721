"""Command-line plumbing shared by the executables: config flags, overrides, stop signals."""

from __future__ import annotations

import argparse
import os
import signal
import sys
import threading

from common.config import AppoConfig, ConfigError, load_config
from common.task_spec import ENGINES


def add_config_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--config", metavar="FILE", help="YAML config file (below env vars and overrides)")
    parser.add_argument("--task", help="task name (same as task=...)")
    parser.add_argument("--sim", choices=ENGINES, help="physics engine (same as training.sim_backend=...)")
    parser.add_argument("overrides", nargs="*", metavar="key=value",
                        help="dotted config overrides, e.g. algo.num_envs=64")


def at_least(minimum: int):
    """argparse type: an integer >= `minimum` (argparse names the flag in its error)."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected an integer, got {text!r}") from None
        if value < minimum:
            raise argparse.ArgumentTypeError(f"must be at least {minimum}, got {value}")
        return value

    return parse


def duration(allow_zero: bool = False):
    """argparse type: a finite number of seconds, > 0 (>= 0 with `allow_zero`)."""

    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
        if not (value >= 0 if allow_zero else value > 0) or value == float("inf"):
            raise argparse.ArgumentTypeError(f"must be a {'non-negative' if allow_zero else 'positive'} "
                                             f"number of seconds, got {text}")
        return value

    return parse


def config_from_args(args: argparse.Namespace, extra: dict | None = None, base: dict | None = None) -> AppoConfig:
    """Resolve the config or exit with status 2 and a message naming the bad key.

    `base` replaces the task preset as the lowest layer (a resumed run's saved config).
    """
    flags = dict(extra or {})
    if args.task:
        flags["task"] = args.task
    if getattr(args, "sim", None):
        flags["training"] = {**flags.get("training", {}), "sim_backend": args.sim}
    try:
        return load_config(args.overrides, args.config, extra=flags, base=base)
    except ConfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        raise SystemExit(2) from None


def install_stop_handlers(stop_event: threading.Event, grace_s: float | None = None) -> None:
    """SIGTERM / SIGINT set stop_event; a second SIGINT exits at once.

    With `grace_s`, a watchdog ends the process if the clean stop takes longer than
    that (a hung write must not outlast the orchestrator's kill deadline silently).
    """

    def handler(signum, _frame):
        if stop_event.is_set() and signum == signal.SIGINT:
            raise KeyboardInterrupt
        if not stop_event.is_set() and grace_s:
            watchdog = threading.Timer(grace_s, _overdue, args=(grace_s,))
            watchdog.daemon = True
            watchdog.start()
        stop_event.set()

    signal.signal(signal.SIGTERM, handler)
    signal.signal(signal.SIGINT, handler)


def _overdue(grace_s: float) -> None:
    print(f"error: clean stop took longer than the {grace_s:.0f} s grace period; exiting now", file=sys.stderr,
          flush=True)
    os._exit(3)
