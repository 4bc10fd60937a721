"""The physics interface (collector/envs/physics): MuJoCo behind it, and engines refused by name."""

from __future__ import annotations

import mujoco
import numpy as np
import pytest

from collector.envs import TASKS, UnknownSimError, make_collector_env, make_env, task_sims
from collector.envs.physics import SIMS, STAGE_VEL, Physics, make_physics


def test_mujoco_physics_provides_the_interface_and_its_arrays_are_the_simulations_state():
    """MujocoPhysics is a Physics; set_state rows reach mjData (a forward's sensors read them) and only those rows."""
    env = make_env("go2_joystick_flat", 3, 1, 0)
    try:
        physics = env._sim
        assert isinstance(physics, Physics)
        qpos, qvel = physics.qpos.copy(), physics.qvel.copy()
        qvel[1, :3] = (0.7, -0.2, 0.1)  # a base velocity in the world frame, yaw of row 1 applies
        physics.set_state(np.array([1], np.int32), qpos[1:2], qvel[1:2])
        physics.forward(STAGE_VEL, np.array([1], np.int32))
        # MuJoCo's own mjData from the same state, to the velocity stage: its sensors are the reference.
        data = mujoco.MjData(env.model)
        data.qpos[:], data.qvel[:] = qpos[1], qvel[1]
        for stage in (mujoco.mj_fwdPosition, mujoco.mj_sensorPos, mujoco.mj_fwdVelocity, mujoco.mj_sensorVel):
            stage(env.model, data)
        sensordata = physics.output("sensordata")
        np.testing.assert_allclose(sensordata[1], data.sensordata, atol=1e-12)
        np.testing.assert_array_equal(physics.qvel[0], qvel[0])
        assert not np.allclose(sensordata[0], sensordata[1])
    finally:
        env.close()


def test_field_rows_change_one_env_only():
    """A per-env model field written for one row changes that env's physics and no other's."""
    env = make_env("go2_joystick_flat", 2, 1, 0)
    try:
        env.reset()
        qpos, qvel = np.tile(env.qpos[0], (2, 1)), np.zeros_like(env.qvel)
        env.set_state(qpos, qvel)
        gain = env._sim.field("actuator_gainprm").reshape(2, env.model.nu, -1)
        gain[1, :, 0] *= 0.2  # a weak servo on every joint of env 1
        bias = env._sim.field("actuator_biasprm").reshape(2, env.model.nu, -1)
        bias[1, :, 1] *= 0.2
        for _ in range(25):
            env.step(np.zeros((2, env.spec.act_dim), np.float32))
        assert env.qpos[1, 2] < env.qpos[0, 2] - 0.02  # the weak legs sag
    finally:
        env.close()


def test_unknown_engine_is_refused_naming_the_engines():
    """An engine name that does not exist is refused with the names that do."""
    model = mujoco.MjModel.from_xml_string("<mujoco><worldbody><body><freejoint/><geom size='0.1'/></body>"
                                           "</worldbody></mujoco>")
    with pytest.raises(UnknownSimError, match="unknown physics engine 'bullet'; available: mujoco, motrix"):
        make_physics("bullet", model, 2, 1)
    assert SIMS == ("mujoco", "motrix")


def test_a_task_refuses_an_engine_it_does_not_run_on():
    """A Gymnasium task runs on MuJoCo only, and says so; so does make_collector_env's split batch."""
    assert task_sims("hopper") == ("mujoco",)
    with pytest.raises(UnknownSimError, match="task hopper runs on mujoco, not 'motrix'"):
        make_env("hopper", 2, 1, 0, sim="motrix")
    with pytest.raises(UnknownSimError, match="runs on mujoco, not 'motrix'"):
        make_collector_env("half_cheetah", 512, 1, 0, sim="motrix")


def test_a_task_from_elsewhere_refuses_another_engine():
    """A gym: task builds its own simulation: another engine is refused, naming the built-in tasks that have it."""
    with pytest.raises(UnknownSimError, match="builds its own simulation"):
        make_env("gym:CartPole-v1", 2, 1, 0, sim="motrix")


def test_the_robot_tasks_run_on_both_engines_and_mujoco_is_everyones_first():
    """The Go2 and the three G1 tasks list mujoco and motrix; every built-in task lists mujoco first (the default)."""
    assert all(task_sims(t)[0] == "mujoco" for t in TASKS)
    assert [t for t in sorted(TASKS) if "motrix" in task_sims(t)] == [
        "g1_motion_tracking", "g1_velocity_flat", "g1_walk_flat", "go2_joystick_flat"]


def test_without_motrixsim_installed_motrix_says_what_to_install(monkeypatch):
    """With MotrixSim missing, --sim motrix is refused naming the extra and the image that carry it."""
    import sys

    monkeypatch.setitem(sys.modules, "motrixsim", None)  # as if not installed: its import fails
    monkeypatch.delitem(sys.modules, "collector.envs.physics.motrix", raising=False)
    with pytest.raises(UnknownSimError, match=r"pip install 'appo\[motrix\]'.*appo-collector-motrix"):
        make_env("go2_joystick_flat", 2, 1, 0, sim="motrix")
