"""Floods at a training learner: fake identities and unauthenticated peers leave its memory bounded and training on."""

import signal
import subprocess
from pathlib import Path

import zmq.auth
from e2e_helpers import exe, free_port, last, read_summary, scalars, wait_for

from benchmarks.flood import fake_hellos, raw_garbage, unknown_key_attempts
from benchmarks.soak import rss_mb
from common.rollout_spec import RolloutSpec
from common.task_spec import task_spec

TINY = [
    "--task", "inverted_pendulum",
    "algo.num_envs=16", "algo.steps_per_env=16",
    "algo.policy.actor_hidden_dims=[32,32]", "algo.policy.critic_hidden_dims=[32,32]",
    "transport.peer_timeout_s=60", "training.console=false",
]
SPEC = RolloutSpec.for_task(task_spec("inverted_pendulum"), 16, 16)
MAX_PEERS = 1024  # the default of transport.max_peers
RSS_BUDGET_MB = 64


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


def settle(run: Path, learner: subprocess.Popen) -> float:
    """Training running for a few laps; then the learner's RSS in MiB."""
    wait_for(lambda: len(scalars(run, "perf/iter_ms")) >= 5, 90, "training to start")
    return rss_mb(learner.pid)


def trains_on(run: Path, learner: subprocess.Popen, collector: subprocess.Popen, rss_before: float) -> None:
    """After a flood: the learner grew less than the budget, and trains on the real collector's new rollouts."""
    growth = rss_mb(learner.pid) - rss_before
    assert growth < RSS_BUDGET_MB, f"learner RSS grew {growth:.1f} MiB during the flood"
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
        assert fake_hellos(f"tcp://127.0.0.1:{port}", 2000, SPEC.task, SPEC.spec_hash()) == 2000
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
        assert raw_garbage(f"tcp://127.0.0.1:{port}", 10_000) == 100
        trains_on(run, learner, collector, rss_before)
        assert last(run, "Learner/collectors_connected") == 1
        assert stop(tmp_path, run, learner)["refused_messages"] == {}
    finally:
        for p in (learner, collector):
            if p.poll() is None:
                p.kill()
            p.wait()
