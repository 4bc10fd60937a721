"""The g1_walk_flat mirror map (common/symmetry.py) against the task on real MuJoCo: a mirrored state (gait phases
swapped) stepped with mirrored actions gives the mirrored observations and the same rewards."""

from __future__ import annotations

import numpy as np

from collector.envs import make_env
from collector.envs.g1 import walk_model
from common.symmetry import G1_JOINTS, MIRRORS, PSEUDO_VECTOR, VECTOR
from common.task_spec import task_spec

MIRROR = MIRRORS["g1_walk_flat"]
STAND = np.array(walk_model.load_facts()["stand_keyframe"]["qpos"])
PAIRS = 6  # random states, each beside its mirror image
JOINT_INDEX = list(MIRROR.actions.index)


def _mirror_state(q: np.ndarray, v: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Root y -> -y and R -> S R S, body-frame angular velocity (-x, y, -z), joints by the action map."""
    mq, mv = q.copy(), v.copy()
    mq[:, :3] *= VECTOR
    mq[:, 3:7] *= (1.0, -1.0, 1.0, -1.0)
    mq[:, 7:] = MIRROR.actions.apply(q[:, 7:])
    mv[:, :3] *= VECTOR
    mv[:, 3:6] *= PSEUDO_VECTOR
    mv[:, 6:] = MIRROR.actions.apply(v[:, 6:])
    return mq, mv


def _mirrored_pairs(seed: int):
    """An env of 2 * PAIRS rows, row PAIRS + i the mirror image of row i: state, command, phase and PD gains."""
    rng = np.random.default_rng(seed)
    e = make_env("g1_walk_flat", 2 * PAIRS, 1, seed=seed)
    e.noise = False
    e.reset()
    q = np.tile(STAND, (PAIRS, 1))
    q[:, :2] += rng.uniform(-1, 1, (PAIRS, 2))
    q[:, 7:] += rng.uniform(-0.15, 0.15, (PAIRS, 29))
    axis = rng.normal(size=(PAIRS, 3))
    axis /= np.linalg.norm(axis, axis=1, keepdims=True)
    half = rng.uniform(0, 0.1, (PAIRS, 1))
    q[:, 3:7] = np.concatenate([np.cos(half), np.sin(half) * axis], axis=1)
    v = rng.normal(0, 0.3, (PAIRS, 35))
    mq, mv = _mirror_state(q, v)
    e.set_state(np.concatenate([q, mq]), np.concatenate([v, mv]))
    # A joint's partner takes its gains (the map's permutation, without the signs).
    for name, col in (("kp", 1), ("kd", 2)):
        gains = getattr(e, name)
        gains[PAIRS:] = gains[:PAIRS][:, JOINT_INDEX]
        e._bias[:, :, col] = -gains
    e._gain[:, :, 0] = e.kp
    phase = rng.uniform(0, 2 * np.pi, PAIRS)
    e.phase[:PAIRS] = np.stack([phase, (phase + np.pi) % (2 * np.pi)], axis=1)
    e.phase[PAIRS:] = e.phase[:PAIRS, ::-1]
    cmd = rng.uniform(-1, 1, (PAIRS, 3))
    e.set_commands(np.concatenate([cmd, cmd * (1.0, -1.0, -1.0)]))
    return e, rng


def test_the_maps_are_their_own_inverse_sized_to_the_task_and_fix_the_stand_pose():
    """Mirroring twice gives the input back; the maps span the task's sizes; the stand pose is its own mirror image."""
    spec = task_spec("g1_walk_flat")
    x = np.random.default_rng(0).normal(size=(4, spec.critic_dim))
    for m, dim in ((MIRROR.obs, spec.obs_dim), (MIRROR.critic, spec.critic_dim), (MIRROR.actions, spec.act_dim)):
        assert len(m.index) == dim
        np.testing.assert_array_equal(m.apply(m.apply(x[:, :dim])), x[:, :dim])
    np.testing.assert_allclose(MIRROR.actions.apply(STAND[7:]), STAND[7:], atol=1e-12)
    assert [f"{j}_joint" for j in G1_JOINTS] == [walk_model.build_model().joint(i).name for i in range(1, 30)]


def test_a_mirrored_state_observes_as_the_mirror_image():
    """Before any step the mirrored rows' actor and critic observations (phases swapped) equal the mapped originals."""
    e, _ = _mirrored_pairs(seed=1)
    obs, critic = e.observe()
    np.testing.assert_allclose(obs[PAIRS:], MIRROR.obs.apply(obs[:PAIRS]), atol=1e-6)
    np.testing.assert_allclose(critic[PAIRS:], MIRROR.critic.apply(critic[:PAIRS]), atol=1e-6)
    e.close()


def test_mirrored_actions_step_to_the_mirrored_observations_and_the_same_rewards():
    """Over 3 steps with random actions the mirrored rows track the mapped originals (median entry error < 1e-3,
    98% within 0.25) and earn the same rewards, feet_phase included, to 1e-3; the phases stay swapped exactly."""
    e, rng = _mirrored_pairs(seed=2)
    for _ in range(3):
        a = rng.uniform(-1, 1, (PAIRS, 29))
        res = e.step(np.concatenate([a, MIRROR.actions.apply(a)]).astype(np.float32))
        assert not res.terminated.any()
        obs, critic = e.observe()
        for x, m in ((obs, MIRROR.obs), (critic, MIRROR.critic)):
            err = np.abs(x[PAIRS:] - m.apply(x[:PAIRS]))
            assert np.median(err) < 1e-3 and np.quantile(err, 0.98) < 0.25, (np.median(err), np.quantile(err, 0.98))
        np.testing.assert_allclose(res.rewards[PAIRS:], res.rewards[:PAIRS], atol=1e-3)
        np.testing.assert_allclose(res.terms["feet_phase"][PAIRS:], res.terms["feet_phase"][:PAIRS], atol=1e-3)
        np.testing.assert_array_equal(e.phase[PAIRS:], e.phase[:PAIRS, ::-1])
    e.close()


def test_a_wrong_phase_map_breaks_the_foot_reward():
    """Without swapping the phases the mirrored rows' feet_phase differs: the swap is what makes the image exact."""
    e, rng = _mirrored_pairs(seed=3)
    e.phase[PAIRS:] = e.phase[:PAIRS]  # the mirror image with the phases not swapped
    a = rng.uniform(-1, 1, (PAIRS, 29))
    res = e.step(np.concatenate([a, MIRROR.actions.apply(a)]).astype(np.float32))
    assert np.abs(res.terms["feet_phase"][PAIRS:] - res.terms["feet_phase"][:PAIRS]).max() > 1e-3
    e.close()
