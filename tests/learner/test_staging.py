"""Staging pool: capacity, oldest-first overwrite, time-major batch layout, unused-overwrite count, resume state."""

import torch

from common.rollout_spec import RolloutSpec
from learner.ring import Ring, SlotMeta
from learner.staging import StagingPool

SPEC = RolloutSpec("t", num_envs=3, steps=4, obs_dim=2, critic_dim=3, act_dim=1)


def _stage(pool: StagingPool, ring: Ring, value: float, seq: int) -> int:
    slot = ring.claim(0)
    arrays = ring.slot_arrays(slot)
    for a in arrays.values():
        a.fill(value)
    # obs encodes (env, t) so the layout can be checked: 100*value + 10*env + t
    n, t = SPEC.num_envs, SPEC.steps
    arrays["obs"][:] = (100 * value + 10 * torch.arange(n)[:, None] + torch.arange(t)[None, :]).numpy()[..., None]
    ring.publish(slot, SlotMeta("c", seq, seq, {}))
    (s,) = ring.take_ready(0.1)
    entry = pool.stage(ring, s)
    ring.release(s)
    return entry


def test_capacity_and_oldest_overwritten_first():
    """The pool holds replay_queue_size rollouts; the oldest entry is replaced first."""
    ring = Ring(SPEC, 4, pin=False)
    pool = StagingPool(SPEC, 3, torch.device("cpu"))
    entries = [_stage(pool, ring, v, v) for v in range(5)]
    assert entries == [0, 1, 2, 0, 1]
    assert pool.occupancy() == 3
    assert sorted(pool.policy_versions(pool.active())) == [2, 3, 4]


def test_batch_is_time_major_and_env_concatenated():
    """batch()['obs'][t, k*N + n] is entry k's obs[n, t]; last_obs is [K*N, dim]."""
    ring = Ring(SPEC, 4, pin=False)
    pool = StagingPool(SPEC, 3, torch.device("cpu"))
    for v in (1, 2):
        _stage(pool, ring, v, v)
    b = pool.batch()
    n, t = SPEC.num_envs, SPEC.steps
    assert b["obs"].shape == (t, 2 * n, SPEC.obs_dim)
    assert b["log_probs"].shape == (t, 2 * n)
    assert b["last_critic"].shape == (2 * n, SPEC.critic_dim)
    for k, v in enumerate((1, 2)):
        for env in range(n):
            for step in range(t):
                assert b["obs"][step, k * n + env, 0] == 100 * v + 10 * env + step


def test_overwriting_an_untrained_rollout_is_counted():
    """A rollout pushed out before any update used it counts as wasted; a used one does not."""
    ring = Ring(SPEC, 4, pin=False)
    pool = StagingPool(SPEC, 2, torch.device("cpu"))
    _stage(pool, ring, 0, 0)
    pool.mark_used(pool.active())
    _stage(pool, ring, 1, 1)
    _stage(pool, ring, 2, 2)  # overwrites entry 0 (used): not waste
    assert pool.overwritten_unused == 0
    _stage(pool, ring, 3, 3)  # overwrites entry 1 (never used): waste
    assert pool.overwritten_unused == 1


def test_trained_rollouts_counts_each_rollout_once():
    """Replaying a staged rollout in several updates counts it once as trained."""
    ring = Ring(SPEC, 4, pin=False)
    pool = StagingPool(SPEC, 3, torch.device("cpu"))
    _stage(pool, ring, 0, 0)
    pool.mark_used(pool.active())
    _stage(pool, ring, 1, 1)
    pool.mark_used(pool.active())
    pool.mark_used(pool.active())
    assert pool.trained_rollouts == 2


def test_saved_contents_load_into_a_pool_of_the_same_shape():
    """A pool's state loads into a new pool of the same shape: the same entries, batch and counters."""
    ring = Ring(SPEC, 4, pin=False)
    pool = StagingPool(SPEC, 3, torch.device("cpu"))
    for v in (1, 2):
        _stage(pool, ring, v, v)
    pool.mark_used(pool.active())
    again = StagingPool(SPEC, 3, torch.device("cpu"))
    again.load_state_dict(pool.state_dict())
    assert again.active() == pool.active() and again.trained_rollouts == pool.trained_rollouts == 2
    assert torch.equal(again.batch()["obs"], pool.batch()["obs"])


def test_a_pool_of_another_rollout_shape_or_size_starts_empty():
    """Resumed with other num_envs, steps_per_env or replay_queue_size: the pool starts empty, counters kept."""
    ring = Ring(SPEC, 4, pin=False)
    pool = StagingPool(SPEC, 3, torch.device("cpu"))
    for v in (1, 2):
        _stage(pool, ring, v, v)
    pool.mark_used(pool.active())
    state = pool.state_dict()
    for spec, size in ((RolloutSpec("t", num_envs=5, steps=4, obs_dim=2, critic_dim=3, act_dim=1), 3),
                       (RolloutSpec("t", num_envs=3, steps=6, obs_dim=2, critic_dim=3, act_dim=1), 3), (SPEC, 2)):
        other = StagingPool(spec, size, torch.device("cpu"))
        other.load_state_dict(state)
        assert other.occupancy() == 0 and other.active() == [] and other.trained_rollouts == 2
        assert other.tensors["obs"].shape == (size, spec.num_envs, spec.steps, spec.obs_dim)
