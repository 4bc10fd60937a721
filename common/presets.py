"""Per-task defaults: visible here, below any YAML, env or CLI value.

The reference configuration (common/config.py) targets the Go2 with thousands of
envs.  Every task without a tuned preset of its own (gym:<id>, package.module:factory,
entry points, and the built-in hopper and ant) gets GENERIC: fewer envs, longer
rollouts.  Returns of such tasks are in the hundreds or thousands (no dt scaling), so
the value loss is not clipped: a clip of clip_param around the old values would let
the critic move only 0.2 per update.
"""

from __future__ import annotations

from typing import Any

# rsl_rl's PPO learning-rate rule and clipping (the reference learner's): adapt outside
# [desired/2, desired*2] by 1.5, where the defaults (1.2, 1.1) move the rate slowly.
REFERENCE_UPDATE: dict[str, Any] = {"kl_factor": 2.0, "lr_factor": 1.5, "grad_clip": "per_network"}

# The untuned default: what a task with no preset of its own gets (chosen on hopper, ant and
# gym:Walker2d-v5 with tuning seeds; BENCHMARKS.md, "Tasks nobody tuned"):
# - init_noise_std 0.3: with std 1.0, ant's control cost outweighs its reward for staying up,
#   and the policy learned to fall at once;
# - the adaptive learning rate (the default) kept: a fixed 3e-4 lost Walker2d on both seeds tried;
# - desired_kl 0.02: more policy movement per update; Walker2d and ant learned much faster per env step
#   on the tuning seeds (BENCHMARKS.md, "More tuning on the hard seeds");
# - no replay: each env step is trained on once, and where the physics is the bottleneck
#   (ant, Walker2d) the cores go to it rather than to re-training old rollouts;
# - lam 1.0 (plain V-trace, what it was chosen with): with the default 0.95, hopper on an unseen seed
#   stood still from the second minute and ended at half the return it reached with 1.0
#   (BENCHMARKS.md, "Learning more per sample").
GENERIC: dict[str, Any] = {
    "algo": {
        "num_envs": 256,
        "steps_per_env": 32,
        "max_iterations": 600,
        "save_interval": 50,
        "policy": {"actor_hidden_dims": [256, 256], "critic_hidden_dims": [256, 256], "init_noise_std": 0.3},
        "algorithm": {"learning_rate": 3e-4, "entropy_coef": 0.0, "use_clipped_value_loss": False,
                      "desired_kl": 0.02, "lam": 1.0},
    },
    "training": {"replay_queue_size": 1},
}

# The humanoid: the reference's networks ([512, 256, 128] ELU), lr 1e-3 adaptive at desired_kl
# 0.01, clipped value loss and 24 steps.  What differs from the reference, each measured at equal
# env steps on tuning seeds (BENCHMARKS.md, "Learning more per sample"):
# - 128 envs: each update moves the policy by about the KL target, so 4x the updates per env step
#   (of 512 envs) learned about twice as fast per env step; 256 envs in between.  It costs some
#   throughput (512 envs were sized for that alone, BENCHMARKS.md, "G1: sizing the preset"):
#   the smaller batches of physics and inference leave the 2-core run further below its ceiling;
# - init_noise_std 0.5: under 1.0 the action-rate penalty over 29 joints outweighs the positive
#   terms and the walker learns to fall at once (rsl_rl itself does this here at 512 envs);
# - 2 epochs instead of 5: the KL rule let the learning rate settle well above its floor, where
#   5 epochs held it, and the episodes grew longer; one epoch learned less;
# - no entropy bonus: the std could fall, and with it the action-rate cost of the noise.
G1: dict[str, Any] = {
    # 120,000 iterations and a checkpoint every 200: the env steps of 30,000 and 50 at 512 envs.
    "algo": {"num_envs": 128, "steps_per_env": 24, "max_iterations": 120000, "save_interval": 200,
             "policy": {"actor_hidden_dims": [512, 256, 128], "critic_hidden_dims": [512, 256, 128],
                        "init_noise_std": 0.5},
             "algorithm": {"learning_rate": 1e-3, "num_learning_epochs": 2, "entropy_coef": 0.0, **REFERENCE_UPDATE},
             "normalizer_warmup": True},
    "training": {"replay_queue_size": 1, "precision": "auto"},
}
# The walker also trains on the mirror image of every batch (common/symmetry.py): on tuning seed 1 the
# training return at 1.5 M env steps was 4.0 against 2.9, on seed 2 at 8 M 15.2 against 7.9 with episodes
# of 475 steps against 260 (BENCHMARKS.md, "Symmetry augmentation"); the update costs twice as much.
# And a mirror loss of weight 10 keeps the policy near its own mirror image, so the mirror images stay
# on-policy data: on seed 2 at 8 M a return of 26.0 against 15.2, episodes of 647 steps against 475
# (BENCHMARKS.md, "Mirror loss").
G1_VELOCITY: dict[str, Any] = {**G1, "algo": {**G1["algo"], "algorithm": {**G1["algo"]["algorithm"],
                                                                          "symmetry": True, "mirror_loss_coef": 10.0}}}

# The seed's gait-clock walker: the humanoid preset (128 envs, std 0.5, 2 epochs, no entropy bonus, the reference
# update rule), which, run on the seed's own env code, stood by 3 M env steps where the seed's own APPO settings had
# not by 14.8 M; with symmetry augmentation and the mirror loss, as g1_velocity_flat: at 2 M env steps on tuning seeds
# 1 and 2 the training episodes were 279 and 252 steps against 132 and 157 without (BENCHMARKS.md, "g1_walk_flat").
# 8,000 iterations of 128 x 24: the 24.6 M env steps of the seed's own APPO budget (500 x 2,048 x 24).
# An initial std of 1.5 on the joints a step swings (hip_pitch, knee, ankle_pitch: action indices 0, 3, 4 left and
# 6, 9, 10 right), 0.5 on the rest: with 0.5 everywhere it stood still whatever the command on every seed tried; with
# 1.0 three tuning seeds of four walked by 3 M env steps, with 1.5 all four, each with at least 15 of 20 evaluated
# episodes to the time limit, though the seeds that walk under 1.0 track a little worse at 3 M (BENCHMARKS.md,
# "Sagittal std 1.5 on all four tuning seeds").
# And desired KL 0.02 (the humanoid preset's 0.01): the KL rule then holds the learning rate about twice as high, and
# turning, which earns a tenth of what the planar velocity does, comes sooner: at 8 M env steps on tuning seeds 202 and
# 203 (BENCHMARKS.md, "Desired KL 0.02 from the start").
G1_STEP_JOINTS_STD = {0: 1.5, 3: 1.5, 4: 1.5, 6: 1.5, 9: 1.5, 10: 1.5}
G1_WALK: dict[str, Any] = {**G1_VELOCITY, "algo": {
    **G1_VELOCITY["algo"], "max_iterations": 8000,
    "policy": {**G1_VELOCITY["algo"]["policy"], "init_noise_std_by_action": G1_STEP_JOINTS_STD},
    "algorithm": {**G1_VELOCITY["algo"]["algorithm"], "desired_kl": 0.02}}}

PRESETS: dict[str, dict[str, Any]] = {
    # The reference task, sized for a 2-core machine: the learner's update must keep pace
    # with two cores of Go2 physics, so smaller networks and no replay.  1024 envs x 24 (half
    # the reference configuration's envs, twice its iterations, the same env steps): twice the
    # updates per env step walk in fewer env steps (BENCHMARKS.md, "Go2 time to the walking criterion").
    "go2_joystick_flat": {
        "algo": {
            "num_envs": 1024,
            "steps_per_env": 24,
            "max_iterations": 400,
            "policy": {"actor_hidden_dims": [256, 128, 64], "critic_hidden_dims": [256, 128, 64]},
            # The reference PPO's update rule (BENCHMARKS.md, "Learning more per sample"): KL band
            # [desired/2, desired*2] stepped by 1.5, each network's gradient clipped on its own, and
            # the normalisers fitted on the first rollout before any update.
            "algorithm": {"learning_rate": 1e-3, **REFERENCE_UPDATE},
            "normalizer_warmup": True,
        },
        # bf16 hidden layers where the CPU runs them faster (common/precision.py): validated
        # here (walking criterion at the same checkpoint as float32), with a faster update.
        "training": {"replay_queue_size": 1, "precision": "auto"},
    },
    "g1_walk_flat": G1_WALK,
    "g1_velocity_flat": G1_VELOCITY,
    # The walk preset before symmetry (its update was not ablated on tracking separately; tracking has no mirror map).
    "g1_motion_tracking": G1,
    "inverted_pendulum": {
        "algo": {
            "num_envs": 64,
            "steps_per_env": 32,
            # With 300 iterations some runs ended below a 900 return, still climbing.
            "max_iterations": 500,
            "save_interval": 100,
            "policy": {"actor_hidden_dims": [64, 64], "critic_hidden_dims": [64, 64]},
            # lam 1.0: validated with plain V-trace; the default 0.95 is not measured here.
            "algorithm": {"learning_rate": 3e-4, "entropy_coef": 0.0, "use_clipped_value_loss": False,
                          "lam": 1.0},
        },
        # Fresh data only: replaying rollouts made this small task's learning erratic.
        "training": {"replay_queue_size": 1},
    },
    # Tuned for the 8-minute benchmark on 2 cores (BENCHMARKS.md, "half_cheetah in 8
    # minutes"), where the learner is the bottleneck:
    # - no replay: each env step is trained on once, so the learner's time goes to fresh data;
    # - init_noise_std 0.5 (the RL Zoo's narrow log_std init): less early data wasted on control cost;
    # - gamma 0.98 (as the Zoo): a shorter, easier horizon for the critic;
    # - 2 epochs instead of 5 (or 3): the learner takes more env steps, which learned more per minute;
    # - ReLU (as the Zoo's tuned PPO) instead of ELU: learned better, and its lower cost leaves the
    #   collector's main thread less work where half_cheetah's cheap physics makes inference weigh most;
    # - desired_kl 0.02 instead of 0.01: the adaptive learning rate settles higher and learned
    #   better on every seed tried.
    # A [128, 128] network learned much slower; std 0.25 and 32 minibatches did no better.
    # lam 1.0: all of the above was measured with plain V-trace; the default 0.95 is not.
    "half_cheetah": {
        "algo": {
            "num_envs": 256,
            "steps_per_env": 32,
            "max_iterations": 300,
            "save_interval": 100,
            "policy": {"actor_hidden_dims": [256, 256], "critic_hidden_dims": [256, 256],
                       "init_noise_std": 0.5, "activation": "relu"},
            "algorithm": {"learning_rate": 3e-4, "entropy_coef": 0.0, "use_clipped_value_loss": False,
                          "gamma": 0.98, "num_learning_epochs": 2, "desired_kl": 0.02, "lam": 1.0},
        },
        # bf16 where the CPU runs it faster, validated here (it learned as well as float32 in 8 minutes).
        "training": {"replay_queue_size": 1, "precision": "auto"},
    },
}


def preset_for(task: str) -> dict[str, Any]:
    """The task's tuned preset, or GENERIC for a task nobody tuned."""
    return PRESETS.get(task, GENERIC)
