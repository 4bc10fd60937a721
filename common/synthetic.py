"""Synthetic rollouts for tests and benchmarks: a training batch of real shapes sampled from a policy."""

from __future__ import annotations

import copy

import torch

from common.policy import ActorCritic
from common.rollout_spec import SEQUENCE_FIELDS, RolloutSpec
from common.task_spec import TaskSpec


def synthetic_batch(task: TaskSpec, num_envs: int, steps: int, rollouts: int, device: torch.device,
                    policy: ActorCritic, seed: int = 0) -> dict[str, torch.Tensor]:
    """A time-major training batch [T, rollouts*N, ...] as StagingPool.batch() builds it.

    Observations are standard normal, actions and their log-probs are sampled from
    `policy` (the behaviour policy), about 2% of steps end an episode.  `policy` itself
    is left where it is: a CPU copy of it samples.
    """
    spec = RolloutSpec.for_task(task, num_envs, steps)
    g = torch.Generator(device="cpu").manual_seed(seed)
    n = rollouts * num_envs
    shapes = {k: (n, *s[1:]) for k, s in spec.shapes().items()}
    out = {k: torch.randn(*s, generator=g) for k, s in shapes.items()}
    out["dones"] = (torch.rand(*shapes["dones"], generator=g) < 0.02).float()
    out["truncated"] = torch.zeros(shapes["truncated"])
    with torch.no_grad():
        # nn.Module.to moves in place: a copy, so the caller's model stays on its device.
        dist = copy.deepcopy(policy).to("cpu").distribution(out["obs"])
        out["actions"] = dist.mean + dist.stddev * torch.randn(*shapes["actions"], generator=g)
        out["log_probs"] = dist.log_prob(out["actions"]).sum(-1)
    return {k: (v.transpose(0, 1).contiguous() if k in SEQUENCE_FIELDS else v).to(device) for k, v in out.items()}
