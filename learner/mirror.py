"""Symmetry augmentation: each batch trained on together with its left-right mirror image (algo.algorithm.symmetry).

As rsl_rl's PPO with its symmetry data augmentation (Mittal et al. 2024, "Symmetry Considerations for
Learning Task Symmetric Robot Policies"), here before V-trace: the mirrored envs get their own values,
target log-probs, V-trace targets and advantages, and share their originals' rewards, episode ends and
behaviour log-probs.  The mirrored trajectory is one the mirrored behaviour policy acts with the same
probability in a task whose dynamics and rewards are left-right symmetric; V-trace's truncated
importance weights correct for the target policy acting it differently.
"""

from __future__ import annotations

import torch

from common.symmetry import SignedPermutation, TaskMirror, with_angle_columns

# Which map mirrors which batch field; the other fields are copied unchanged.
_FIELD_MAPS = {"obs": "obs", "critic": "critic", "actions": "actions", "last_obs": "obs", "last_critic": "critic"}


class BatchMirror:
    """A task's mirror maps as index and sign tensors on the training device, applied to whole batches."""

    def __init__(self, mirror: TaskMirror, device: torch.device, obs_angles: tuple[int, ...] = ()):
        self._maps = {name: _tensors(getattr(mirror, name), device) for name in ("obs", "critic", "actions")}
        # The actor's input columns (common/policy.py encode_angles), for the mirror loss on normalised inputs.
        self._maps["obs_input"] = _tensors(with_angle_columns(mirror.obs, obs_angles), device)

    def apply(self, name: str, x: torch.Tensor) -> torch.Tensor:
        """The mirror of `x` ([..., D]) under map `name` (obs, critic, actions, or obs_input: the actor's input)."""
        index, sign = self._maps[name]
        return x.index_select(-1, index) * sign.to(x.dtype)

    def augment(self, batch: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """A time-major batch ([T, B, ...], last_* [B, ...]) with its mirror image appended as B more envs."""
        out = {}
        for key, x in batch.items():
            axis = 0 if key.startswith("last_") else 1
            mirrored = self.apply(_FIELD_MAPS[key], x) if key in _FIELD_MAPS else x
            out[key] = torch.cat([x, mirrored], dim=axis)
        return out


def _tensors(p: SignedPermutation, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    return torch.as_tensor(p.index, device=device), torch.as_tensor(p.sign, device=device)
