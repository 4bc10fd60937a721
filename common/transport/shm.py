"""Same-host transport: rollouts and weights through shared memory, no sockets on the data path.

One run directory under /dev/shm (`appo-<run>`) holds:

  owner.pid        the learner's pid: a directory whose owner is dead is stale and swept
  weights.bin      seqlock header + the flat weight vector (learner writes, collectors read)
  c<id>.json       a collector's hello: pid, incarnation nonce, rollout spec hash, buffer count
  c<id>.bin        that collector's rollout buffers (header + env-major arrays each)
  c<id>.ready      FIFO collector -> learner: "buffer b is filled"   (8-byte messages)
  c<id>.free       FIFO learner -> collector: "buffer b is yours again"

Only buffer indices cross the FIFOs (as Sample Factory passes slot indices, never
the data); the arrays stay in place until the learner copies them into its ring.
Messages carry the collector's incarnation nonce so a restarted collector never
acts on a message meant for its predecessor.
"""

from __future__ import annotations

import contextlib
import errno
import functools
import json
import mmap
import os
import random
import select
import shutil
import stat
import struct
import time
from dataclasses import dataclass
from pathlib import Path

import msgpack
import numpy as np

from common.rollout_spec import RolloutSpec, views
from common.transport.interface import Arrival, RolloutBuffer, TransportError

DIR_PREFIX = "appo-"
MSG = struct.Struct("<II")  # (incarnation nonce, buffer index)
# Rollout buffer header: magic, seq, policy version, spec hash, env steps, stats length.
BUF_HEADER = struct.Struct("<QqqqqQ")
BUF_MAGIC = 0x4F50_5041_5246_4255  # "UBFRAPPO"
HEADER_BYTES = 16384  # header struct + msgpack episode statistics
MAX_STATS_BYTES = HEADER_BYTES - BUF_HEADER.size
# Weights: seq (odd while writing), version, float count, stop flag.
WEIGHTS_HEADER = struct.Struct("<qqqq")
WEIGHTS_HEADER_BYTES = 64


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def sweep_stale(root: str | Path, min_age_s: float = 60.0) -> list[Path]:
    """Remove run directories whose learner is gone (killed runs leave them behind).

    A directory without a readable owner.pid is only removed once it is older than
    min_age_s: a learner that is creating it right now has not written the file yet.
    """
    removed = []
    root = Path(root)
    if not root.is_dir():
        return removed
    for d in root.glob(DIR_PREFIX + "*"):
        try:
            pid = int((d / "owner.pid").read_text())
        except (OSError, ValueError):
            pid = 0
            try:
                if time.time() - d.stat().st_mtime < min_age_s:
                    continue
            except OSError:
                continue
        # Our own pid can only be a predecessor's: in a container a restarted learner gets the same pid.
        if pid and pid != os.getpid() and pid_alive(pid):
            continue
        shutil.rmtree(d, ignore_errors=True)
        removed.append(d)
    return removed


def _mkfifo(path: Path) -> None:
    try:
        os.mkfifo(path, 0o600)
    except FileExistsError:
        if not stat.S_ISFIFO(path.stat().st_mode):
            raise TransportError(f"{path} exists and is not a FIFO") from None


def _open_fifo(path: Path) -> int:
    # O_RDWR: opening never blocks waiting for the other end, and the reader never sees EOF
    # when a peer restarts (Linux semantics).
    return os.open(path, os.O_RDWR | os.O_NONBLOCK)


def _drain(fd: int) -> bytes:
    chunks = []
    while True:
        try:
            chunk = os.read(fd, 65536)
        except BlockingIOError:
            break
        if not chunk:
            break
        chunks.append(chunk)
    return b"".join(chunks)


def _map_file(path: Path, size: int, create: bool) -> tuple[mmap.mmap, int]:
    flags = os.O_RDWR | (os.O_CREAT | os.O_TRUNC if create else 0)
    fd = os.open(path, flags, 0o600)
    try:
        if create:
            os.ftruncate(fd, size)
        elif os.fstat(fd).st_size < size:
            raise TransportError(f"{path} is {os.fstat(fd).st_size} bytes, expected {size}")
        return mmap.mmap(fd, size), size
    finally:
        os.close(fd)


def _buffer_stride(spec: RolloutSpec) -> int:
    return HEADER_BYTES + spec.nbytes()


# ---------------------------------------------------------------- weights (seqlock)


class WeightsBoard:
    """The learner's current weights in shared memory, read lock-free with a sequence counter."""

    def __init__(self, path: Path, num_floats: int, create: bool):
        self._mm, _ = _map_file(path, WEIGHTS_HEADER_BYTES + 4 * num_floats, create)
        self._header = np.frombuffer(self._mm, dtype="<i8", count=4)
        self._data = np.frombuffer(self._mm, dtype="<f4", count=num_floats, offset=WEIGHTS_HEADER_BYTES)
        self.num_floats = num_floats
        if create:
            self._header[:] = (0, -1, num_floats, 0)

    def publish(self, version: int, flat: np.ndarray) -> None:
        h = self._header
        h[0] += 1  # odd: readers retry
        self._data[:] = flat
        h[1] = version
        h[0] += 1

    def read(self, have_version: int) -> tuple[int, np.ndarray] | None:
        """(version, weights copy) if a version newer than have_version is published, else None."""
        h = self._header
        for _ in range(100):
            seq = int(h[0])
            version = int(h[1])
            if version <= have_version:
                return None
            if seq % 2:
                time.sleep(0.0005)
                continue
            data = self._data.copy()
            if int(h[0]) == seq:
                return version, data
        return None

    @property
    def version(self) -> int:
        return int(self._header[1])

    def set_stop(self) -> None:
        self._header[3] = 1

    @property
    def stop_requested(self) -> bool:
        return bool(self._header[3])

    def close(self) -> None:
        del self._header, self._data
        self._mm.close()


# ---------------------------------------------------------------- collector side


class CollectorShm:
    """A collector's end of the shared-memory transport; implements CollectorTransport."""

    def __init__(self, run_dir: str | Path, collector_id: int, spec: RolloutSpec, buffers: int = 2):
        self.run_dir = Path(run_dir)
        self.collector_id = collector_id
        self.spec = spec
        if not (self.run_dir / "owner.pid").is_file():
            raise TransportError(f"{self.run_dir} is not an APPO shared-memory run directory")
        self.learner_pid = int((self.run_dir / "owner.pid").read_text())
        stem = self.run_dir / f"c{collector_id}"
        self._paths = {k: Path(f"{stem}.{k}") for k in ("json", "bin", "ready", "free")}
        self.nonce = random.getrandbits(32)
        stride = _buffer_stride(spec)
        self._paths["bin"].unlink(missing_ok=True)  # a predecessor's mapping stays on its own inode
        self._mm, _ = _map_file(self._paths["bin"], stride * buffers, create=True)
        self.buffers = [
            RolloutBuffer(b, views(spec, self._mm, b * stride + HEADER_BYTES)) for b in range(buffers)
        ]
        for arrays in (b.arrays for b in self.buffers):
            for a in arrays.values():
                a.fill(np.nan)  # poison: unwritten data stands out
        _mkfifo(self._paths["ready"])
        _mkfifo(self._paths["free"])
        self._ready_fd = _open_fifo(self._paths["ready"])
        self._free_fd = _open_fifo(self._paths["free"])
        _drain(self._free_fd)
        self._owned = list(range(buffers))
        self._weights: WeightsBoard | None = None
        self._write_hello(buffers)

    def _write_hello(self, buffers: int) -> None:
        hello = {
            "pid": os.getpid(),
            "nonce": self.nonce,
            "spec_hash": self.spec.spec_hash(),
            "buffers": buffers,
            "num_envs": self.spec.num_envs,
            "steps": self.spec.steps,
        }
        tmp = self._paths["json"].with_suffix(".json.tmp")
        tmp.write_text(json.dumps(hello))
        os.replace(tmp, self._paths["json"])

    def learner_alive(self) -> bool:
        return pid_alive(self.learner_pid) and (self.run_dir / "owner.pid").is_file()

    def _board(self) -> WeightsBoard | None:
        if self._weights is None:
            path = self.run_dir / "weights.bin"
            try:
                with open(path, "rb") as f:
                    head = f.read(WEIGHTS_HEADER.size)
            except FileNotFoundError:
                return None
            if len(head) < WEIGHTS_HEADER.size:
                return None
            num_floats = WEIGHTS_HEADER.unpack(head)[2]
            self._weights = WeightsBoard(path, num_floats, create=False)
        return self._weights

    def stop_requested(self) -> bool:
        board = self._board()
        return bool(board and board.stop_requested)

    def read_weights(self, have_version: int) -> tuple[int, np.ndarray] | None:
        board = self._board()
        return board.read(have_version) if board else None

    def acquire(self, timeout: float) -> RolloutBuffer | None:
        """A free buffer, or None if none came back from the learner within timeout."""
        if not self._owned:
            ready, _, _ = select.select([self._free_fd], [], [], timeout)
            if ready:
                data = _drain(self._free_fd)
                for off in range(0, len(data) - len(data) % MSG.size, MSG.size):
                    nonce, b = MSG.unpack_from(data, off)
                    if nonce == self.nonce and 0 <= b < len(self.buffers) and b not in self._owned:
                        self._owned.append(b)
        return self.buffers[self._owned.pop(0)] if self._owned else None

    def commit(self, buf: RolloutBuffer, seq: int, policy_version: int, stats: dict) -> None:
        payload = msgpack.packb(stats, use_bin_type=True)
        if len(payload) > MAX_STATS_BYTES:
            raise TransportError(f"episode statistics are {len(payload)} bytes, at most {MAX_STATS_BYTES} fit")
        base = buf.index * _buffer_stride(self.spec)
        self._mm[base + BUF_HEADER.size : base + BUF_HEADER.size + len(payload)] = payload
        BUF_HEADER.pack_into(
            self._mm, base, BUF_MAGIC, seq, policy_version, self.spec.spec_hash(), self.spec.env_steps, len(payload)
        )
        os.write(self._ready_fd, MSG.pack(self.nonce, buf.index))

    def close(self) -> None:
        for fd in (self._ready_fd, self._free_fd):
            os.close(fd)
        if self._weights:
            self._weights.close()
        self.buffers = []
        # Views still referenced by the caller block the close; the mapping then goes with the process.
        with contextlib.suppress(BufferError):
            self._mm.close()
        for key in ("json", "bin"):
            self._paths[key].unlink(missing_ok=True)


# ---------------------------------------------------------------- learner side


@dataclass
class _Channel:
    """The learner's view of one attached collector: its pid, nonce, mapped buffers and FIFOs."""

    collector_id: int
    pid: int
    nonce: int
    mm: mmap.mmap
    buffers: list[dict[str, np.ndarray]]
    ready_fd: int
    free_fd: int
    hello_mtime: float

    def close(self) -> None:
        for fd in (self.ready_fd, self.free_fd):
            os.close(fd)
        self.buffers = []
        # An Arrival still holding views blocks the close; the mapping is freed when it is dropped.
        with contextlib.suppress(BufferError):
            self.mm.close()


class LearnerShm:
    """The learner's end of the shared-memory transport; implements LearnerTransport.

    It creates the run directory, publishes weights and collects filled buffers.
    """

    def __init__(self, root: str | Path, run_id: str, spec: RolloutSpec, num_weights: int):
        self.spec = spec
        sweep_stale(root)
        self.run_dir = Path(root) / f"{DIR_PREFIX}{run_id}"
        self.run_dir.mkdir(parents=True, exist_ok=False)
        (self.run_dir / "owner.pid").write_text(str(os.getpid()))
        self.weights = WeightsBoard(self.run_dir / "weights.bin", num_weights, create=True)
        self._channels: dict[int, _Channel] = {}
        self._last_scan = 0.0
        self.refused: dict[str, int] = {}

    # -- collectors

    def _scan(self) -> None:
        """Pick up new or restarted collectors, drop ones that exited or died."""
        self._last_scan = time.monotonic()
        seen = set()
        for hello_path in self.run_dir.glob("c*.json"):
            try:
                cid = int(hello_path.stem[1:])
                mtime = hello_path.stat().st_mtime
                hello = json.loads(hello_path.read_text())
            except (ValueError, OSError):
                continue
            seen.add(cid)
            ch = self._channels.get(cid)
            if ch and ch.nonce == hello.get("nonce") and pid_alive(ch.pid):
                continue
            if ch:
                self._drop(cid)
            if not pid_alive(int(hello.get("pid", 0))):
                continue
            if hello.get("spec_hash") != self.spec.spec_hash():
                self._refuse("spec_mismatch")
                continue
            self._attach(cid, hello, mtime)
        for cid in [c for c in self._channels if c not in seen or not pid_alive(self._channels[c].pid)]:
            self._drop(cid)

    def _attach(self, cid: int, hello: dict, mtime: float) -> None:
        stem = self.run_dir / f"c{cid}"
        n = int(hello["buffers"])
        stride = _buffer_stride(self.spec)
        try:
            mm, _ = _map_file(Path(f"{stem}.bin"), stride * n, create=False)
        except (OSError, TransportError):
            self._refuse("bad_buffer_file")
            return
        bufs = [views(self.spec, mm, b * stride + HEADER_BYTES) for b in range(n)]
        ready_fd = _open_fifo(Path(f"{stem}.ready"))
        free_fd = _open_fifo(Path(f"{stem}.free"))
        self._channels[cid] = _Channel(cid, int(hello["pid"]), int(hello["nonce"]), mm, bufs, ready_fd, free_fd, mtime)

    def _drop(self, cid: int) -> None:
        ch = self._channels.pop(cid, None)
        if ch:
            ch.close()

    def collectors(self) -> dict[int, dict]:
        """collector id -> {name, pid} of the collectors attached now."""
        return {cid: {"name": f"local-{cid}", "pid": ch.pid} for cid, ch in self._channels.items()}

    def _refuse(self, reason: str) -> None:
        self.refused[reason] = self.refused.get(reason, 0) + 1

    # -- data path

    def poll(self, timeout: float) -> list[Arrival]:
        """Filled buffers from any collector, waiting up to timeout for the first."""
        if time.monotonic() - self._last_scan > 0.25 or not self._channels:
            self._scan()
        by_fd = {ch.ready_fd: ch for ch in self._channels.values()}
        if not by_fd:
            time.sleep(min(timeout, 0.05))
            return []
        ready, _, _ = select.select(list(by_fd), [], [], timeout)
        arrivals = []
        for fd in ready:
            ch = by_fd[fd]
            data = _drain(fd)
            for off in range(0, len(data) - len(data) % MSG.size, MSG.size):
                nonce, b = MSG.unpack_from(data, off)
                if nonce != ch.nonce or not 0 <= b < len(ch.buffers):
                    self._refuse("stale_or_bad_index")
                    continue
                arrival = self._read_buffer(ch, b)
                if arrival:
                    arrivals.append(arrival)
        return arrivals

    def _read_buffer(self, ch: _Channel, b: int) -> Arrival | None:
        base = b * _buffer_stride(self.spec)
        magic, seq, version, spec_hash, env_steps, stats_len = BUF_HEADER.unpack_from(ch.mm, base)
        release = functools.partial(self._free, ch, b)
        if magic != BUF_MAGIC or spec_hash != self.spec.spec_hash() or env_steps != self.spec.env_steps:
            self._refuse("bad_header")
            release()
            return None
        if stats_len > MAX_STATS_BYTES:
            self._refuse("bad_stats")
            release()
            return None
        try:
            stats = msgpack.unpackb(bytes(ch.mm[base + BUF_HEADER.size : base + BUF_HEADER.size + stats_len]))
            if not isinstance(stats, dict):
                raise ValueError("stats is not a map")
        except (ValueError, msgpack.UnpackException):
            self._refuse("bad_stats")
            release()
            return None
        return Arrival(f"local-{ch.collector_id}", seq, version, ch.buffers[b], stats, release)

    def _free(self, ch: _Channel, b: int) -> None:
        if self._channels.get(ch.collector_id) is not ch:
            return  # that incarnation is gone
        try:
            os.write(ch.free_fd, MSG.pack(ch.nonce, b))
        except OSError as exc:
            if exc.errno not in (errno.EAGAIN, errno.EBADF):
                raise

    # -- weights and shutdown

    def publish_weights(self, version: int, flat: np.ndarray) -> None:
        self.weights.publish(version, flat)

    def request_stop(self) -> None:
        self.weights.set_stop()

    def close(self) -> None:
        for cid in list(self._channels):
            self._drop(cid)
        self.weights.close()
        shutil.rmtree(self.run_dir, ignore_errors=True)


def claim_collector_id(run_dir: str | Path, limit: int = 1024) -> tuple[int, int]:
    """The lowest collector id not held by a live collector, and the open lock fd that holds it.

    An flock is released by the kernel when its process dies, so a crashed
    collector's id is free again for its replacement (compose --scale, restarts).
    """
    import fcntl

    for i in range(limit):
        fd = os.open(Path(run_dir) / f"c{i}.lock", os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return i, fd
        except BlockingIOError:
            os.close(fd)
    raise TransportError(f"no free collector id below {limit} in {run_dir}")
