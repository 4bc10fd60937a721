"""Named termination conditions: each task says why an episode ended, and step() ends exactly those episodes."""

from __future__ import annotations

import numpy as np
import pytest
from rotations import quat

from collector.envs import make_env

TASKS = ("go2_joystick_flat", "g1_walk_flat", "g1_velocity_flat")


@pytest.mark.parametrize("task", TASKS)
def test_a_robot_on_its_side_ends_by_tilt_and_the_listener_sees_it_before_the_reset(task):
    """A robot laid on its side ends its episode at the next step; the listener, called before the reset,
    reads the tilt condition true for that env alone, and the other envs run on."""
    env = make_env(task, 3, 1, seed=0)
    try:
        env.reset()
        qpos, qvel = env.qpos.copy(), env.qvel.copy()
        qpos[1, 3:7] = quat([1.0, 0.0, 0.0], np.pi / 2)  # env 1 on its side
        env.set_state(qpos, qvel)
        seen: list[tuple[list[int], dict[str, list[bool]]]] = []
        env.on_episode_end = lambda ids: seen.append(
            (ids.tolist(), {k: v.tolist() for k, v in env.termination_conditions().items()}))
        res = env.step(np.zeros((3, env.spec.act_dim)))
        assert res.terminated.tolist() == [False, True, False]
        (ids, conditions), = seen
        assert ids == [1]
        tilt = [name for name in conditions if "tilt" in name]
        assert len(tilt) == 1 and conditions[tilt[0]] == [False, True, False]
        assert conditions["non-finite state"] == [False, False, False]
        # After the reset env 1 stands again: no condition holds for any env.
        assert not np.any(np.stack(list(env.termination_conditions().values())))
    finally:
        env.close()


def test_walker_names_a_pelvis_too_low_apart_from_tilt():
    """g1_walk_flat: an upright pelvis below 0.55 m is its own named reason, tilt stays false."""
    env = make_env("g1_walk_flat", 2, 1, seed=0)
    try:
        env.reset()
        qpos, qvel = env.qpos.copy(), env.qvel.copy()
        qpos[0, 2] = 0.40
        env.set_state(qpos, qvel)
        ended = []
        env.on_episode_end = lambda ids: ended.append({k: v.copy() for k, v in env.termination_conditions().items()})
        env.step(np.zeros((2, env.spec.act_dim)))
        assert ended and ended[0]["pelvis below 0.55 m"].tolist() == [True, False]
        assert ended[0]["torso tilt over 25 deg"].tolist() == [False, False]
    finally:
        env.close()


def test_a_task_without_named_conditions_returns_none():
    """A Gymnasium body names no conditions: the viewer falls back to 'terminated'."""
    env = make_env("hopper", 2, 1, seed=0)
    try:
        assert env.termination_conditions() == {}
    finally:
        env.close()
