"""Moves filled collector buffers from the transport into the ring, while the learner trains.

Runs in its own thread: numpy copies and select() release the GIL, so ingest
overlaps the update.  A buffer goes back to its collector only after its data is
in the ring; when the ring is full the receiver waits, which holds the collectors
back instead of overwriting rollouts nobody trained on.
"""

from __future__ import annotations

import threading
from collections import Counter

import numpy as np

from common.logging import RateLimitedLog, get_logger
from common.transport.interface import Arrival, LearnerTransport
from learner.ring import Ring, SlotMeta

log = get_logger("receiver")


def all_finite(a: np.ndarray) -> bool:
    """Exact, and cheap on the hot path: any NaN/Inf makes the sum non-finite, so a finite
    sum proves the array finite; only a non-finite sum (possibly a mere overflow) needs
    the element-wise check."""
    with np.errstate(over="ignore", invalid="ignore"):
        total = a.sum()
    return bool(np.isfinite(total)) or bool(np.isfinite(a).all())


class Receiver(threading.Thread):
    """The thread that validates each arriving rollout and copies it into the ring, or counts why it refused it."""

    def __init__(
        self, transport: LearnerTransport, ring: Ring, current_version=lambda: 0, max_policy_lag: int | None = None
    ):
        super().__init__(name="appo-receiver", daemon=True)
        self.transport = transport
        self.ring = ring
        self.current_version = current_version
        self.max_policy_lag = max_policy_lag
        self.stop_event = threading.Event()
        self.refused: Counter[str] = Counter()
        # Refused by the learner's thread when it took them from the ring (see refuse_stale).
        self.refused_at_staging: Counter[str] = Counter()
        # Stale refusals per collector, from both threads: a link too slow to deliver within the bound shows here.
        self._stale_by_collector: Counter[str] = Counter()
        self._stale_lock = threading.Lock()
        self._log_refused = RateLimitedLog()
        self.received = 0
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            while not self.stop_event.is_set():
                for arrival in self.transport.poll(timeout=0.05):
                    self._ingest(arrival)
        except BaseException as exc:  # surfaced to the learner loop, which stops the run
            self.error = exc
            log.exception("receiver failed")

    def _ingest(self, arrival: Arrival) -> None:
        try:
            lag = self.current_version() - arrival.policy_version
            if lag < 0:
                self.refused["future_policy_version"] += 1
                self._log_refused("future_policy_version", collector=arrival.collector)
                return
            if self.too_stale(arrival.policy_version):
                self.refused["stale_policy"] += 1
                self._count_stale(arrival.collector)
                self._log_refused("stale_policy", collector=arrival.collector, lag=lag)
                arrival.lagging()
                return
            if self.max_policy_lag is not None and 2 * lag > self.max_policy_lag:
                arrival.lagging()  # halfway to the bound: its collector may be missing the broadcast weights
            bad = [k for k, a in arrival.arrays.items() if not all_finite(a)]
            if bad:
                self.refused["non_finite"] += 1
                self._log_refused("non_finite", collector=arrival.collector, fields=bad)
                return
            slot = None
            service = getattr(self.transport, "service", None)
            while slot is None and not self.stop_event.is_set():
                slot = self.ring.claim(timeout=0.1)
                if slot is None and service:
                    service()  # keep heartbeats flowing while the ring is full
            if slot is None:
                return
            dst = self.ring.slot_arrays(slot)
            for k, a in arrival.arrays.items():
                np.copyto(dst[k], a)
        finally:
            arrival.release()
        self.ring.publish(slot, SlotMeta(arrival.collector, arrival.seq, arrival.policy_version, arrival.stats))
        self.received += 1

    def too_stale(self, policy_version: int) -> bool:
        """Whether a rollout of this version is past max_policy_lag now (checked again at staging:
        with back-pressure a rollout admitted in time may wait in the ring while the learner moves on)."""
        return self.max_policy_lag is not None and self.current_version() - policy_version > self.max_policy_lag

    def refuse_stale(self, collector: str, policy_version: int) -> None:
        """Count a rollout the learner dropped at staging (called from the learner's thread only)."""
        self.refused_at_staging["stale_policy"] += 1
        self._count_stale(collector)
        self._log_refused("stale_policy", collector=collector, lag=self.current_version() - policy_version)

    def _count_stale(self, collector: str) -> None:
        with self._stale_lock:
            self._stale_by_collector[collector] += 1

    def stale_by_collector(self) -> dict[str, int]:
        """How many of each collector's rollouts were refused as stale, at arrival or at staging."""
        with self._stale_lock:
            return dict(self._stale_by_collector)

    def refused_counts(self) -> dict[str, int]:
        out = dict(self.refused)
        for k, v in self.refused_at_staging.items():
            out[k] = out.get(k, 0) + v
        for k, v in getattr(self.transport, "refused", {}).items():
            out[k] = out.get(k, 0) + v
        return out

    def stop(self) -> None:
        self.stop_event.set()
        self.ring.wake()
        self.join(timeout=5)
