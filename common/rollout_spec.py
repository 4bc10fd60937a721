"""The fixed layout of one rollout (one ring slot), shared by collector, transport and learner.

Arrays are env-major float32 (docs/design.md#the-rollout).  The spec hash covers every
dim, dtype and T/N, so a sender built for another layout is refused.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

import numpy as np

from common.task_spec import TaskSpec

DTYPE = np.dtype("<f4")
# Fields with a time axis; the learner turns them time-major [T, N, ...] for V-trace.
SEQUENCE_FIELDS = ("obs", "critic", "actions", "log_probs", "rewards", "dones", "truncated")


@dataclass(frozen=True)
class RolloutSpec:
    """The layout of one rollout: task, N envs, T steps and the observation and action sizes."""

    task: str
    num_envs: int
    steps: int
    obs_dim: int
    critic_dim: int
    act_dim: int

    @classmethod
    def for_task(cls, task: TaskSpec, num_envs: int, steps: int) -> RolloutSpec:
        return cls(task.name, num_envs, steps, task.obs_dim, task.critic_dim, task.act_dim)

    def shapes(self) -> dict[str, tuple[int, ...]]:
        """Field name -> shape, in wire/storage order."""
        n, t = self.num_envs, self.steps
        return {
            "obs": (n, t, self.obs_dim),
            "critic": (n, t, self.critic_dim),
            "actions": (n, t, self.act_dim),
            "log_probs": (n, t),
            "rewards": (n, t),
            "dones": (n, t),
            "truncated": (n, t),
            "last_obs": (n, self.obs_dim),
            "last_critic": (n, self.critic_dim),
        }

    def nbytes(self) -> int:
        return sum(int(np.prod(s)) for s in self.shapes().values()) * DTYPE.itemsize

    @property
    def env_steps(self) -> int:
        return self.num_envs * self.steps

    def spec_hash(self) -> int:
        """Stable 63-bit hash of the layout (fits a signed int64 and msgpack int)."""
        text = f"{self.task}|{DTYPE.str}|" + "|".join(f"{k}:{v}" for k, v in self.shapes().items())
        return int.from_bytes(hashlib.blake2b(text.encode(), digest_size=8).digest(), "little") >> 1


def allocate(spec: RolloutSpec, fill: float = np.nan) -> dict[str, np.ndarray]:
    """Fresh arrays for one rollout, poisoned with `fill` so unwritten data stands out."""
    return {k: np.full(s, fill, dtype=DTYPE) for k, s in spec.shapes().items()}


def views(spec: RolloutSpec, buf: memoryview | np.ndarray, offset: int = 0) -> dict[str, np.ndarray]:
    """Field views laid out back to back in `buf` from `offset` (shared memory, ring slots)."""
    out = {}
    for k, shape in spec.shapes().items():
        count = int(np.prod(shape))
        out[k] = np.frombuffer(buf, dtype=DTYPE, count=count, offset=offset).reshape(shape)
        offset += count * DTYPE.itemsize
    return out
