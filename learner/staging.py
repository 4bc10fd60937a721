"""The staging pool: the last `replay_queue_size` rollouts on the training device.

Each lap moves ready ring slots into the pool (oldest entry overwritten first)
and trains on every staged rollout, so a rollout is replayed until newer ones
push it out (IMPACT's circular buffer; V-trace corrects the staleness).  The
learner stages at most `capacity` per lap unless training.staging_overflow is
"overwrite", so by default nothing is pushed out before it was trained on.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from common.rollout_spec import SEQUENCE_FIELDS, RolloutSpec
from learner.ring import Ring, SlotMeta


@dataclass
class StagedEntry:
    """One staged rollout's metadata and how many updates have trained on it."""

    meta: SlotMeta
    uses: int = 0


class StagingPool:
    """The last `capacity` rollouts on the training device, replayed by every update until pushed out."""

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

    def drop(self, indices: list[int]) -> None:
        """Empty these entries (poisoned with NaN again): they will not be trained on."""
        for i in indices:
            self.entries[i] = None
            for t in self.tensors.values():
                t[i].fill_(float("nan"))

    def mark_used(self, indices: list[int]) -> None:
        for i in indices:
            if self.entries[i].uses == 0:
                self.trained_rollouts += 1
            self.entries[i].uses += 1

    def state_dict(self) -> dict:
        """Contents and bookkeeping, so a resumed run replays exactly what this one would."""
        return {
            "tensors": {k: t.to("cpu") for k, t in self.tensors.items()},
            "entries": [None if e is None else {"collector": e.meta.collector, "seq": e.meta.seq,
                                                "policy_version": e.meta.policy_version, "uses": e.uses}
                        for e in self.entries],
            "next": self._next,
            "overwritten_unused": self.overwritten_unused,
            "trained_rollouts": self.trained_rollouts,
        }

    def load_state_dict(self, state: dict) -> None:
        self.overwritten_unused = int(state["overwritten_unused"])
        self.trained_rollouts = int(state["trained_rollouts"])
        saved = state["tensors"]
        if len(state["entries"]) != self.capacity or any(
                k not in saved or saved[k].shape != t.shape for k, t in self.tensors.items()):
            # A different replay_queue_size or rollout shape (num_envs, steps_per_env): start empty rather than guess.
            return
        for k, t in self.tensors.items():
            t.copy_(saved[k])
        self.entries = [None if e is None else StagedEntry(SlotMeta(e["collector"], e["seq"], e["policy_version"], {}),
                                                           e["uses"]) for e in state["entries"]]
        self._next = int(state["next"])

    def policy_versions(self, indices: list[int]) -> list[int]:
        return [self.entries[i].meta.policy_version for i in indices]
