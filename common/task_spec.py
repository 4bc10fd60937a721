"""What every process must agree on about a task, without importing the simulator.

The learner validates incoming rollouts against these numbers and builds its
networks from them; the collector's task implementations declare the same spec
(a test checks the real environments produce exactly these shapes).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class TaskSpec:
    """A task's sizes, time limit, control dt and reward terms, as every process must agree on them."""

    name: str
    obs_dim: int
    critic_dim: int
    act_dim: int
    max_episode_steps: int
    control_dt: float
    reward_terms: tuple[str, ...]
    # Observation columns that are angles in radians (actor, critic): with algo.policy.periodic_inputs the
    # networks see their sine and cosine (common/weight_layout.py `input_angles`).
    obs_angles: tuple[int, ...] = ()
    critic_angles: tuple[int, ...] = ()


TASK_SPECS: dict[str, TaskSpec] = {
    s.name: s
    for s in (
        # Gymnasium v5 MuJoCo bodies (critic sees the same observation as the actor).
        TaskSpec("inverted_pendulum", 4, 4, 1, 1000, 0.04, ("alive",)),
        TaskSpec("half_cheetah", 17, 17, 6, 1000, 0.05, ("forward", "ctrl")),
        TaskSpec("hopper", 11, 11, 3, 1000, 0.008, ("forward", "ctrl", "healthy")),
        TaskSpec("ant", 105, 105, 8, 1000, 0.05, ("forward", "ctrl", "contact", "healthy")),
        # Unitree Go2 velocity tracking (docs/design.md#go2_joystick_flat); the critic adds the body-frame
        # linear velocity.
        TaskSpec("go2_joystick_flat", 49, 52, 12, 1000, 0.02,
                 ("tracking_lin_vel", "tracking_ang_vel", "lin_vel_z", "ang_vel_xy", "base_height",
                  "action_rate", "similar_to_default", "feet_contact", "feet_swing_height")),
        # Unitree G1 velocity tracking (mjlab's Velocity-Flat-Unitree-G1, collector/envs/g1/velocity.py); the critic
        # sees unbiased, noise-free terms plus foot height, air time, contact and contact forces.
        TaskSpec("g1_velocity_flat", 99, 111, 29, 1000, 0.02,
                 ("track_linear_velocity", "track_angular_velocity", "upright", "pose", "body_ang_vel",
                  "angular_momentum", "dof_pos_limits", "action_rate_l2", "air_time", "foot_clearance",
                  "foot_swing_height", "foot_slip", "soft_landing", "self_collisions")),
        # The seed's (UniLab's) G1 gait-clock walk (collector/envs/g1/walk.py): the actor sees the feet's gait phase
        # (the last two columns, radians in [0, 2 pi)); the critic adds the pelvis IMU's linear velocity after them.
        TaskSpec("g1_walk_flat", 98, 101, 29, 1000, 0.02,
                 ("tracking_lin_vel", "tracking_ang_vel", "feet_phase", "lin_vel_z", "ang_vel_xy", "base_height",
                  "orientation", "action_rate", "pose"), obs_angles=(96, 97), critic_angles=(96, 97)),
        # Unitree G1 motion tracking (mjlab's Tracking-Flat-Unitree-G1, collector/envs/g1/tracking.py): a reference
        # clip (config task_options.motion_file) followed for 10 s; the critic adds the tracked bodies' poses.
        TaskSpec("g1_motion_tracking", 160, 286, 29, 500, 0.02,
                 ("motion_global_root_pos", "motion_global_root_ori", "motion_body_pos", "motion_body_ori",
                  "motion_body_lin_vel", "motion_body_ang_vel", "action_rate_l2", "joint_limit", "self_collisions")),
    )
}


class UnknownTaskError(ValueError):
    """A task name that is malformed or names no known task, with the available ones listed."""


def task_spec(name: str) -> TaskSpec:
    try:
        return TASK_SPECS[name]
    except KeyError:
        raise UnknownTaskError(f"unknown task {name!r}; available: {', '.join(sorted(TASK_SPECS))}") from None


# The physics engines (collector/envs/physics), by the seed's --sim names; MuJoCo is the default.
ENGINES = ("mujoco", "motrix")
# The engines each built-in task runs on, MuJoCo first.
# The Gymnasium bodies, and any task defined elsewhere, are MuJoCo's only.
TASK_ENGINES: dict[str, tuple[str, ...]] = {
    "go2_joystick_flat": ENGINES,
    "g1_walk_flat": ENGINES,
    "g1_velocity_flat": ENGINES,
    "g1_motion_tracking": ENGINES,
}


def task_engines(task: str) -> tuple[str, ...]:
    """The engines `task` runs on."""
    return TASK_ENGINES.get(task, ("mujoco",))


def tasks_on(engine: str) -> list[str]:
    """The built-in tasks that run on `engine`, sorted."""
    return sorted(t for t, engines in TASK_ENGINES.items() if engine in engines)
