"""Shared-memory transport: data and metadata arrive intact, buffers cycle, weights are consistent.

Bad input is refused.
"""

import os
import subprocess
import sys
import time

import numpy as np
import pytest

from common.rollout_spec import RolloutSpec
from common.transport.shm import MSG, CollectorShm, LearnerShm, sweep_stale

SPEC = RolloutSpec("t", num_envs=8, steps=5, obs_dim=4, critic_dim=6, act_dim=2)


def _poll_until(learner: LearnerShm, count: int, deadline_s: float = 5.0) -> list:
    out = []
    deadline = time.monotonic() + deadline_s
    while len(out) < count and time.monotonic() < deadline:
        out += learner.poll(timeout=0.05)
    return out


@pytest.fixture
def learner(tmp_path):
    lt = LearnerShm(tmp_path, "run1", SPEC, num_weights=10)
    yield lt
    lt.close()


def _fill(buf, value: float) -> None:
    for a in buf.arrays.values():
        a[...] = value


def test_rollout_arrives_with_data_and_metadata(learner):
    """A committed buffer reaches the learner with its arrays, seq, policy version and stats."""
    col = CollectorShm(learner.run_dir, 3, SPEC)
    buf = col.acquire(0.1)
    _fill(buf, 1.5)
    buf.arrays["rewards"][2, 4] = -7.0
    col.commit(buf, seq=11, policy_version=4, stats={"episodes": 2, "return_mean": 3.0})
    (arr,) = _poll_until(learner, 1)
    assert (arr.collector, arr.seq, arr.policy_version) == ("local-3", 11, 4)
    assert arr.stats == {"episodes": 2, "return_mean": 3.0}
    assert arr.arrays["obs"].shape == (8, 5, 4) and (arr.arrays["obs"] == 1.5).all()
    assert arr.arrays["rewards"][2, 4] == -7.0
    arr.release()
    col.close()


def test_buffers_come_back_only_after_release(learner):
    """With both buffers in flight the collector waits (back-pressure) until the learner releases one."""
    col = CollectorShm(learner.run_dir, 0, SPEC, buffers=2)
    for seq in range(2):
        b = col.acquire(0.1)
        _fill(b, seq)
        col.commit(b, seq, 0, {})
    assert col.acquire(0.05) is None
    arrivals = _poll_until(learner, 2)
    assert [a.seq for a in arrivals] == [0, 1]
    arrivals[1].release()
    again = col.acquire(1.0)
    assert again is not None and again.index == 1
    col.close()


def test_new_buffers_are_poisoned(learner):
    """A collector's buffers start as NaN so unwritten fields stand out."""
    col = CollectorShm(learner.run_dir, 0, SPEC)
    assert all(np.isnan(a).all() for b in col.buffers for a in b.arrays.values())
    col.close()


def test_weights_seqlock_publish_and_read(learner):
    """Collectors read the newest version exactly once and get a private copy."""
    col = CollectorShm(learner.run_dir, 0, SPEC)
    assert col.read_weights(-1) is None  # nothing published yet
    learner.publish_weights(0, np.arange(10, dtype=np.float32))
    version, w = col.read_weights(-1)
    assert version == 0 and (w == np.arange(10)).all()
    assert col.read_weights(0) is None
    learner.publish_weights(1, np.full(10, 2.0, np.float32))
    w[:] = 99  # a copy: does not touch shared memory
    version, w2 = col.read_weights(0)
    assert version == 1 and (w2 == 2.0).all()
    col.close()


def test_stop_flag_reaches_collectors(learner):
    """request_stop is visible to collectors through the weights board."""
    col = CollectorShm(learner.run_dir, 0, SPEC)
    learner.publish_weights(0, np.zeros(10, np.float32))
    assert not col.stop_requested()
    learner.request_stop()
    assert col.stop_requested()
    col.close()


def test_collector_with_other_spec_is_refused(learner):
    """A sender built for another layout never reaches the learner; it is counted."""
    other = RolloutSpec("t", num_envs=9, steps=5, obs_dim=4, critic_dim=6, act_dim=2)
    col = CollectorShm(learner.run_dir, 1, other)
    b = col.acquire(0.1)
    col.commit(b, 0, 0, {})
    assert _poll_until(learner, 1, 0.5) == []
    assert learner.refused.get("spec_mismatch", 0) >= 1
    col.close()


def test_garbage_on_ready_fifo_is_refused(learner):
    """Wrong nonces, bad indices and partial messages are counted and ignored."""
    col = CollectorShm(learner.run_dir, 0, SPEC)
    learner.poll(0.01)  # attach
    fd = os.open(learner.run_dir / "c0.ready", os.O_WRONLY | os.O_NONBLOCK)
    os.write(fd, MSG.pack(col.nonce ^ 1, 0) + MSG.pack(col.nonce, 7) + b"\x01\x02\x03")
    os.close(fd)
    assert _poll_until(learner, 1, 0.5) == []
    assert learner.refused["stale_or_bad_index"] == 2
    b = col.acquire(0.1)
    col.commit(b, 5, 0, {})  # the channel still works
    assert [a.seq for a in _poll_until(learner, 1)] == [5]
    col.close()


def test_corrupt_header_is_refused_and_buffer_returned(learner):
    """A buffer whose header was overwritten is refused and handed back to the collector."""
    col = CollectorShm(learner.run_dir, 0, SPEC, buffers=1)
    b = col.acquire(0.1)
    col.commit(b, 0, 0, {})
    col._mm[0:8] = b"\xff" * 8  # magic destroyed after commit
    assert _poll_until(learner, 1, 0.5) == []
    assert learner.refused["bad_header"] == 1
    assert col.acquire(1.0) is not None
    col.close()


def test_restarted_collector_replaces_its_predecessor(learner):
    """A new incarnation with the same id is attached; messages of the old one are ignored."""
    old = CollectorShm(learner.run_dir, 0, SPEC)
    b = old.acquire(0.1)
    old.commit(b, 1, 0, {})
    new = CollectorShm(learner.run_dir, 0, SPEC)
    time.sleep(0.3)  # let the learner's rescan interval pass so it sees the new hello
    b = new.acquire(0.1)
    new.commit(b, 2, 0, {})
    seqs = [a.seq for a in _poll_until(learner, 1)]
    assert seqs == [2]
    new.close()


def test_rollout_from_another_process(learner):
    """A real second process fills and commits a buffer; the learner reads its values."""
    code = (
        "import sys; from common.rollout_spec import RolloutSpec; from common.transport.shm import CollectorShm\n"
        "spec = RolloutSpec('t', 8, 5, 4, 6, 2)\n"
        "c = CollectorShm(sys.argv[1], 2, spec, buffers=1)\n"
        "b = c.acquire(1)\n"
        "[a.fill(4.25) for a in b.arrays.values()]\n"
        "c.commit(b, 9, 3, {'episodes': 0})\n"
        "import time; t = time.monotonic()\n"
        "while c.acquire(0.1) is None and time.monotonic() - t < 10: pass\n"
    )
    proc = subprocess.Popen([sys.executable, "-c", code, str(learner.run_dir)])
    (arr,) = _poll_until(learner, 1, 15)
    assert arr.collector == "local-2" and arr.seq == 9 and (arr.arrays["last_critic"] == 4.25).all()
    arr.release()
    assert proc.wait(timeout=15) == 0


def test_stale_run_dirs_are_swept(tmp_path):
    """Directories of dead learners are removed at start; a live learner's stays."""
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    (tmp_path / "appo-old").mkdir()
    (tmp_path / "appo-old" / "owner.pid").write_text(str(dead.pid))
    (tmp_path / "appo-live").mkdir()
    (tmp_path / "appo-live" / "owner.pid").write_text(str(os.getppid()))  # another live process
    (tmp_path / "appo-mine").mkdir()
    (tmp_path / "appo-mine" / "owner.pid").write_text(str(os.getpid()))  # a predecessor with our pid (containers)
    (tmp_path / "appo-new").mkdir()  # being created right now: no owner.pid yet
    removed = sweep_stale(tmp_path)
    assert sorted(p.name for p in removed) == ["appo-mine", "appo-old"]
    assert (tmp_path / "appo-live").exists() and (tmp_path / "appo-new").exists()


def test_close_removes_run_dir(tmp_path):
    """Closing the learner end leaves nothing behind."""
    lt = LearnerShm(tmp_path, "gone", SPEC, 4)
    col = CollectorShm(lt.run_dir, 0, SPEC)
    col.close()
    lt.close()
    assert list(tmp_path.iterdir()) == []


def test_joining_a_non_run_directory_fails_clearly(tmp_path):
    """A collector pointed at the wrong directory gets an error naming it."""
    from common.transport.interface import TransportError

    with pytest.raises(TransportError, match=str(tmp_path)):
        CollectorShm(tmp_path, 0, SPEC)
