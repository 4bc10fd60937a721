"""The ZeroMQ learner's flood caps, over real sockets: known peers capped, idle ones make room, queues bounded."""

from __future__ import annotations

import inspect
import time
from collections.abc import Callable

import numpy as np
import pytest
import zmq
from e2e_helpers import free_port

from common.config import ConfigError, TransportConfig, load_config
from common.rollout_spec import RolloutSpec, allocate
from common.task_spec import task_spec
from common.transport.wire import decode_control, encode_control, encode_rollout
from common.transport.zmq_learner import LearnerZmq

SPEC = RolloutSpec.for_task(task_spec("inverted_pendulum"), num_envs=4, steps=3)
NUM_WEIGHTS = 10
KINDS = {"welcome", "credit", "heartbeat", "reset", "refused", "weights"}


class Link:
    """A hand-driven collector connection with a routing id of its own, and what the learner sent on it."""

    def __init__(self, ctx: zmq.Context, endpoint: str, name: str):
        self.name = name
        self.identity = name.encode()
        self.sock = ctx.socket(zmq.DEALER)
        self.sock.setsockopt(zmq.LINGER, 0)
        self.sock.setsockopt(zmq.ROUTING_ID, self.identity)
        self.sock.connect(endpoint)
        self.got: list[str] = []

    def hello(self) -> None:
        self.sock.send(encode_control("hello", {"name": self.name, "task": SPEC.task, "spec_hash": SPEC.spec_hash()}))

    def send(self, kind: str) -> None:
        self.sock.send(encode_control(kind, {}))

    def rollout(self, seq: int = 0) -> None:
        self.sock.send_multipart(encode_rollout(SPEC, self.name, seq, 0, {}, allocate(SPEC, fill=0.0)))

    def drain(self) -> list[str]:
        while self.sock.poll(0):
            self.got.append(decode_control(self.sock.recv_multipart()[0], KINDS)["kind"])
        return self.got

    def count(self, kind: str) -> int:
        return self.drain().count(kind)


def pump(learner: LearnerZmq, until: Callable[[], bool], what: str, seconds: float = 10.0) -> list:
    """Poll the learner (returning every credit) until `until()` holds; the arrivals seen on the way."""
    arrivals = []
    deadline = time.monotonic() + seconds
    while not until():
        assert time.monotonic() < deadline, f"timed out after {seconds}s waiting for {what}"
        for arrival in learner.poll(0.02):
            arrivals.append(arrival.collector)
            arrival.release()
    return arrivals


@pytest.fixture
def setup():
    """A learner on loopback (built per test by `make`) and a context for the hand-driven links."""
    ctx = zmq.Context()
    made: list[LearnerZmq] = []

    def make(**caps) -> tuple[LearnerZmq, str]:
        endpoint = f"tcp://127.0.0.1:{free_port()}"
        learner = LearnerZmq(endpoint, SPEC, NUM_WEIGHTS, 2, 0.2, 30.0, None, **caps)
        learner.publish_weights(1, np.zeros(NUM_WEIGHTS, np.float32))
        made.append(learner)
        return learner, endpoint

    yield ctx, make
    for learner in made:
        learner.close()
    ctx.destroy(linger=0)


def join(learner: LearnerZmq, link: Link) -> None:
    link.hello()
    pump(learner, lambda: link.count("welcome") >= 1, f"{link.name} to be welcomed")


def collect(learner: LearnerZmq, link: Link, seq: int = 0) -> None:
    credits = link.count("credit")
    link.rollout(seq)
    pump(learner, lambda: link.count("credit") > credits, f"a credit for {link.name}'s rollout")


def test_fake_hellos_beyond_max_peers_push_out_the_stalest_idle_peers(setup):
    """20 fake hellos at max_peers=8 keep the 8 newest, count 12 evictions, and a later legit collector gets in."""
    ctx, make = setup
    learner, endpoint = make(max_peers=8)
    fakes = [Link(ctx, endpoint, f"fake-{i:02d}") for i in range(20)]
    for fake in fakes:
        join(learner, fake)
        assert len(learner.collectors()) <= 8
    assert {p.identity for p in learner.peers.values()} == {f.identity for f in fakes[12:]}
    assert learner.refused == {"evicted_idle_peer": 12}
    legit = Link(ctx, endpoint, "legit")
    join(learner, legit)
    collect(learner, legit)
    assert legit.identity in learner.peers and len(learner.peers) == 8
    assert learner.refused == {"evicted_idle_peer": 13}
    assert "reset" not in legit.drain()


def test_a_peer_that_sent_a_rollout_is_never_pushed_out_by_fake_hellos(setup):
    """A collecting peer outlasts 50 fake hellos at max_peers=8, is still trained on, and alone has last_seen_s."""
    ctx, make = setup
    learner, endpoint = make(max_peers=8)
    real = Link(ctx, endpoint, "real")
    join(learner, real)
    collect(learner, real, 0)
    fakes = [Link(ctx, endpoint, f"fake-{i:02d}") for i in range(50)]
    for fake in fakes:
        fake.hello()
    pump(learner, lambda: sum(f.count("welcome") for f in fakes) == 50, "every fake hello to be answered")
    assert real.identity in learner.peers and len(learner.peers) == 8
    assert learner.refused == {"evicted_idle_peer": 50 - 7}
    # Only the collecting peer gets a per-collector series (last_seen_s): forged names make none.
    assert [c["name"] for c in learner.collectors().values() if "last_seen_s" in c] == ["real"]
    collect(learner, real, 1)
    real.send("heartbeat")
    pump(learner, lambda: real.count("heartbeat") >= 1, "a heartbeat from the learner")
    assert "reset" not in real.drain()
    assert learner.refused == {"evicted_idle_peer": 50 - 7}


def test_a_hello_with_every_place_taken_by_collecting_peers_is_refused_unanswered_then_retried(setup):
    """With every place held by collecting peers a hello counts as too_many_peers, gets no reply, and gets in later."""
    ctx, make = setup
    learner, endpoint = make(max_peers=4)
    members = [Link(ctx, endpoint, f"member-{i}") for i in range(4)]
    for member in members:
        join(learner, member)
        collect(learner, member)
    late = Link(ctx, endpoint, "late")
    late.hello()
    pump(learner, lambda: learner.refused["too_many_peers"] == 1, "the hello to be refused")
    quiet_until = time.monotonic() + 0.5  # any reply would be on the wire at once: give it time to land
    pump(learner, lambda: time.monotonic() > quiet_until, "a moment to pass")
    assert late.drain() == [] and late.identity not in learner.peers
    late.send("heartbeat")
    pump(learner, lambda: late.count("reset") == 1, "a reset for the refused peer's heartbeat")
    members[0].send("bye")
    late.hello()
    pump(learner, lambda: late.count("welcome") == 1, "the retried hello to be welcomed")
    assert {p.identity for p in learner.peers.values()} == {late.identity, *(m.identity for m in members[1:])}
    assert learner.refused == {"too_many_peers": 1}


def test_dropped_and_departed_peers_leave_nothing_behind(setup):
    """Peers gone by bye or eviction are forgotten everywhere, so per-identity state never outgrows max_peers."""
    ctx, make = setup
    learner, endpoint = make(max_peers=3)
    links = [Link(ctx, endpoint, f"c{i}") for i in range(10)]
    for link in links:
        join(learner, link)
    for link in links[-3:]:
        link.send("bye")
    pump(learner, lambda: not learner.peers, "every bye to be taken")
    assert not learner._idle and learner.refused == {"evicted_idle_peer": 7}


def test_queue_caps_are_set_on_the_router(setup):
    """max_queued_per_peer is the ROUTER's high-water mark both ways, per connection."""
    _, make = setup
    learner, _ = make(max_queued_per_peer=7)
    assert learner.router.getsockopt(zmq.RCVHWM) == 7
    assert learner.router.getsockopt(zmq.SNDHWM) == 7


def test_caps_have_safe_config_defaults_that_the_transport_shares():
    """The caps' config defaults leave room for a collector's credits, equal LearnerZmq's, and refuse zero."""
    fields = TransportConfig.model_fields
    assert fields["max_peers"].default == 1024
    assert fields["max_queued_per_peer"].default > fields["max_in_flight"].default + 8
    params = inspect.signature(LearnerZmq).parameters
    for name in ("max_peers", "max_queued_per_peer"):
        assert params[name].default == fields[name].default, name
        with pytest.raises(ConfigError, match=name):
            load_config([f"transport.{name}=0"], extra={"task": "inverted_pendulum"}, environ={})


def test_the_factory_passes_the_configured_caps_to_the_learner():
    """transport.max_peers and transport.max_queued_per_peer reach the learner's ROUTER through the factory."""
    from common.transport.factory import learner_transport

    cfg = load_config(["transport.kind=zmq", f"transport.listen=tcp://127.0.0.1:{free_port()}",
                       "transport.max_peers=5", "transport.max_queued_per_peer=9"],
                      extra={"task": "inverted_pendulum"}, environ={})
    t = learner_transport(cfg, SPEC, 10, "x")
    try:
        assert t.max_peers == 5 and t.router.getsockopt(zmq.RCVHWM) == 9
    finally:
        t.close()
