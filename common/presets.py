"""Per-task tuned defaults: visible here, below any YAML, env or CLI value.

The reference configuration (common/config.py) targets the Go2 with thousands of
envs; the small Gymnasium bodies learn faster with fewer envs and longer rollouts.
"""

from __future__ import annotations

from typing import Any

PRESETS: dict[str, dict[str, Any]] = {
    "inverted_pendulum": {
        "algo": {
            "num_envs": 64,
            "steps_per_env": 32,
            "max_iterations": 100,
            "save_interval": 50,
            "policy": {"actor_hidden_dims": [64, 64], "critic_hidden_dims": [64, 64]},
            "algorithm": {"learning_rate": 3e-4, "entropy_coef": 0.0, "num_mini_batches": 4},
        },
    },
    "half_cheetah": {
        "algo": {
            "num_envs": 256,
            "steps_per_env": 32,
            "max_iterations": 300,
            "save_interval": 100,
            "policy": {"actor_hidden_dims": [256, 256], "critic_hidden_dims": [256, 256]},
            "algorithm": {"learning_rate": 3e-4, "entropy_coef": 0.0},
        },
    },
    "hopper": {
        "algo": {
            "num_envs": 256,
            "steps_per_env": 32,
            "max_iterations": 300,
            "policy": {"actor_hidden_dims": [256, 256], "critic_hidden_dims": [256, 256]},
            "algorithm": {"learning_rate": 3e-4, "entropy_coef": 0.0},
        },
    },
    "ant": {
        "algo": {
            "num_envs": 256,
            "steps_per_env": 32,
            "max_iterations": 300,
            "policy": {"actor_hidden_dims": [256, 256], "critic_hidden_dims": [256, 256]},
            "algorithm": {"learning_rate": 3e-4, "entropy_coef": 0.0},
        },
    },
}


def preset_for(task: str) -> dict[str, Any]:
    return PRESETS.get(task, {})
