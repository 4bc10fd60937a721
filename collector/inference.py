"""Which backend runs the collector's policy (training.collector_inference), and what the lap asks of it.

The collector needs torch only for this.  With torch absent (a collector image
without it) or `collector_inference=numpy`, the policy runs in float32 NumPy from
the published flat weights, and nothing on the collector's path imports torch.
"""

from __future__ import annotations

from typing import Protocol

import numpy as np

from common.config import AppoConfig
from common.task_spec import TaskSpec


class InferenceUnavailable(RuntimeError):
    """The configured inference backend cannot run in this process (torch missing, or NumPy on a non-CPU device)."""


class PolicyInference(Protocol):
    """What the collector lap asks of its policy: take weights, sample actions, value timed-out states, reseed."""

    name: str

    def load(self, flat: np.ndarray) -> None:
        """Take a published flat weight vector (common/weight_layout.py order)."""

    def sample(self, obs: np.ndarray, z: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
        """Actions [B, A] and log-probs [B] (float32): the backend's buffers, valid until its next sample.

        z: the standard-normal draws [B, A] to act with (collector/action_noise.py); None draws them here."""

    def value(self, critic_obs: np.ndarray) -> np.ndarray:
        """Critic values [B] (float32) of critic observations [B, critic_dim]."""

    def seed(self, seed: int) -> None:
        """Restart the action noise from `seed`."""


def torch_importable() -> bool:
    """Whether `import torch` works here (it imports torch when it does: the torch backend needs it next)."""
    try:
        import torch  # noqa: F401
    except ImportError:
        return False
    return True


def resolve_backend(choice: str, device: str = "cpu") -> str:
    """`torch` or `numpy` for training.collector_inference `choice` (`auto`: torch when importable) on
    training.collector_device `device`."""
    backend = choice
    if choice == "auto":
        backend = "torch" if torch_importable() else "numpy"
    elif choice == "torch" and not torch_importable():
        raise InferenceUnavailable("training.collector_inference=torch, but torch cannot be imported here; "
                                   "use numpy (or auto)")
    if backend == "numpy" and device != "cpu":
        raise InferenceUnavailable(f"NumPy inference runs on the CPU, not training.collector_device={device}; "
                                   "that needs torch (training.collector_inference=torch)")
    return backend


def make_inference(cfg: AppoConfig, task: TaskSpec, seed: int) -> PolicyInference:
    """The configured backend for `task`, its action noise seeded with `seed`."""
    if resolve_backend(cfg.training.collector_inference, cfg.training.collector_device) == "torch":
        from collector.torch_inference import TorchInference  # torch is imported only by this backend

        return TorchInference(cfg, task, seed)
    from collector.numpy_inference import NumpyInference

    return NumpyInference(cfg, task, seed)


def limit_inference_threads(backend: str) -> None:
    """One thread for the policy, whichever library runs it: the collector's other cores step MuJoCo.

    Process-wide, so only for processes that are collectors (appo-collector, the collector benchmark).
    """
    if backend == "torch":
        import torch

        torch.set_num_threads(1)
    else:
        # OpenBLAS splits a matmul over every core from a modest size on (a Go2 batch's first layer is past it),
        # and its idle workers spin: threads that would take the cores of the MuJoCo threads they should overlap.
        from threadpoolctl import threadpool_limits

        threadpool_limits(limits=1, user_api="blas")  # process-wide, and kept: not used as a context manager
