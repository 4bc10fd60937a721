"""The learner's ring of rollout slots (pinned host memory when CUDA is present).

A receiver fills slots while the learner trains; the learner drains every ready
slot at the start of its lap.  Slots move FREE -> WRITING -> READY -> READING ->
FREE; a slot becomes visible to the reader only once its writer marked it ready,
so no reader ever sees a half-written slot.  When every slot is busy the writer
waits (back-pressure to the collectors) instead of overwriting unread data.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from dataclasses import dataclass
from enum import Enum

import numpy as np
import torch

from common.rollout_spec import RolloutSpec


class SlotState(Enum):
    """Where a ring slot is in its cycle: FREE -> WRITING -> READY -> READING -> FREE."""

    FREE = 0
    WRITING = 1
    READY = 2
    READING = 3


@dataclass
class SlotMeta:
    """Who sent a slot's rollout, its sequence number, the policy version that made it, its episode statistics."""

    collector: str
    seq: int
    policy_version: int
    stats: dict


class Ring:
    """Fixed slots of rollout tensors that the receiver fills and the learner drains, with back-pressure when full."""

    def __init__(self, spec: RolloutSpec, num_slots: int, pin: bool):
        self.spec = spec
        self.num_slots = num_slots
        # Poisoned with NaN so a slot read before it was written stands out.
        self.tensors = {
            k: torch.full((num_slots, *shape), float("nan"), pin_memory=pin) for k, shape in spec.shapes().items()
        }
        self.arrays = {k: t.numpy() for k, t in self.tensors.items()}
        self.states = [SlotState.FREE] * num_slots
        self.meta: list[SlotMeta | None] = [None] * num_slots
        self._ready: deque[int] = deque()
        self._cond = threading.Condition()

    def slot_arrays(self, slot: int) -> dict[str, np.ndarray]:
        return {k: a[slot] for k, a in self.arrays.items()}

    def claim(self, timeout: float | None) -> int | None:
        """A FREE slot, now WRITING; None if none freed up within timeout."""
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._cond:
            while True:
                for i, s in enumerate(self.states):
                    if s is SlotState.FREE:
                        self.states[i] = SlotState.WRITING
                        return i
                remaining = None if deadline is None else deadline - time.monotonic()
                if remaining is not None and remaining <= 0:
                    return None
                self._cond.wait(remaining)

    def publish(self, slot: int, meta: SlotMeta) -> None:
        """WRITING -> READY: the slot's data is complete."""
        with self._cond:
            assert self.states[slot] is SlotState.WRITING, f"slot {slot} is {self.states[slot]}, not WRITING"
            self.meta[slot] = meta
            self.states[slot] = SlotState.READY
            self._ready.append(slot)
            self._cond.notify_all()

    def take_ready(self, timeout: float, limit: int | None = None) -> list[int]:
        """READY slots (all, or the `limit` oldest) in the order they became ready, now READING;
        waits up to timeout for one.  Slots past the limit stay READY for the next call."""
        deadline = time.monotonic() + timeout
        with self._cond:
            while not self._ready:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return []
                self._cond.wait(remaining)
            n = len(self._ready) if limit is None else min(limit, len(self._ready))
            slots = [self._ready.popleft() for _ in range(n)]
            for s in slots:
                self.states[s] = SlotState.READING
            return slots

    def release(self, slot: int) -> None:
        """READING -> FREE."""
        with self._cond:
            assert self.states[slot] is SlotState.READING
            self.states[slot] = SlotState.FREE
            self.meta[slot] = None
            self._cond.notify_all()

    def occupancy(self) -> int:
        with self._cond:
            return sum(s is not SlotState.FREE for s in self.states)

    def wake(self) -> None:
        with self._cond:
            self._cond.notify_all()
