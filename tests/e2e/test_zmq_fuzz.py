"""Hundreds of malformed messages of every kind at a training learner: none crashes it, each is counted as refused."""

import os
import signal
import subprocess

import msgpack
import numpy as np
import zmq
from e2e_helpers import exe, free_port, last, read_summary, scalars, wait_for

from common.rollout_spec import RolloutSpec, allocate
from common.task_spec import task_spec
from common.transport.wire import decode_control, encode_control, encode_rollout

TINY = [
    "--task", "inverted_pendulum",
    "algo.num_envs=16", "algo.steps_per_env=16",
    "algo.policy.actor_hidden_dims=[32,32]", "algo.policy.critic_hidden_dims=[32,32]",
    "transport.peer_timeout_s=60", "training.console=false",
]
SPEC = RolloutSpec.for_task(task_spec("inverted_pendulum"), 16, 16)


class Fuzzer:
    def __init__(self, endpoint: str, seed: int = 0):
        self.ctx = zmq.Context()
        self.endpoint = endpoint
        self.rng = np.random.default_rng(seed)
        self.sent = 0
        self.sock = self._dealer(hello=True)

    def _dealer(self, hello: bool) -> zmq.Socket:
        s = self.ctx.socket(zmq.DEALER)
        s.setsockopt(zmq.LINGER, 0)
        s.setsockopt(zmq.ROUTING_ID, os.urandom(8))
        s.connect(self.endpoint)
        if hello:
            s.send(encode_control("hello", {"name": "fuzzer", "task": SPEC.task, "spec_hash": SPEC.spec_hash()}))
            self._await(s, "welcome")
        return s

    def _await(self, s: zmq.Socket, kind: str) -> None:
        poller = zmq.Poller()
        poller.register(s, zmq.POLLIN)
        for _ in range(10000):
            if not poller.poll(10000):
                raise AssertionError(f"no {kind} from the learner within 10 s (it died or stalled)")
            frames = s.recv_multipart()
            if decode_control(frames[0], {"welcome", "credit", "heartbeat", "weights", "reset"})["kind"] == kind:
                return
        raise AssertionError(f"no {kind} among the learner's messages")

    def valid(self) -> list[bytes]:
        arrays = allocate(SPEC, fill=0.5)
        return [bytes(memoryview(f)) for f in encode_rollout(SPEC, "fuzzer", 0, 0, {}, arrays)]

    def send_rollout(self, frames: list[bytes]) -> None:
        """A multi-frame message takes the rollout path and is answered with a credit; one frame is control."""
        self.sock.send_multipart(frames)
        self.sent += 1
        if len(frames) > 1:
            self._await(self.sock, "credit")

    def send_control_garbage(self) -> None:
        self.sock.send(self.rng.bytes(int(self.rng.integers(1, 300))))
        self.sent += 1

    def mutations(self):
        """Every malformed variant, cycling: random bytes, truncations, wrong version/shape/dtype, NaN, oversized,
        missing frames."""
        rng = self.rng
        while True:
            v = self.valid()
            header = msgpack.unpackb(v[0])
            yield [rng.bytes(int(rng.integers(1, 200))) for _ in range(int(rng.integers(2, 12)))]
            k = int(rng.integers(1, len(v)))
            yield v[:k] + [v[k][: int(rng.integers(0, len(v[k])))]] + v[k + 1:]  # truncated frame
            yield v[: int(rng.integers(1, len(v)))]  # valid header, missing frames
            yield v + [b"extra"]
            yield [msgpack.packb({**header, "v": int(rng.integers(2, 100))})] + v[1:]
            h = msgpack.unpackb(v[0])
            h["arrays"][int(rng.integers(0, len(h["arrays"])))][2] = [int(x) for x in rng.integers(1, 40, size=2)]
            yield [msgpack.packb(h)] + v[1:]
            h = msgpack.unpackb(v[0])
            h["arrays"][int(rng.integers(0, len(h["arrays"])))][1] = "<f8"
            yield [msgpack.packb(h)] + v[1:]
            nan = [bytearray(f) for f in v]
            a = np.frombuffer(nan[int(rng.integers(1, len(v)))], dtype="<f4")
            a[int(rng.integers(0, a.size))] = rng.choice([np.nan, np.inf, -np.inf])
            yield [bytes(f) for f in nan]
            yield [rng.bytes(70 * 1024)] + v[1:]  # oversized header
            yield v[:1] + [v[1] + rng.bytes(4096)] + v[2:]  # oversized array frame
            yield [msgpack.packb({**header, "meta": {**header["meta"], "spec_hash": 7}})] + v[1:]
            yield [msgpack.packb({**header, "kind": "weights"})] + v[1:]

    def send_unknown_peer(self, frames: list[bytes]) -> None:
        s = self._dealer(hello=False)
        s.send_multipart(frames)
        self._await(s, "reset")
        s.close()
        self.sent += 1

    def close(self) -> None:
        self.sock.close()
        self.ctx.term()


def test_fuzzed_learner_keeps_training_and_counts_every_refusal(tmp_path):
    """430 malformed messages while training (each rollout mutation 25 times): the learner never crashes, refused ==
    sent, the run completes."""
    port = free_port()
    run = tmp_path / "run"
    with open(tmp_path / "learner.log", "w") as learner_log, open(tmp_path / "collector.log", "w") as collector_log:
        learner = subprocess.Popen([exe("appo-learner"), *TINY, "--listen", f"tcp://127.0.0.1:{port}",
                                    "--log-dir", str(run), "algo.max_iterations=100000",
                                    "training.max_policy_lag=1000000"],
                                   stdout=subprocess.DEVNULL, stderr=learner_log)
        collector = subprocess.Popen([exe("appo-collector"), *TINY, "--learner", f"tcp://127.0.0.1:{port}",
                                      "transport.collector_name=real"],
                                     stdout=subprocess.DEVNULL, stderr=collector_log)
    try:
        wait_for(lambda: len(scalars(run, "perf/iter_ms")) >= 2, 90, "training to start")
        fuzz = Fuzzer(f"tcp://127.0.0.1:{port}")
        bad = fuzz.mutations()
        for _ in range(300):
            fuzz.send_rollout(next(bad))
        for _ in range(100):
            fuzz.send_control_garbage()
        for _ in range(30):
            fuzz.send_unknown_peer(fuzz.valid())
        fuzz.close()
        at_end = len(scalars(run, "perf/iter_ms"))
        wait_for(lambda: len(scalars(run, "perf/iter_ms")) >= at_end + 3, 60, "training to go on after the fuzzing")
        wait_for(lambda: last(run, "Learner/refused_messages") >= fuzz.sent, 30, "every refusal to be counted")
        learner.send_signal(signal.SIGTERM)
        assert learner.wait(timeout=60) == 0
        summary = read_summary(run)
        assert summary["status"] == "interrupted"
        refused = summary["refused_messages"]
        assert sum(refused.values()) == fuzz.sent == 430, refused
        for reason in ("bad_msgpack", "bad_version", "bad_shape", "bad_dtype", "bad_size", "frame_count",
                       "non_finite", "oversized_header", "spec_mismatch", "bad_kind", "unknown_peer"):
            assert refused.get(reason, 0) > 0, (reason, refused)
        assert set(summary["rollouts_per_collector"]) == {"real"}
    finally:
        for p in (learner, collector):
            if p.poll() is None:
                p.kill()
            p.wait()
