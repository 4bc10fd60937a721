"""CURVE authentication and the policy-lag bound, with the real executables on loopback."""

import shutil
import signal
import subprocess
import time

from conftest import exe, free_port, last, read_summary, scalars, wait_for

TINY = [
    "--task", "inverted_pendulum",
    "algo.num_envs=16", "algo.steps_per_env=16",
    "algo.policy.actor_hidden_dims=[32,32]", "algo.policy.critic_hidden_dims=[32,32]",
    "transport.heartbeat_s=0.2", "transport.peer_timeout_s=3", "training.console=false",
]


def _learner(tmp_path, port, *extra):
    run = tmp_path / "run"
    proc = subprocess.Popen([exe("appo-learner"), *TINY, "--listen", f"tcp://127.0.0.1:{port}", "--log-dir", str(run),
                             "algo.max_iterations=100000", "algo.save_interval=100000", *extra],
                            stdout=subprocess.DEVNULL, stderr=open(tmp_path / "learner.log", "w"))
    return proc, run


def _collector(tmp_path, port, name, *extra):
    log = tmp_path / f"{name}.log"
    proc = subprocess.Popen([exe("appo-collector"), *TINY, "--learner", f"tcp://127.0.0.1:{port}",
                             f"transport.collector_name={name}", *extra],
                            stdout=subprocess.DEVNULL, stderr=open(log, "w"))
    return proc, log


def test_curve_admits_known_keys_only(tmp_path):
    """With CURVE on, a known collector trains; one with an unknown key or none gets no weights and no data in."""
    keys, other, intruder = tmp_path / "keys", tmp_path / "other", tmp_path / "intruder"
    for d in (keys, other):
        assert subprocess.run([exe("appo-keys"), str(d)], capture_output=True).returncode == 0
    intruder.mkdir()
    shutil.copy(keys / "learner.key", intruder / "learner.key")  # knows the server, not a trusted client key
    shutil.copy(other / "collector.key_secret", intruder / "collector.key_secret")
    port = free_port()
    learner, run = _learner(tmp_path, port, f"transport.curve_dir={keys}")
    procs = [learner]
    try:
        good, _ = _collector(tmp_path, port, "good", f"transport.curve_dir={keys}")
        bad, bad_log = _collector(tmp_path, port, "bad", f"transport.curve_dir={intruder}")
        plain, plain_log = _collector(tmp_path, port, "plain")
        procs += [good, bad, plain]
        wait_for(lambda: last(run, "Collectors/good/rollouts") >= 5, 90, "rollouts from the trusted collector")
        time.sleep(2)  # the untrusted ones had as long as the trusted one, and then some
        for name, log in (("bad", bad_log), ("plain", plain_log)):
            assert scalars(run, f"Collectors/{name}/rollouts") == []
            text = log.read_text()
            assert "received weights" not in text and "connected to learner" not in text, text[-2000:]
        assert bad.poll() is None and plain.poll() is None  # still trying, not crashed
        learner.send_signal(signal.SIGTERM)
        assert learner.wait(timeout=60) == 0
        assert set(read_summary(run)["rollouts_per_collector"]) == {"good"}
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
            p.wait()


def test_missing_key_files_are_a_clear_error(tmp_path):
    """A curve_dir without the needed key files stops the process with the missing file named."""
    port = free_port()
    proc = subprocess.run([exe("appo-learner"), *TINY, "--listen", f"tcp://127.0.0.1:{port}",
                           "--log-dir", str(tmp_path / "run"), f"transport.curve_dir={tmp_path}"],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and "learner.key_secret" in proc.stderr


def test_rollouts_beyond_max_policy_lag_are_refused(tmp_path):
    """A collector paused mid-rollout comes back with a stale policy: refused and counted, never trained on."""
    port = free_port()
    # A long peer timeout, so the paused collector is stale but not yet considered gone.
    learner, run = _learner(tmp_path, port, "training.max_policy_lag=3", "transport.peer_timeout_s=60")
    fast, _ = _collector(tmp_path, port, "fast", "transport.peer_timeout_s=60")
    slow, _ = _collector(tmp_path, port, "slow", "transport.peer_timeout_s=60")
    try:
        wait_for(lambda: last(run, "Collectors/slow/rollouts") >= 2 and last(run, "Collectors/fast/rollouts") >= 2,
                 90, "rollouts from both collectors")
        slow.send_signal(signal.SIGSTOP)
        at_pause = len(scalars(run, "perf/iter_ms"))
        wait_for(lambda: len(scalars(run, "perf/iter_ms")) >= at_pause + 10, 60, "ten iterations while paused")
        slow.send_signal(signal.SIGCONT)
        wait_for(lambda: last(run, "Learner/refused_messages") >= 1, 30, "a refused stale rollout")
        learner.send_signal(signal.SIGTERM)
        assert learner.wait(timeout=60) == 0
        summary = read_summary(run)
        assert summary["refused_messages"].get("stale_policy", 0) >= 1
        assert max(scalars(run, "Learner/policy_lag_max")) <= 3
    finally:
        for p in (learner, fast, slow):
            if p.poll() is None:
                p.send_signal(signal.SIGCONT)
                p.kill()
            p.wait()
