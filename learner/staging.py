"""The staging pool: the last `replay_queue_size` rollouts on the training device.

Each lap drains the ready ring slots into the pool (oldest entry overwritten
first) and trains on every staged rollout, so a rollout is replayed until newer
ones push it out (IMPACT's circular buffer; V-trace corrects the staleness).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from common.rollout_spec import RolloutSpec
from learner.ring import Ring, SlotMeta

SEQUENCE_FIELDS = ("obs", "critic", "actions", "log_probs", "rewards", "dones", "truncated")


@dataclass
class StagedEntry:
    meta: SlotMeta
    uses: int = 0


class StagingPool:
    def __init__(self, spec: RolloutSpec, capacity: int, device: torch.device):
        self.spec = spec
        self.capacity = capacity
        self.device = device
        self.tensors = {
            k: torch.full((capacity, *shape), float("nan"), device=device) for k, shape in spec.shapes().items()
        }
        self.entries: list[StagedEntry | None] = [None] * capacity
        self._next = 0  # the oldest entry: overwritten next
        self.overwritten_unused = 0  # rollouts pushed out before they were ever trained on
        self.trained_rollouts = 0  # distinct rollouts used by at least one update

    def stage(self, ring: Ring, slot: int) -> int:
        """Copy ring slot -> the oldest pool entry; returns the entry index."""
        i = self._next
        old = self.entries[i]
        if old is not None and old.uses == 0:
            self.overwritten_unused += 1
        non_blocking = self.device.type == "cuda"
        for k, t in self.tensors.items():
            t[i].copy_(ring.tensors[k][slot], non_blocking=non_blocking)
        self.entries[i] = StagedEntry(ring.meta[slot])
        self._next = (i + 1) % self.capacity
        return i

    def active(self) -> list[int]:
        return [i for i, e in enumerate(self.entries) if e is not None]

    def occupancy(self) -> int:
        return len(self.active())

    def batch(self, indices: list[int] | None = None) -> dict[str, torch.Tensor]:
        """Time-major training batch of the given (default: all active) entries.

        Sequence fields become [T, K*N, ...]; last_obs / last_critic become [K*N, ...].
        """
        idx = self.active() if indices is None else indices
        sel = torch.as_tensor(idx, device=self.device)
        out = {}
        for k, t in self.tensors.items():
            x = t.index_select(0, sel)
            x = x.reshape(len(idx) * self.spec.num_envs, *x.shape[2:])
            out[k] = x.transpose(0, 1).contiguous() if k in SEQUENCE_FIELDS else x
        return out

    def mark_used(self, indices: list[int]) -> None:
        for i in indices:
            if self.entries[i].uses == 0:
                self.trained_rollouts += 1
            self.entries[i].uses += 1

    def policy_versions(self, indices: list[int]) -> list[int]:
        return [self.entries[i].meta.policy_version for i in indices]
