"""A collector's end of the multi-host transport (ZeroMQ).

The collector's main thread steps physics; a link thread owns the sockets (ZeroMQ
sockets are single-threaded): it says hello, sends rollouts zero-copy, takes
credits and weights, exchanges heartbeats, and when the learner goes silent it
drops the connection (discarding unsent rollouts) and says hello again, with
ZeroMQ's reconnect back-off, until a learner answers on the same address.

The main thread sees the same API as the shared-memory transport: acquire a
buffer, fill it, commit it; read the newest weights.
"""

from __future__ import annotations

import contextlib
import os
import queue
import random
import threading
import time

import numpy as np
import zmq

from common.logging import get_logger
from common.rollout_spec import RolloutSpec, allocate
from common.transport.curve import ClientKeys
from common.transport.endpoints import weights_endpoint
from common.transport.interface import RolloutBuffer
from common.transport.wire import WireError, decode_control, encode_control, encode_rollout

log = get_logger("zmq")
LEARNER_KINDS = {"welcome", "credit", "heartbeat", "reset", "refused", "weights"}


class CollectorZmq:
    """A collector's end of the ZeroMQ transport (DEALER + SUB on a link thread); implements CollectorTransport."""

    def __init__(self, learner: str, spec: RolloutSpec, name: str, num_weights: int, max_in_flight: int,
                 heartbeat_s: float, peer_timeout_s: float, curve: ClientKeys | None = None):
        self.spec = spec
        self.name = name
        self.learner = learner
        self.num_weights = num_weights
        self.heartbeat_s = heartbeat_s
        self.peer_timeout_s = peer_timeout_s
        self.curve = curve
        self.buffers = [RolloutBuffer(i, allocate(spec)) for i in range(max_in_flight)]
        self.fatal: str | None = None
        self.connected = threading.Event()
        self._cond = threading.Condition()
        self._free = list(range(max_in_flight))
        self._in_flight: list[int] = []
        self._held: set[int] = set()  # acquired by the main thread, not yet committed
        self._outbox: queue.SimpleQueue = queue.SimpleQueue()
        # A pipe the link thread polls beside its sockets, so a commit is sent at once.
        self._wake_r, self._wake_w = os.pipe()
        os.set_blocking(self._wake_r, False)
        self.weights_received_at = 0.0  # perf_counter() when the newest weights arrived
        self._weights: tuple[int, np.ndarray] | None = None
        self._weights_serial = 0  # bumps on every new weights message
        self._taken_serial = 0
        self._session: int | None = None
        self._stop = threading.Event()
        self.ctx = zmq.Context()
        self.sub: zmq.Socket | None = None
        self.dealer: zmq.Socket | None = None
        self._thread = threading.Thread(target=self._run, name="appo-link", daemon=True)
        self._thread.start()

    def _socket(self, kind: int) -> zmq.Socket:
        s = self.ctx.socket(kind)
        s.setsockopt(zmq.LINGER, 0)
        s.setsockopt(zmq.RECONNECT_IVL, 100)
        s.setsockopt(zmq.RECONNECT_IVL_MAX, 5000)  # exponential back-off up to 5 s
        if self.curve is not None:
            s.curve_secretkey = self.curve.secret
            s.curve_publickey = self.curve.public
            s.curve_serverkey = self.curve.server_public
        return s

    # ------------------------------------------------------------ main-thread API

    def acquire(self, timeout: float) -> RolloutBuffer | None:
        deadline = time.monotonic() + timeout
        with self._cond:
            while not (self._free and self.connected.is_set()):
                remaining = deadline - time.monotonic()
                if remaining <= 0 or self._stop.is_set():
                    return None
                self._cond.wait(remaining)
            index = self._free.pop(0)
            self._held.add(index)
            return self.buffers[index]

    def commit(self, buf: RolloutBuffer, seq: int, policy_version: int, stats: dict) -> None:
        frames = encode_rollout(self.spec, self.name, seq, policy_version, stats, buf.arrays)
        with self._cond:
            self._held.discard(buf.index)
            self._in_flight.append(buf.index)
            self._outbox.put(frames)
        os.write(self._wake_w, b"x")

    def read_weights(self, have_version: int) -> tuple[int, np.ndarray] | None:
        """The newest weights if any arrived since the last call (versions restart with a new learner)."""
        with self._cond:
            if self._weights is None or self._weights_serial == self._taken_serial:
                return None
            self._taken_serial = self._weights_serial
            return self._weights

    def stop_requested(self) -> bool:
        return self.fatal is not None

    def learner_alive(self) -> bool:
        return True  # a learner may come back on the same address; keep retrying

    def close(self) -> None:
        self._stop.set()
        with self._cond:
            self._cond.notify_all()
        self._thread.join(timeout=5)
        for s in (self.dealer, self.sub):
            if s is not None:
                s.close(linger=0)
        self.ctx.term()
        os.close(self._wake_r)
        os.close(self._wake_w)

    # ------------------------------------------------------------ link thread

    def _connect(self) -> None:
        # Both connections anew: after a partition the old weights connection can stay silent for as long as
        # TCP's retransmission back-off (tens of seconds), while the learner waits for rollouts made with
        # weights it will only send again after an update.
        if self.sub is not None:
            self.sub.close(linger=0)
        self.sub = self._socket(zmq.SUB)
        self.sub.setsockopt(zmq.SUBSCRIBE, b"")
        self.sub.setsockopt(zmq.RCVHWM, 4)
        self.sub.connect(weights_endpoint(self.learner))
        if self.dealer is not None:
            # linger 0: unsent rollouts of the old connection are dropped, so their buffers are ours again.
            self.dealer.close(linger=0)
        self.connected.clear()
        self._session = None
        with self._cond:
            self._free = [i for i in range(len(self.buffers)) if i not in self._held]
            self._in_flight.clear()
            while not self._outbox.empty():
                self._outbox.get_nowait()
        self.dealer = self._socket(zmq.DEALER)
        self.dealer.setsockopt(zmq.ROUTING_ID, f"{self.name}/{random.getrandbits(32):08x}".encode())
        self.dealer.setsockopt(zmq.SNDHWM, len(self.buffers) + 8)
        self.dealer.connect(self.learner)
        self.dealer.send(encode_control("hello", {
            "name": self.name, "task": self.spec.task, "spec_hash": self.spec.spec_hash(),
        }))
        self._last_heard = time.monotonic()

    def _run(self) -> None:
        self._connect()
        last_beat = 0.0
        poller = sockets = None
        while not self._stop.is_set():
            if sockets != (self.sub, self.dealer):  # a reconnect replaced them
                sockets = (self.sub, self.dealer)
                poller = zmq.Poller()
                for s in (*sockets, self._wake_r):
                    poller.register(s, zmq.POLLIN)
            for sock, _ in poller.poll(50):
                if sockets != (self.sub, self.dealer):
                    break  # a reset replaced the sockets: this poll's other events are of closed ones
                if sock == self._wake_r:
                    while True:
                        try:
                            if not os.read(self._wake_r, 4096):
                                break
                        except BlockingIOError:
                            break
                else:
                    self._drain(sock)
            self._flush_outbox()
            now = time.monotonic()
            if now - last_beat >= self.heartbeat_s:
                last_beat = now
                self._send_nowait(encode_control("heartbeat", {}))
            if now - self._last_heard > self.peer_timeout_s:
                log.warning("learner silent; reconnecting", learner=self.learner,
                            silent_s=round(now - self._last_heard, 1))
                self._connect()
        # A goodbye the learner may never get: it drops silent peers anyway.
        with contextlib.suppress(zmq.ZMQError):
            self.dealer.send(encode_control("bye", {}), zmq.NOBLOCK)

    def _send_nowait(self, frame: bytes) -> None:
        # A full queue drops the frame: heartbeats are resent every period.
        with contextlib.suppress(zmq.Again):
            self.dealer.send(frame, zmq.NOBLOCK)

    def _flush_outbox(self) -> None:
        while not self._outbox.empty():
            frames = self._outbox.get_nowait()
            self.dealer.send_multipart(frames, copy=False)

    def _drain(self, sock: zmq.Socket) -> None:
        for _ in range(64):
            try:
                frames = sock.recv_multipart(zmq.NOBLOCK)
            except zmq.Again:
                return
            try:
                msg = decode_control(frames[0], LEARNER_KINDS)
            except WireError as exc:
                log.warning("bad message from learner", reason=exc.reason)
                continue
            self._on_message(msg, frames, from_dealer=sock is self.dealer)
            if sock is not self.dealer and sock is not self.sub:
                return  # a reset replaced (and closed) the sockets

    def _on_message(self, msg: dict, frames: list, from_dealer: bool) -> None:
        kind = msg["kind"]
        if from_dealer:
            self._last_heard = time.monotonic()
        if kind == "weights":
            self._on_weights(msg, frames)
            return
        if not from_dealer:
            return
        if kind == "welcome":
            self._session = msg.get("session")
            self.connected.set()
            with self._cond:
                self._cond.notify_all()
            log.info("connected to learner", learner=self.learner)
        elif kind == "credit" and msg.get("session") == self._session:
            with self._cond:
                if self._in_flight:
                    self._free.append(self._in_flight.pop(0))
                    self._cond.notify_all()
        elif kind == "reset":
            log.info("learner does not know this collector (restarted?); saying hello again")
            self._connect()
        elif kind == "refused":
            self.fatal = str(msg.get("reason", "refused by the learner"))
            log.error("learner refused this collector", reason=self.fatal)
            self._stop.set()
            with self._cond:
                self._cond.notify_all()

    def _on_weights(self, msg: dict, frames: list) -> None:
        if len(frames) != 2 or msg.get("n") != self.num_weights or len(frames[1]) != 4 * self.num_weights:
            log.warning("weights of the wrong size ignored", n=msg.get("n"), expected=self.num_weights)
            return
        version = int(msg.get("version", -1))
        with self._cond:
            current = self._weights[0] if self._weights else -1
            if msg.get("session") != getattr(self, "_weights_session", None) or version > current:
                self._weights_session = msg.get("session")
                self._weights = (version, np.frombuffer(frames[1], dtype="<f4").copy())
                self._weights_serial += 1
                self.weights_received_at = time.perf_counter()
