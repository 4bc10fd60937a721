"""A collector whose rollouts lag gets the newest weights straight from the learner, over real ZeroMQ sockets."""

from __future__ import annotations

import time

import numpy as np
import zmq
from e2e_helpers import free_port

from common.rollout_spec import RolloutSpec, allocate
from common.task_spec import task_spec
from common.transport.wire import decode_control, encode_control, encode_rollout
from common.transport.zmq_learner import LearnerZmq
from learner.receiver import Receiver
from learner.ring import Ring

SPEC = RolloutSpec.for_task(task_spec("inverted_pendulum"), num_envs=4, steps=3)
NUM_WEIGHTS = 10


class Dealer:
    """A hand-driven collector link: hello, rollouts, and what the learner sends back on it."""

    def __init__(self, endpoint: str):
        self.ctx = zmq.Context()
        self.sock = self.ctx.socket(zmq.DEALER)
        self.sock.setsockopt(zmq.LINGER, 0)
        self.sock.connect(endpoint)
        self.sock.send(encode_control("hello", {"name": "c", "task": SPEC.task, "spec_hash": SPEC.spec_hash()}))

    def send_rollout(self, seq: int, policy_version: int) -> None:
        arrays = allocate(SPEC, fill=0.0)
        self.sock.send_multipart(encode_rollout(SPEC, "c", seq, policy_version, {}, arrays))

    def weights_versions(self, learner: LearnerZmq, seconds: float, until: int | None = None) -> list[int]:
        """Versions of the weights messages that came on this link while the learner was polled."""
        seen: list[int] = []
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline and (until is None or until not in seen):
            for arrival in learner.poll(0.02):
                arrival.release()
            while self.sock.poll(0):
                frames = self.sock.recv_multipart()
                msg = decode_control(frames[0], {"welcome", "credit", "heartbeat", "reset", "refused", "weights"})
                if msg["kind"] == "weights":
                    seen.append(msg["version"])
        return seen

    def close(self) -> None:
        self.sock.close()
        self.ctx.term()


def _learner() -> tuple[LearnerZmq, str]:
    endpoint = f"tcp://127.0.0.1:{free_port()}"
    return LearnerZmq(endpoint, SPEC, NUM_WEIGHTS, 2, 0.2, 30.0, None), endpoint


def test_weights_go_straight_to_a_joining_or_lagging_collector_once_per_version():
    """On hello the newest weights come on the collector's own link; later ones only when a rollout is found
    lagging, once per version however often it lags."""
    learner, endpoint = _learner()
    dealer = Dealer(endpoint)
    try:
        learner.publish_weights(3, np.full(NUM_WEIGHTS, 3.0, np.float32))
        assert dealer.weights_versions(learner, 5.0, until=3) == [3]
        learner.publish_weights(4, np.full(NUM_WEIGHTS, 4.0, np.float32))  # broadcast only: not on this link
        assert dealer.weights_versions(learner, 0.3) == []
        dealer.send_rollout(0, policy_version=3)
        arrivals = []
        deadline = time.monotonic() + 5.0
        while not arrivals and time.monotonic() < deadline:
            arrivals = learner.poll(0.05)
        (arrival,) = arrivals
        arrival.lagging()
        arrival.lagging()
        arrival.release()
        assert dealer.weights_versions(learner, 1.0) == [4]
    finally:
        dealer.close()
        learner.close()


def test_the_receiver_refusing_a_stale_rollout_sends_its_collector_current_weights():
    """A rollout past max_policy_lag is refused as stale and its collector gets the current weights at once,
    though no update (hence no broadcast) follows."""
    learner, endpoint = _learner()
    dealer = Dealer(endpoint)
    ring = Ring(SPEC, num_slots=4, pin=False)
    receiver = Receiver(learner, ring, current_version=lambda: 20, max_policy_lag=5)
    try:
        learner.publish_weights(19, np.zeros(NUM_WEIGHTS, np.float32))
        assert dealer.weights_versions(learner, 5.0, until=19) == [19]
        learner.publish_weights(20, np.ones(NUM_WEIGHTS, np.float32))
        dealer.send_rollout(0, policy_version=2)
        deadline = time.monotonic() + 5.0
        while receiver.refused["stale_policy"] == 0 and time.monotonic() < deadline:
            for arrival in learner.poll(0.05):
                receiver._ingest(arrival)
        assert receiver.refused["stale_policy"] == 1 and ring.occupancy() == 0
        assert receiver.stale_by_collector() == {"c": 1}
        assert dealer.weights_versions(learner, 5.0, until=20) == [20]
    finally:
        dealer.close()
        learner.close()
