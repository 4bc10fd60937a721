"""appo-play's simulation side: controls reach the real task, policies switch at episode ends, bad runs refused."""

from __future__ import annotations

import time

import numpy as np
import pytest
import torch
from checkpoint_helpers import write_checkpoint
from rotations import quat

from collector.envs import make_env
from common.checkpoint_io import CheckpointError
from common.policy import flat_weights
from tools.play import sources
from tools.play.scene import EnvPoses, env_offsets, instance_poses, matrix_to_wxyz, shapes
from tools.play.session import PlaySession, PolicySource

TASK = "go2_joystick_flat"


@pytest.fixture
def run_dir(tmp_path):
    run = tmp_path / "logs" / TASK / "run1"
    write_checkpoint(run / "model_5.pt", TASK, 5)
    write_checkpoint(run / "model_9.pt", TASK, 9, 1)
    return run


def session_of(run_dir, num_envs=3, max_episode_steps=None) -> PlaySession:
    start = sources.resolve(str(run_dir), TASK, "logs", None, follow=False)
    env = make_env(TASK, num_envs, 1, 0, max_episode_steps=max_episode_steps)
    return PlaySession(env, start.policy.model, PolicySource(start.policy.path.name))


def test_override_sets_every_envs_command_in_the_simulation_clipped_to_the_task_box(run_dir):
    """A slider command is what the task's envs hold at the next step (observation included), within the box."""
    s = session_of(run_dir)
    try:
        set_to = s.set_command([0.5, -0.3, 5.0])  # yaw rate beyond the box's 0.8
        np.testing.assert_allclose(set_to, [0.5, -0.3, 0.8])
        s.advance()
        np.testing.assert_allclose(s.env.commands, np.tile([0.5, -0.3, 0.8], (3, 1)))
        # The observation the policy acts on next carries it (go2: the command slice).
        from collector.envs.go2.task import OBS_SLICES
        np.testing.assert_allclose(s.obs[:, OBS_SLICES["command"]], np.tile([0.5, -0.3, 0.8], (3, 1)), atol=1e-6)
        s.release_command()
        s.request_reset()
        s.advance()
        assert not np.allclose(s.env.commands, np.tile([0.5, -0.3, 0.8], (3, 1)))  # sampled again
    finally:
        s.env.close()


def test_pause_holds_the_clock_and_a_single_step_advances_it_by_one_control_step(run_dir):
    """Paused: not due; one step request: exactly one control step of dt; then not due again."""
    s = session_of(run_dir)
    try:
        s.advance()
        t0, qpos0 = s.sim_time, s.env.qpos.copy()
        s.paused = True
        assert not s.due()
        s.request_step()
        assert s.due()
        s.advance()
        assert s.sim_time == pytest.approx(t0 + s.env.spec.control_dt)
        assert not np.array_equal(qpos0, s.env.qpos)
        assert not s.due()
    finally:
        s.env.close()


def test_new_weights_take_over_only_when_the_followed_episode_ends(run_dir):
    """Weights offered mid-episode wait; at the followed env's time limit they act, with their version."""
    s = session_of(run_dir, max_episode_steps=4)
    try:
        other = write_checkpoint(run_dir / "model_20.pt", TASK, 20, 7)
        flat = flat_weights(other)
        s.advance()
        s.offer(PolicySource("v3", 3), flat)
        before = flat_weights(s.model)
        s.advance()
        s.advance()
        assert s.source.label == "model_9.pt" and np.array_equal(flat_weights(s.model), before)
        s.advance()  # the 4th step: the time limit of every env
        assert s.followed.last_end == "time limit" and s.followed.episodes == 1
        assert s.source.version == 3 and np.array_equal(flat_weights(s.model), flat)
        obs = torch.as_tensor(s.obs, dtype=torch.float32)
        torch.testing.assert_close(s.model.act_deterministic(obs), other.act_deterministic(obs))
    finally:
        s.env.close()


def test_a_fall_is_named_by_the_task_condition_that_ended_it(run_dir):
    """The followed env laid on its side ends its episode, and the page's 'ended by' names the tilt."""
    s = session_of(run_dir)
    try:
        qpos, qvel = s.env.qpos.copy(), s.env.qvel.copy()
        qpos[0, 3:7] = quat([1.0, 0.0, 0.0], np.pi / 2)
        s.env.set_state(qpos, qvel)
        s.obs = s.env.observe()[0]
        s.advance()
        assert s.followed.last_end == "tilt over 60 deg"
    finally:
        s.env.close()


def test_checkpoint_of_another_task_is_refused_naming_both(tmp_path):
    """--task go2_joystick_flat with a hopper checkpoint: the error names both tasks."""
    write_checkpoint(tmp_path / "hop" / "model_1.pt", "hopper", 1)
    with pytest.raises(CheckpointError, match="hopper policy.*cannot play task go2_joystick_flat"):
        sources.resolve(str(tmp_path / "hop"), TASK, "logs", None, follow=False)


def test_run_without_checkpoints_says_so_unless_followed(tmp_path):
    """Playing an empty run names the missing checkpoints; following it builds the run's network from config.yaml."""
    run = tmp_path / TASK / "fresh"
    run.mkdir(parents=True)
    with pytest.raises(CheckpointError, match="holds no checkpoint"):
        sources.resolve(str(run), TASK, str(tmp_path), None, follow=False)
    import yaml

    from common.config import load_config
    (run / "config.yaml").write_text(yaml.safe_dump(load_config([f"task={TASK}"]).to_dict()))
    start = sources.resolve("fresh", TASK, str(tmp_path), None, follow=True)
    assert start.policy is None and start.config.task == TASK and start.run_dir == run


def test_scene_instances_sit_on_the_task_models_geoms():
    """Every visible geom is drawn (a capsule as a cylinder and two spheres) at MuJoCo's geom pose in its env's
    grid cell, scaled to its size; the contact overlay reads finite forces."""
    import mujoco

    env = make_env(TASK, 4, 1, 0)
    try:
        env.reset()
        m = env.model
        drawn = sorted({g for shape in shapes(m) for g in shape.geoms})
        visible = [g for g in range(m.ngeom) if m.geom_bodyid[g] and m.geom_group[g] <= 2]
        assert drawn == visible and len(drawn) >= 13
        poses = EnvPoses(m, 4)
        pos, rot = poses.update(env.qpos)
        for shape in shapes(m):
            p, q = instance_poses(shape, pos, rot)
            k = len(shape.geoms)
            for j, g in enumerate(shape.geoms):
                d = mujoco.MjData(m)
                d.qpos[:] = env.qpos[2]
                mujoco.mj_kinematics(m, d)
                expected = d.geom_xpos[g] + d.geom_xmat[g].reshape(3, 3) @ shape.offsets[j] + env_offsets(4)[2]
                np.testing.assert_allclose(p[2 * k + j], expected, atol=1e-9)
                ref = np.zeros(4)
                mujoco.mju_mat2Quat(ref, d.geom_xmat[g])
                assert abs(abs(np.dot(q[2 * k + j], ref)) - 1.0) < 1e-9
                size = m.geom_size[g]
                if m.geom_type[g] == mujoco.mjtGeom.mjGEOM_BOX:
                    np.testing.assert_allclose(shape.scales[j], size)
        points, forces = poses.contacts(0, env.qpos[0], env.qvel[0], env.ctrl[0])
        assert points.shape == forces.shape and np.all(np.isfinite(forces))
    finally:
        env.close()


def test_matrix_to_wxyz_agrees_with_mujoco_for_any_rotation():
    """The vectorised conversion gives MuJoCo's quaternion (up to sign) for random and half-turn rotations."""
    import mujoco

    rng = np.random.default_rng(0)
    quats = rng.normal(size=(200, 4))
    quats /= np.linalg.norm(quats, axis=1, keepdims=True)
    quats = np.concatenate([quats, [[0, 1, 0, 0], [0, 0, 1, 0], [0, 0, 0, 1], [0, 0.5**0.5, -(0.5**0.5), 0]]])
    mats = np.empty((len(quats), 9))
    for q, out in zip(quats, mats, strict=True):
        mujoco.mju_quat2Mat(out, q)
    got = matrix_to_wxyz(mats.reshape(-1, 3, 3))
    np.testing.assert_allclose(np.abs(np.sum(got * quats, axis=1)), 1.0, atol=1e-9)


def test_page_draws_the_motion_ghost_at_the_reference_and_contacts_under_the_feet(tmp_path):
    """g1_motion_tracking on the page: the ghost's spheres are the re-anchored reference bodies of the followed
    env (shifted to its grid cell), and the contact overlay finds the feet on the floor with upward forces."""
    from e2e_helpers import free_port
    from test_motion_cli import arc_clip

    from collector.envs.g1.motion import write_clip
    from tools.eval import reference_bodies
    from tools.play.web import WebViewer

    clip = tmp_path / "arc.npz"
    write_clip(clip, arc_clip(40))
    run = tmp_path / "g1_motion_tracking" / "run"
    write_checkpoint(run / "model_1.pt", "g1_motion_tracking", 1, 0, f"task_options.motion_file={clip}")
    start = sources.resolve(str(run), None, "logs", None, follow=False)
    env = make_env("g1_motion_tracking", 2, 1, 0, motion_file=str(clip))
    session = PlaySession(env, start.policy.model, PolicySource("model_1.pt"))
    viewer = WebViewer(session, "127.0.0.1", free_port())
    try:
        session.followed_env = 1
        session.advance()
        viewer.show_contacts.value = True
        viewer.draw()
        expected = reference_bodies(env, 1, viewer.poses.datas[1]) + viewer.poses.offsets[1]
        np.testing.assert_allclose(viewer.ghost.batched_positions, expected, atol=1e-5)
        assert "clip frame" in (viewer.refresh_text() or viewer.episode_text.content)
        points = viewer.contact_points.points
        assert viewer.contact_points.visible and len(points) >= 2
        assert np.all(points[:, 2] < 0.1)  # on the floor
        forces = viewer.contact_forces.points[:, 1] - viewer.contact_forces.points[:, 0]
        assert forces[:, 2].sum() > 0  # the floor pushes up
    finally:
        viewer.close()
        env.close()


def test_zmq_follower_takes_published_weights_with_the_runs_curve_keys_and_joins_as_no_peer(tmp_path):
    """Across hosts: a follower with the run's CURVE collector keys gets each published version over the PUB
    socket; one without keys gets nothing; the learner never sees either as a peer (collector)."""
    from e2e_helpers import free_port, wait_for

    from common.rollout_spec import RolloutSpec
    from common.task_spec import task_spec
    from common.transport.curve import server_keys, write_keys
    from common.transport.zmq_learner import LearnerZmq

    keys = tmp_path / "keys"
    write_keys(keys, ["collector"])
    endpoint = f"tcp://127.0.0.1:{free_port()}"
    n = 64
    learner = LearnerZmq(endpoint, RolloutSpec.for_task(task_spec(TASK), num_envs=4, steps=8), n, 2, 0.2, 30.0,
                         server_keys(str(keys)))
    keyed = sources.ZmqFollower(endpoint, n, str(keys), "collector")
    open_ = sources.ZmqFollower(endpoint, n)
    try:
        got = None
        for version in range(1, 200):  # PUB drops what it sends before the subscription is through
            learner.publish_weights(version, np.full(n, version, np.float32))
            got = keyed.poll(-1) or got
            if got is not None and got[0] >= 3:
                break
            time.sleep(0.05)
        assert got is not None and np.array_equal(got[1], np.full(n, got[0], np.float32))
        learner.publish_weights(got[0] + 1, np.zeros(n, np.float32))
        assert wait_for(lambda: keyed.poll(got[0]), 5, "the next version")[0] == got[0] + 1
        assert open_.poll(-1) is None  # no keys, no weights
        learner.service()
        assert learner.collectors() == {}
    finally:
        keyed.close()
        open_.close()
        learner.close()
