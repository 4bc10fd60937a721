"""The learner's end of the multi-host transport (ZeroMQ).

  ROUTER  transport.listen (port P)   collectors' DEALERs: hello, heartbeats, rollouts in;
                                      welcome, credits, heartbeats, weight snapshots out
  PUB     the same host, port P + 1   every new weight version, to every collector

Flow control is by credits: a collector starts with `max_in_flight` and gets one
back each time one of its rollouts has landed in the ring (or was refused), so
neither side ever queues more than that per collector and nothing goes stale in
a socket buffer.  A collector that connects late gets the current weights in its
welcome (the snapshot of the Clone pattern), before any rollout exists.

Floods are bounded: at most `max_peers` collectors are known at once (a new one
pushes out the stalest that never sent a rollout, else its hello is refused), and
at most `max_queued_per_peer` messages wait per connection each way.

`poll` and everything touching the ROUTER run on the receiver thread; only
`publish_weights` (PUB) runs on the learner's thread.
"""

from __future__ import annotations

import contextlib
import random
import threading
import time
from collections import Counter, OrderedDict
from dataclasses import dataclass

import numpy as np
import zmq

from common.logging import RateLimitedLog, get_logger
from common.rollout_spec import RolloutSpec
from common.transport.curve import ServerKeys
from common.transport.endpoints import weights_endpoint
from common.transport.interface import Arrival
from common.transport.wire import WireError, decode_control, decode_rollout, encode_control

log = get_logger("zmq")
CONTROL_KINDS = {"hello", "heartbeat", "bye"}


@dataclass
class Peer:
    """A collector the learner has welcomed: its id, name, socket identity, last contact and credits."""

    id: int
    name: str
    identity: bytes
    last_seen: float
    credits_out: int
    rollouts: int = 0
    sent_version: int = -1  # the newest weights sent to it directly (on hello, or to catch up)


class LearnerZmq:
    """The learner's end of the ZeroMQ transport (ROUTER for rollouts, PUB for weights); implements LearnerTransport."""

    def __init__(self, listen: str, spec: RolloutSpec, num_weights: int, max_in_flight: int,
                 heartbeat_s: float, peer_timeout_s: float, curve: ServerKeys | None = None,
                 max_peers: int = 1024, max_queued_per_peer: int = 64):
        self.spec = spec
        self.num_weights = num_weights
        self.max_in_flight = max_in_flight
        self.heartbeat_s = heartbeat_s
        self.peer_timeout_s = peer_timeout_s
        self.session = random.getrandbits(62)
        self.refused: Counter[str] = Counter()
        self._log_refused = RateLimitedLog()
        self.max_peers = max_peers
        self.peers: dict[bytes, Peer] = {}
        # Peers that never sent a rollout, least recently heard first: the ones a new peer may push out.
        self._idle: OrderedDict[bytes, Peer] = OrderedDict()
        self._next_id = 0
        self._last_beat = 0.0
        self._snapshot: tuple[int, list[bytes]] | None = None  # (version, frames) of the newest weights
        self._snapshot_lock = threading.Lock()
        self.ctx = zmq.Context()
        self._auth = None
        if curve is None:
            log.warning("ZeroMQ transport is open: no CURVE keys configured (set transport.curve_dir)", listen=listen)
        else:
            from zmq.auth.thread import ThreadAuthenticator

            self._auth = ThreadAuthenticator(self.ctx)
            self._auth.start()
            self._auth.configure_curve(domain="*", location=str(curve.authorized_dir))
        self.router = self._socket(zmq.ROUTER, curve)
        self.router.setsockopt(zmq.MAXMSGSIZE, spec.nbytes() + 1024 * 1024)
        # Per connection: a peer that floods (or stops reading) is held back by TCP instead of by our memory.
        self.router.setsockopt(zmq.RCVHWM, max_queued_per_peer)
        self.router.setsockopt(zmq.SNDHWM, max_queued_per_peer)
        self.pub = self._socket(zmq.PUB, curve)
        self.pub.setsockopt(zmq.SNDHWM, 4)
        try:
            self.router.bind(listen)
            self.pub.bind(weights_endpoint(listen))
        except zmq.ZMQError as exc:
            self.close()
            raise OSError(f"cannot listen on {listen} (and {weights_endpoint(listen)}): {exc}") from None
        self._poller = zmq.Poller()
        self._poller.register(self.router, zmq.POLLIN)

    def _socket(self, kind: int, curve: ServerKeys | None) -> zmq.Socket:
        s = self.ctx.socket(kind)
        s.setsockopt(zmq.LINGER, 0)
        if curve is not None:
            s.curve_secretkey = curve.secret
            s.curve_publickey = curve.public
            s.curve_server = True
        return s

    # ------------------------------------------------------------ weights (learner thread)

    def publish_weights(self, version: int, flat: np.ndarray) -> None:
        header = encode_control("weights", {"session": self.session, "version": version, "n": int(flat.size)})
        data = np.ascontiguousarray(flat, dtype="<f4")
        with self._snapshot_lock:
            self._snapshot = (version, [header, data.tobytes()])
        self.pub.send_multipart([header, data], copy=False)

    def request_stop(self) -> None:
        """Multi-host collectors outlive the learner and reconnect to the next one."""

    # ------------------------------------------------------------ receiver thread

    def poll(self, timeout: float) -> list[Arrival]:
        self.service()
        arrivals: list[Arrival] = []
        if not self._poller.poll(int(timeout * 1000)):
            return arrivals
        for _ in range(256):  # bounded so heartbeats keep flowing under a flood
            try:
                frames = self.router.recv_multipart(zmq.NOBLOCK, copy=False)
            except zmq.Again:
                break
            arrival = self._handle(frames)
            if arrival is not None:
                arrivals.append(arrival)
        return arrivals

    def service(self) -> None:
        """Heartbeats out, silent peers dropped."""
        now = time.monotonic()
        if now - self._last_beat < self.heartbeat_s:
            return
        self._last_beat = now
        beat = encode_control("heartbeat", {"session": self.session})
        for identity, peer in list(self.peers.items()):
            if now - peer.last_seen > self.peer_timeout_s:
                log.warning("collector silent, dropped", collector=peer.name, silent_s=round(now - peer.last_seen, 1))
                self._drop(identity)
                continue
            self._send(identity, beat)

    def _send(self, identity: bytes, *frames, copy: bool = True) -> None:
        # Peer gone or its queue is full: it will time out and say hello again.
        with contextlib.suppress(zmq.ZMQError):
            self.router.send_multipart([identity, *frames], zmq.NOBLOCK, copy=copy)

    def _drop(self, identity: bytes) -> None:
        self.peers.pop(identity, None)
        self._idle.pop(identity, None)

    def _refuse(self, reason: str, identity: bytes | None, **kw) -> None:
        self.refused[reason] += 1
        self._log_refused(reason, **kw)

    def _handle(self, frames: list) -> Arrival | None:
        identity = bytes(frames[0].buffer)
        body = frames[1:]
        peer = self.peers.get(identity)
        if peer:
            peer.last_seen = time.monotonic()
            if identity in self._idle:
                self._idle.move_to_end(identity)
        if len(body) == 1:
            self._control(identity, peer, body[0])
            return None
        if peer is None:
            self._refuse("unknown_peer", identity)
            self._send(identity, encode_control("reset", {"session": self.session}))
            return None
        if peer.credits_out <= 0:
            self._refuse("no_credit", identity, collector=peer.name)
            return None
        peer.credits_out -= 1
        try:
            msg = decode_rollout([f.buffer for f in body], self.spec, check_finite=False)
        except WireError as exc:
            self._refuse(exc.reason, identity, collector=peer.name, detail=str(exc))
            self._credit(identity)
            return None
        peer.rollouts += 1
        self._idle.pop(identity, None)  # it collects: no flood of new hellos may push it out
        # The frames own the memory the arrays view; keep them alive with the arrival.
        return Arrival(peer.name, msg.seq, msg.policy_version, msg.arrays, msg.stats,
                       lambda f=frames, i=identity: self._credit(i), lambda i=identity: self._send_weights(i))

    def _send_weights(self, identity: bytes) -> None:
        """The newest weights straight to one collector, unless it already got them this way: a collector that
        (re)joins, or whose rollouts lag, must not wait for the next update's broadcast, which lost or stale
        rollouts may keep from ever coming."""
        peer = self.peers.get(identity)
        with self._snapshot_lock:
            snapshot = self._snapshot
        if peer is None or snapshot is None or snapshot[0] <= peer.sent_version:
            return
        peer.sent_version = snapshot[0]
        self._send(identity, *snapshot[1], copy=False)  # every queued copy shares the snapshot's one buffer

    def _credit(self, identity: bytes) -> None:
        peer = self.peers.get(identity)
        if peer is None:
            return
        peer.credits_out += 1
        self._send(identity, encode_control("credit", {"session": self.session, "n": 1}))

    def _control(self, identity: bytes, peer: Peer | None, frame) -> None:
        try:
            msg = decode_control(frame.buffer, CONTROL_KINDS)
        except WireError as exc:
            self._refuse(exc.reason, identity)
            return
        kind = msg["kind"]
        if kind == "hello":
            self._hello(identity, msg)
        elif kind == "bye" and peer:
            self._drop(identity)
        elif kind == "heartbeat" and peer is None:
            self._send(identity, encode_control("reset", {"session": self.session}))

    def _hello(self, identity: bytes, msg: dict) -> None:
        name = str(msg.get("name", ""))[:128] or identity.hex()[:16]
        if msg.get("task") != self.spec.task or msg.get("spec_hash") != self.spec.spec_hash():
            self._refuse("spec_mismatch", identity, collector=name)
            reason = (f"learner trains {self.spec.task} with {self.spec.num_envs} envs x {self.spec.steps} steps; "
                      f"this collector sends {msg.get('task')!r} with another layout")
            self._send(identity, encode_control("refused", {"session": self.session, "reason": reason}))
            return
        peer = self.peers.get(identity)
        if peer is None:
            if not self._make_room(identity, name):
                return
            peer = Peer(self._next_id, name, identity, time.monotonic(), self.max_in_flight)
            self._next_id += 1
            self.peers[identity] = peer
            self._idle[identity] = peer
            log.info("collector joined", collector=name, id=peer.id)
        peer.credits_out = self.max_in_flight
        self._send(identity, encode_control("welcome", {"session": self.session, "credits": self.max_in_flight}))
        peer.sent_version = -1
        self._send_weights(identity)

    def _make_room(self, identity: bytes, name: str) -> bool:
        """Whether a new peer fits under max_peers, after pushing out the stalest peer that never sent a rollout."""
        if len(self.peers) < self.max_peers:
            return True
        if not self._idle:
            # No reply: "refused" would make a collector exit and "reset" would make it retry at once; unanswered,
            # it says hello again when its next heartbeat draws a reset, once per heartbeat period.
            self._refuse("too_many_peers", identity, collector=name, max_peers=self.max_peers)
            return False
        stale, evicted = next(iter(self._idle.items()))
        self._drop(stale)
        # Counted as a refusal of the hello that admitted it; its next message draws a reset, as after a restart.
        self._refuse("evicted_idle_peer", stale, collector=evicted.name, for_collector=name)
        return True

    def collectors(self) -> dict[int, dict]:
        """id -> {name, rollouts, last_seen_s}; last_seen_s (a metrics series) only after a rollout: hellos add none."""
        now = time.monotonic()
        return {p.id: {"name": p.name, "rollouts": p.rollouts,
                       **({"last_seen_s": now - p.last_seen} if p.rollouts else {})}
                for p in list(self.peers.values())}

    def close(self) -> None:
        for s in (getattr(self, "router", None), getattr(self, "pub", None)):
            if s is not None:
                s.close(linger=0)
        if self._auth is not None:
            self._auth.stop()
        self.ctx.term()
