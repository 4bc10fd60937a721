"""Structured logging for every process: readable on a terminal, JSON lines otherwise.

APPO_LOG_FORMAT=json|console forces a format; APPO_LOG_LEVEL sets the level.
"""

from __future__ import annotations

import logging
import os
import sys
import time

import structlog


def setup_logging(process: str) -> None:
    fmt = os.environ.get("APPO_LOG_FORMAT") or ("console" if sys.stderr.isatty() else "json")
    level = getattr(logging, os.environ.get("APPO_LOG_LEVEL", "INFO").upper(), logging.INFO)
    renderer = (
        structlog.processors.JSONRenderer() if fmt == "json" else structlog.dev.ConsoleRenderer(colors=False)
    )
    structlog.configure(
        processors=[
            structlog.contextvars.merge_contextvars,
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            structlog.processors.format_exc_info,
            renderer,
        ],
        wrapper_class=structlog.make_filtering_bound_logger(level),
        logger_factory=structlog.PrintLoggerFactory(file=sys.stderr),
        cache_logger_on_first_use=False,
    )
    structlog.contextvars.bind_contextvars(process=process, pid=os.getpid())


def get_logger(name: str):
    return structlog.get_logger(name)


class RateLimitedLog:
    """Log a refused message at most once per reason per interval (fuzzing must not flood logs)."""

    def __init__(self, interval_s: float = 5.0, logger_name: str = "refused"):
        self.interval = interval_s
        self.log = get_logger(logger_name)
        self._last: dict[str, float] = {}

    def __call__(self, reason: str, **kw) -> None:
        now = time.monotonic()
        if now - self._last.get(reason, -1e9) >= self.interval:
            self._last[reason] = now
            self.log.warning("refused message", reason=reason, **kw)
