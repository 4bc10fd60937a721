"""Ring semantics: ordering, wrap-around, drain-all-ready, intake limit, capacity (back-pressure), no torn reads."""

import threading

import numpy as np
import pytest

from common.rollout_spec import RolloutSpec
from learner.ring import Ring, SlotMeta, SlotState

SPEC = RolloutSpec("t", num_envs=4, steps=3, obs_dim=5, critic_dim=6, act_dim=2)


def _write(ring: Ring, value: float, seq: int) -> int:
    slot = ring.claim(timeout=1.0)
    for a in ring.slot_arrays(slot).values():
        a.fill(value)
    ring.publish(slot, SlotMeta(collector="c", seq=seq, policy_version=seq, stats={}))
    return slot


def test_new_ring_is_poisoned():
    """Unwritten slots hold NaN so reading one by mistake is visible."""
    ring = Ring(SPEC, 4, pin=False)
    assert all(np.isnan(a).all() for a in ring.arrays.values())


def test_ready_slots_come_out_in_publish_order():
    """take_ready returns slots in the order they became ready, not slot-index order."""
    ring = Ring(SPEC, 4, pin=False)
    a, b, c = ring.claim(0), ring.claim(0), ring.claim(0)
    for s in (c, a, b):
        ring.publish(s, SlotMeta("c", s, 0, {}))
    assert ring.take_ready(0.1) == [c, a, b]


def test_take_ready_drains_all_ready_slots():
    """One take_ready returns every ready slot; the next one waits and returns nothing."""
    ring = Ring(SPEC, 4, pin=False)
    slots = [_write(ring, i, i) for i in range(3)]
    assert ring.take_ready(0.1) == slots
    assert ring.take_ready(0.05) == []
    assert [ring.states[s] for s in slots] == [SlotState.READING] * 3


def test_take_ready_limit_leaves_the_newest_ready():
    """With a limit, take_ready returns the oldest ready slots; the rest come out on the next call, in order."""
    ring = Ring(SPEC, 4, pin=False)
    slots = [_write(ring, i, i) for i in range(4)]
    assert ring.take_ready(0.1, limit=3) == slots[:3]
    assert ring.states[slots[3]] is SlotState.READY
    assert ring.take_ready(0.1, limit=3) == slots[3:]


def test_full_ring_blocks_writer_until_release():
    """With every slot busy claim times out (back-pressure, no overwrite); a release frees one."""
    ring = Ring(SPEC, 4, pin=False)
    for i in range(4):
        _write(ring, i, i)
    assert ring.claim(timeout=0.05) is None
    slots = ring.take_ready(0.1)
    assert ring.claim(timeout=0.05) is None  # READING slots are not free either
    ring.release(slots[0])
    assert ring.claim(timeout=0.05) == slots[0]


def test_wrap_around_keeps_data_and_metadata():
    """Many laps through a 4-slot ring: each read sees the value and seq written for it."""
    ring = Ring(SPEC, 4, pin=False)
    seen = []
    for seq in range(23):
        _write(ring, float(seq), seq)
        if seq % 3 == 2:
            for s in ring.take_ready(0.1):
                meta = ring.meta[s]
                assert all((a == meta.seq).all() for a in ring.slot_arrays(s).values())
                seen.append(meta.seq)
                ring.release(s)
    for s in ring.take_ready(0.1):
        seen.append(ring.meta[s].seq)
        ring.release(s)
    assert seen == list(range(23))


def test_reader_never_sees_half_written_slot():
    """A concurrent writer fills slots field by field; every slot the reader gets is complete."""
    spec = RolloutSpec("t", num_envs=256, steps=32, obs_dim=64, critic_dim=64, act_dim=12)
    ring = Ring(spec, 4, pin=False)
    total = 60
    errors = []

    def writer():
        for seq in range(total):
            slot = ring.claim(timeout=5)
            for a in ring.slot_arrays(slot).values():
                a.fill(seq)
            ring.publish(slot, SlotMeta("c", seq, 0, {}))

    t = threading.Thread(target=writer)
    t.start()
    got = 0
    while got < total:
        for s in ring.take_ready(5):
            seq = ring.meta[s].seq
            if not all((a == seq).all() for a in ring.slot_arrays(s).values()):
                errors.append(seq)
            got += 1
            ring.release(s)
    t.join()
    assert errors == []


def test_release_of_slot_not_being_read_is_an_error():
    """State machine violations are caught, not silently accepted."""
    ring = Ring(SPEC, 2, pin=False)
    slot = ring.claim(0)
    with pytest.raises(AssertionError):
        ring.release(slot)


def test_all_finite_is_exact_including_overflowing_sums():
    """The receiver's finite check refuses any NaN/Inf and accepts huge finite values whose sum overflows."""
    from learner.receiver import all_finite

    a = np.ones(1000, np.float32)
    assert all_finite(a)
    for bad in (np.nan, np.inf, -np.inf):
        b = a.copy()
        b[517] = bad
        assert not all_finite(b)
    huge = np.full(1000, 3e38, np.float32)  # finite elements, float32 sum overflows to inf
    assert all_finite(huge)
    mixed = np.array([np.inf, -np.inf], np.float32)  # sum is NaN
    assert not all_finite(mixed)
