"""A hostile peer: hellos from many fake identities, unknown CURVE keys and garbage frames, at a learner.

    python -m benchmarks.flood --learner tcp://10.231.0.1:5555 --num-envs 64 --steps-per-env 16 --hellos 2000
    python -m benchmarks.flood --learner tcp://10.231.0.1:5555 --server-key keys/learner.key \\
        --unknown-keys 1000 --raw-garbage 10000 --seconds 30

Run it on a host of the namespace lab.  Each round sends everything asked for; --seconds repeats rounds until
that much time has passed (a sustained flood).  It prints what it sent and how the learner answered as JSON.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import random
import socket
import time
from collections import Counter
from urllib.parse import urlparse

import zmq
import zmq.auth
from zmq.utils.monitor import recv_monitor_message

from common.rollout_spec import RolloutSpec
from common.task_spec import task_spec
from common.transport.wire import decode_control, encode_control

BATCH = 100  # sockets open at once: well under the open-file and ZeroMQ socket limits
ANSWERS = {"welcome", "weights", "heartbeat", "reset", "refused", "credit"}


def fake_hellos(endpoint: str, count: int, task: str, spec_hash: int, batch_deadline_s: float = 30.0) -> int:
    """`count` distinct identities each say hello, with the learner's own spec as a peer that knows the protocol
    would, and wait for the learner's welcome; returns how many got one (it gives up after a batch unanswered
    for batch_deadline_s)."""
    ctx = zmq.Context()
    answered = 0
    try:
        for start in range(0, count, BATCH):
            deadline = time.monotonic() + batch_deadline_s
            socks = []
            for i in range(start, min(start + BATCH, count)):
                s = ctx.socket(zmq.DEALER)
                s.setsockopt(zmq.LINGER, 0)
                s.setsockopt(zmq.ROUTING_ID, f"fake-{i}/{random.getrandbits(32):08x}".encode())
                s.connect(endpoint)
                s.send(encode_control("hello", {"name": f"fake-{i}", "task": task, "spec_hash": spec_hash}))
                socks.append(s)
            waiting = set(socks)
            poller = zmq.Poller()
            for s in socks:
                poller.register(s, zmq.POLLIN)
            while waiting and time.monotonic() < deadline:
                for s, _ in poller.poll(100):
                    if decode_control(s.recv_multipart()[0], ANSWERS)["kind"] == "welcome" and s in waiting:
                        waiting.discard(s)
                        answered += 1
            for s in socks:
                s.close()
            if waiting:
                break
    finally:
        ctx.destroy(linger=0)
    return answered


def unknown_key_attempts(endpoint: str, server_public: bytes, count: int, batch_deadline_s: float = 30.0) -> dict:
    """`count` connections, each with a fresh key pair the learner does not know; handshake outcomes by kind (it
    gives up after a batch without an outcome for batch_deadline_s)."""
    outcomes = {"failed_auth": 0, "failed_other": 0, "succeeded": 0}
    events = {zmq.EVENT_HANDSHAKE_FAILED_AUTH: "failed_auth", zmq.EVENT_HANDSHAKE_SUCCEEDED: "succeeded",
              zmq.EVENT_HANDSHAKE_FAILED_PROTOCOL: "failed_other", zmq.EVENT_HANDSHAKE_FAILED_NO_DETAIL: "failed_other"}
    ctx = zmq.Context()
    try:
        for start in range(0, count, BATCH):
            deadline = time.monotonic() + batch_deadline_s
            pairs = []
            for _ in range(min(BATCH, count - start)):
                public, secret = zmq.curve_keypair()
                s = ctx.socket(zmq.DEALER)
                s.setsockopt(zmq.LINGER, 0)
                s.setsockopt(zmq.RECONNECT_IVL, -1)  # one attempt per socket
                s.curve_publickey, s.curve_secretkey, s.curve_serverkey = public, secret, server_public
                monitor = s.get_monitor_socket(sum(events))
                s.connect(endpoint)
                # Never blocks: once its one handshake failed, the socket has nowhere to queue the message.
                with contextlib.suppress(zmq.Again):
                    s.send(encode_control("hello", {"name": "intruder", "task": "?", "spec_hash": 0}), zmq.NOBLOCK)
                pairs.append((s, monitor))
            waiting = {m for _, m in pairs}
            poller = zmq.Poller()
            for m in waiting:
                poller.register(m, zmq.POLLIN)
            while waiting and time.monotonic() < deadline:
                for m, _ in poller.poll(100):
                    event = recv_monitor_message(m)["event"]
                    if event in events and m in waiting:
                        outcomes[events[event]] += 1
                        waiting.discard(m)
            for s, m in pairs:
                s.disable_monitor()
                m.close()
                s.close()
            if waiting:
                break
    finally:
        ctx.destroy(linger=0)
    return outcomes


def raw_garbage(endpoint: str, count: int, per_connection: int = 100, seed: int = 0) -> int:
    """`count` garbage ZMTP frames over raw TCP, after a greeting naming a mechanism (CURVE, NULL or PLAIN), each
    connection until the learner hangs up; returns how many connections it hung up on."""
    url = urlparse(endpoint)
    rng = random.Random(seed)
    hung_up = 0
    for n, start in enumerate(range(0, count, per_connection)):
        mechanism = (b"CURVE", b"NULL", b"PLAIN")[n % 3]
        greeting = b"\xff" + bytes(8) + b"\x7f" + bytes([3, 0]) + mechanism.ljust(20, b"\0") + b"\0" + bytes(31)
        frames = []
        for _ in range(min(per_connection, count - start)):
            body = rng.randbytes(rng.randrange(0, 256))
            frames.append(bytes([rng.choice((0x00, 0x01, 0x04)), len(body)]) + body)
        with socket.create_connection((url.hostname, url.port), timeout=10) as s:
            try:
                s.sendall(greeting + b"".join(frames))
                while s.recv(65536):
                    pass
                hung_up += 1
            except (ConnectionResetError, BrokenPipeError):
                hung_up += 1
    return hung_up


def dealer_garbage(endpoint: str, count: int) -> None:
    """`count` garbage messages from one identity that connected as a well-formed ZeroMQ peer (CURVE off)."""
    ctx = zmq.Context()
    try:
        s = ctx.socket(zmq.DEALER)
        s.setsockopt(zmq.LINGER, 1000)
        s.connect(endpoint)
        for i in range(count):
            s.send(os.urandom(16 + i % 200))
        s.close()
    finally:
        ctx.term()


def flood_round(a: argparse.Namespace, spec_hash: int, server_public: bytes | None) -> Counter:
    """One round of everything asked for; what it sent and how the learner answered."""
    seen: Counter = Counter()
    if a.hellos:
        seen["hellos_sent"] += a.hellos
        seen["hellos_welcomed"] += fake_hellos(a.learner, a.hellos, a.task, spec_hash)
    if a.unknown_keys:
        seen["unknown_keys_sent"] += a.unknown_keys
        for outcome, n in unknown_key_attempts(a.learner, server_public, a.unknown_keys).items():
            seen[f"unknown_keys_{outcome}"] += n
    if a.raw_garbage:
        seen["raw_garbage_frames_sent"] += a.raw_garbage
        seen["raw_garbage_connections_hung_up"] += raw_garbage(a.learner, a.raw_garbage)
    if a.garbage:
        dealer_garbage(a.learner, a.garbage)
        seen["garbage_messages_sent"] += a.garbage
    seen["rounds"] += 1
    return seen


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.flood", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--learner", required=True, help="the learner's rollout endpoint, tcp://HOST:PORT")
    p.add_argument("--hellos", type=int, default=0, help="hellos per round, each from a new identity (CURVE off)")
    p.add_argument("--garbage", type=int, default=0, help="garbage messages per round from one ZeroMQ peer")
    p.add_argument("--unknown-keys", type=int, default=0, help="connections per round with unknown CURVE keys")
    p.add_argument("--raw-garbage", type=int, default=0, help="garbage ZMTP frames per round over raw TCP")
    p.add_argument("--server-key", help="the learner's public key file (appo-keys' learner.key), for --unknown-keys")
    p.add_argument("--seconds", type=float, default=0.0, help="repeat rounds until this much time has passed")
    p.add_argument("--task", default="inverted_pendulum", help="the learner's task (for --hellos)")
    p.add_argument("--num-envs", type=int, default=16, help="the learner's algo.num_envs (for --hellos)")
    p.add_argument("--steps-per-env", type=int, default=16, help="the learner's algo.steps_per_env (for --hellos)")
    a = p.parse_args(argv)
    if a.unknown_keys and not a.server_key:
        p.error("--unknown-keys needs --server-key")
    server_public = zmq.auth.load_certificate(a.server_key)[0] if a.server_key else None
    spec_hash = RolloutSpec.for_task(task_spec(a.task), a.num_envs, a.steps_per_env).spec_hash()
    seen: Counter = Counter()
    started = time.monotonic()
    while True:
        seen.update(flood_round(a, spec_hash, server_public))
        if time.monotonic() - started >= a.seconds:
            break
    print(json.dumps({**seen, "seconds": round(time.monotonic() - started, 2)}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
