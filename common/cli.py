"""Command-line plumbing shared by the executables: config flags, overrides, stop signals."""

from __future__ import annotations

import argparse
import signal
import sys
import threading

from common.config import AppoConfig, ConfigError, load_config


def add_config_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--config", metavar="FILE", help="YAML config file (below env vars and overrides)")
    parser.add_argument("--task", help="task name (same as task=...)")
    parser.add_argument("overrides", nargs="*", metavar="key=value", help="dotted config overrides, e.g. algo.num_envs=64")


def config_from_args(args: argparse.Namespace, extra: dict | None = None) -> AppoConfig:
    """Resolve the config or exit with status 2 and a message naming the bad key."""
    flags = dict(extra or {})
    if args.task:
        flags["task"] = args.task
    try:
        return load_config(args.overrides, args.config, extra=flags)
    except ConfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        raise SystemExit(2) from None


def install_stop_handlers(stop_event: threading.Event) -> None:
    """SIGTERM / SIGINT set stop_event; a second SIGINT exits at once."""

    def handler(signum, _frame):
        if stop_event.is_set() and signum == signal.SIGINT:
            raise KeyboardInterrupt
        stop_event.set()

    signal.signal(signal.SIGTERM, handler)
    signal.signal(signal.SIGINT, handler)
