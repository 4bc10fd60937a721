"""Floods at a training learner: fake identities and unauthenticated peers leave its memory bounded and training on."""

import contextlib
import random
import signal
import socket
import subprocess
import time
from pathlib import Path

import zmq
import zmq.auth
from e2e_helpers import exe, free_port, last, read_summary, scalars, wait_for
from zmq.utils.monitor import recv_monitor_message

from common.rollout_spec import RolloutSpec
from common.task_spec import task_spec
from common.transport.wire import decode_control, encode_control

TINY = [
    "--task", "inverted_pendulum",
    "algo.num_envs=16", "algo.steps_per_env=16",
    "algo.policy.actor_hidden_dims=[32,32]", "algo.policy.critic_hidden_dims=[32,32]",
    "transport.peer_timeout_s=60", "training.console=false",
]
SPEC = RolloutSpec.for_task(task_spec("inverted_pendulum"), 16, 16)
MAX_PEERS = 1024  # the default of transport.max_peers
RSS_BUDGET_KB = 64 * 1024
BATCH = 100  # sockets open at once: well under the open-file and ZeroMQ socket limits


def rss_kb(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise AssertionError(f"no VmRSS for pid {pid}")


def fake_hellos(endpoint: str, count: int, deadline_s: float = 60.0) -> int:
    """`count` distinct identities each say hello and wait for the learner's answer; returns how many got one."""
    ctx = zmq.Context()
    answered = 0
    deadline = time.monotonic() + deadline_s
    try:
        for start in range(0, count, BATCH):
            socks = []
            for i in range(start, min(start + BATCH, count)):
                s = ctx.socket(zmq.DEALER)
                s.setsockopt(zmq.LINGER, 0)
                s.setsockopt(zmq.ROUTING_ID, f"fake-{i}/{random.getrandbits(32):08x}".encode())
                s.connect(endpoint)
                s.send(encode_control("hello", {"name": f"fake-{i}", "task": SPEC.task, "spec_hash": SPEC.spec_hash()}))
                socks.append(s)
            waiting = set(socks)
            poller = zmq.Poller()
            for s in socks:
                poller.register(s, zmq.POLLIN)
            while waiting and time.monotonic() < deadline:
                for s, _ in poller.poll(100):
                    kind = decode_control(s.recv_multipart()[0], {"welcome", "weights", "heartbeat", "reset"})["kind"]
                    if kind == "welcome" and s in waiting:
                        waiting.discard(s)
                        answered += 1
            for s in socks:
                s.close()
            if waiting:
                break
    finally:
        ctx.destroy(linger=0)
    return answered


def unknown_key_attempts(endpoint: str, server_public: bytes, count: int, deadline_s: float = 60.0) -> dict:
    """`count` connections, each with a fresh key pair the learner does not know; handshake outcomes by kind."""
    outcomes = {"failed_auth": 0, "failed_other": 0, "succeeded": 0}
    events = {zmq.EVENT_HANDSHAKE_FAILED_AUTH: "failed_auth", zmq.EVENT_HANDSHAKE_SUCCEEDED: "succeeded",
              zmq.EVENT_HANDSHAKE_FAILED_PROTOCOL: "failed_other", zmq.EVENT_HANDSHAKE_FAILED_NO_DETAIL: "failed_other"}
    ctx = zmq.Context()
    deadline = time.monotonic() + deadline_s
    try:
        for start in range(0, count, BATCH):
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
                    s.send(encode_control("hello", {"name": "intruder", "task": SPEC.task,
                                                    "spec_hash": SPEC.spec_hash()}), zmq.NOBLOCK)
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


def garbage_frames(port: int, count: int, per_connection: int = 100) -> int:
    """`count` garbage ZMTP frames over raw TCP, after a greeting naming a mechanism (CURVE, NULL or PLAIN), each
    connection until the learner hangs up; returns how many connections it hung up on."""
    rng = random.Random(0)
    hung_up = 0
    for n, start in enumerate(range(0, count, per_connection)):
        mechanism = (b"CURVE", b"NULL", b"PLAIN")[n % 3]
        greeting = b"\xff" + bytes(8) + b"\x7f" + bytes([3, 0]) + mechanism.ljust(20, b"\0") + b"\0" + bytes(31)
        frames = []
        for _ in range(min(per_connection, count - start)):
            body = rng.randbytes(rng.randrange(0, 256))
            frames.append(bytes([rng.choice((0x00, 0x01, 0x04)), len(body)]) + body)
        with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
            try:
                s.sendall(greeting + b"".join(frames))
                while s.recv(65536):
                    pass
                hung_up += 1
            except (ConnectionResetError, BrokenPipeError):
                hung_up += 1
    return hung_up


def start(tmp_path: Path, port: int, *extra: str):
    run = tmp_path / "run"
    with open(tmp_path / "learner.log", "w") as learner_log, open(tmp_path / "collector.log", "w") as collector_log:
        learner = subprocess.Popen([exe("appo-learner"), *TINY, "--listen", f"tcp://127.0.0.1:{port}",
                                    "--log-dir", str(run), "algo.max_iterations=100000",
                                    "algo.save_interval=100000", "training.max_policy_lag=1000000", *extra],
                                   stdout=subprocess.DEVNULL, stderr=learner_log)
        collector = subprocess.Popen([exe("appo-collector"), *TINY, "--learner", f"tcp://127.0.0.1:{port}",
                                      "transport.collector_name=real", *extra],
                                     stdout=subprocess.DEVNULL, stderr=collector_log)
    return learner, collector, run


def settle(run: Path, learner: subprocess.Popen) -> int:
    """Training running for a few laps; then the learner's RSS in KiB."""
    wait_for(lambda: len(scalars(run, "perf/iter_ms")) >= 5, 90, "training to start")
    return rss_kb(learner.pid)


def trains_on(run: Path, learner: subprocess.Popen, collector: subprocess.Popen, rss_before: int) -> None:
    """After a flood: the learner grew less than the budget, and trains on the real collector's new rollouts."""
    growth = rss_kb(learner.pid) - rss_before
    assert growth < RSS_BUDGET_KB, f"learner RSS grew {growth} KiB during the flood"
    laps, rollouts = len(scalars(run, "perf/iter_ms")), last(run, "Collectors/real/rollouts")
    wait_for(lambda: len(scalars(run, "perf/iter_ms")) >= laps + 3, 60, "training to go on after the flood")
    wait_for(lambda: last(run, "Collectors/real/rollouts") > rollouts, 30, "new rollouts from the real collector")
    assert learner.poll() is None and collector.poll() is None


def stop(tmp_path: Path, run: Path, learner: subprocess.Popen) -> dict:
    learner.send_signal(signal.SIGTERM)
    assert learner.wait(timeout=60) == 0
    text = (tmp_path / "collector.log").read_text()
    for sign in ("learner refused this collector", "does not know this collector", "learner silent"):
        assert sign not in text, text[-2000:]
    summary = read_summary(run)
    assert summary["status"] == "interrupted"
    assert set(summary["rollouts_per_collector"]) == {"real"}
    return summary


def test_hellos_from_2000_fake_identities_are_capped_and_counted(tmp_path):
    """CURVE off: 2,000 fake hellos keep known peers at max_peers, counted; RSS grows < 64 MB and training goes on."""
    port = free_port()
    learner, collector, run = start(tmp_path, port)
    try:
        rss_before = settle(run, learner)
        assert fake_hellos(f"tcp://127.0.0.1:{port}", 2000) == 2000
        trains_on(run, learner, collector, rss_before)
        connected = scalars(run, "Learner/collectors_connected")
        assert max(connected) <= MAX_PEERS and connected[-1] == MAX_PEERS, connected[-5:]
        summary = stop(tmp_path, run, learner)
        # The real collector holds one place; 1,023 fakes fill the rest and every later one pushes out the stalest.
        assert summary["refused_messages"] == {"evicted_idle_peer": 2000 - (MAX_PEERS - 1)}
    finally:
        for p in (learner, collector):
            if p.poll() is None:
                p.kill()
            p.wait()


def test_unknown_keys_and_garbage_frames_never_reach_a_curve_learner(tmp_path):
    """CURVE on: 1,000 unknown keys and 10,000 garbage frames never reach the app; RSS grows < 64 MB, training on."""
    keys = tmp_path / "keys"
    assert subprocess.run([exe("appo-keys"), str(keys)], capture_output=True).returncode == 0
    server_public, _ = zmq.auth.load_certificate(str(keys / "learner.key"))
    port = free_port()
    learner, collector, run = start(tmp_path, port, f"transport.curve_dir={keys}")
    try:
        rss_before = settle(run, learner)
        outcomes = unknown_key_attempts(f"tcp://127.0.0.1:{port}", server_public, 1000)
        assert outcomes == {"failed_auth": 1000, "failed_other": 0, "succeeded": 0}, outcomes
        assert garbage_frames(port, 10_000) == 100
        trains_on(run, learner, collector, rss_before)
        assert last(run, "Learner/collectors_connected") == 1
        assert stop(tmp_path, run, learner)["refused_messages"] == {}
    finally:
        for p in (learner, collector):
            if p.poll() is None:
                p.kill()
            p.wait()
