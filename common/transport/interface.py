"""What every transport offers its process: the two Protocols and the types they hand over."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol

import numpy as np


class TransportError(RuntimeError):
    """A transport cannot be set up or used (bad run directory, mismatched spec, learner gone)."""


@dataclass
class Arrival:
    """A validated rollout, readable in place (shared memory or socket frames) until release()."""

    collector: str  # a stable name for metrics: "local-0", or the remote collector's name
    seq: int
    policy_version: int
    arrays: dict[str, np.ndarray]
    stats: dict
    _release: Callable[[], None] = field(repr=False, default=lambda: None)
    _lagging: Callable[[], None] = field(repr=False, default=lambda: None)

    def release(self) -> None:
        """Hand the buffer back to its collector (shared memory) or return its credit (ZeroMQ)."""
        self._release()

    def lagging(self) -> None:
        """The rollout's policy lags far behind: send its collector the current weights directly (ZeroMQ;
        shared-memory collectors always read the newest), once per version. Call before release()."""
        self._lagging()


@dataclass
class RolloutBuffer:
    """One of a collector's buffers: write the arrays, then commit it."""

    index: int
    arrays: dict[str, np.ndarray]


class LearnerTransport(Protocol):
    """The learner's side: rollouts in, weights out (LearnerShm, LearnerZmq)."""

    def poll(self, timeout: float) -> list[Arrival]:
        """Validated rollouts that arrived within `timeout` seconds (possibly none)."""
        ...

    def publish_weights(self, version: int, flat: np.ndarray) -> None:
        """Make `flat` the weights every collector takes next, stamped `version`."""
        ...

    def collectors(self) -> dict[int, dict]:
        """The collectors attached now: id -> {name, ...}."""
        ...

    def request_stop(self) -> None:
        """Tell the collectors that training is over."""
        ...

    def close(self) -> None:
        """Release sockets, files and shared memory."""
        ...


class CollectorTransport(Protocol):
    """A collector's side, its channel to the learner: buffers out, weights in (CollectorShm, CollectorZmq)."""

    def acquire(self, timeout: float) -> RolloutBuffer | None:
        """A free rollout buffer to write into, or None if none freed up within `timeout` (back-pressure)."""
        ...

    def commit(self, buf: RolloutBuffer, seq: int, policy_version: int, stats: dict) -> None:
        """Send a filled buffer with its metadata and episode statistics."""
        ...

    def read_weights(self, have_version: int) -> tuple[int, np.ndarray] | None:
        """(version, flat weights) if newer than `have_version` were published, else None."""
        ...

    def stop_requested(self) -> bool:
        """Whether the learner said training is over."""
        ...

    def learner_alive(self) -> bool:
        """Whether the learner is still there (its process, or its heartbeats)."""
        ...

    def close(self) -> None:
        """Release buffers and sockets."""
        ...
