"""A received rollout as every learner-side transport hands it over."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

import numpy as np


@dataclass
class Arrival:
    """A validated rollout, readable in place (shared memory or socket frames) until release()."""

    collector: str  # a stable name for metrics: "local-0", or the remote collector's name
    seq: int
    policy_version: int
    arrays: dict[str, np.ndarray]
    stats: dict
    _release: Callable[[], None] = field(repr=False, default=lambda: None)

    def release(self) -> None:
        """Hand the buffer back to its collector (shared memory) or return its credit (ZeroMQ)."""
        self._release()
