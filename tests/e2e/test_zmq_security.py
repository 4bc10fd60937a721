"""CURVE authentication and the policy-lag bound, with the real executables on loopback."""

import shutil
import signal
import subprocess
import time

from e2e_helpers import exe, free_port, last, read_summary, scalars, wait_for

TINY = [
    "--task", "inverted_pendulum",
    "algo.num_envs=16", "algo.steps_per_env=16",
    "algo.policy.actor_hidden_dims=[32,32]", "algo.policy.critic_hidden_dims=[32,32]",
    "transport.heartbeat_s=0.2", "transport.peer_timeout_s=3", "training.console=false",
]


def _learner(tmp_path, port, *extra):
    run = tmp_path / "run"
    with open(tmp_path / "learner.log", "w") as log:  # the child keeps its own copy of the descriptor
        proc = subprocess.Popen([exe("appo-learner"), *TINY, "--listen", f"tcp://127.0.0.1:{port}",
                                 "--log-dir", str(run), "algo.max_iterations=100000", "algo.save_interval=100000",
                                 *extra],
                                stdout=subprocess.DEVNULL, stderr=log)
    return proc, run


def _collector(tmp_path, port, name, *extra):
    log = tmp_path / f"{name}.log"
    with open(log, "w") as err:
        proc = subprocess.Popen([exe("appo-collector"), *TINY, "--learner", f"tcp://127.0.0.1:{port}",
                                 f"transport.collector_name={name}", *extra],
                                stdout=subprocess.DEVNULL, stderr=err)
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
    """A collector that holds a finished rollout while the learner moves on is refused and counted, never trained on."""
    import threading

    from collector.envs import make_env
    from collector.rollout import Collector
    from common.config import load_config
    from common.policy import ActorCritic, flat_weights_size
    from common.rollout_spec import RolloutSpec
    from common.task_spec import task_spec
    from common.transport.zmq_collector import CollectorZmq

    port = free_port()
    # A pool as large as the ring: each lap takes every ready rollout, so the fast collector's
    # rollouts never wait in the ring long enough to go stale themselves.
    learner, run = _learner(tmp_path, port, "training.max_policy_lag=3", "training.replay_queue_size=4")
    fast, _ = _collector(tmp_path, port, "fast")
    # The slowed collector: the real transport, env and rollout loop, run by hand so it can stall on purpose.
    cfg = load_config(TINY[2:], extra={"task": "inverted_pendulum"}, environ={})
    task = task_spec("inverted_pendulum")
    spec = RolloutSpec.for_task(task, cfg.algo.num_envs, cfg.algo.steps_per_env)
    num_weights = flat_weights_size(ActorCritic.from_config(cfg, task))
    channel = CollectorZmq(f"tcp://127.0.0.1:{port}", spec, "slow", num_weights, 2, 0.2, 30.0)
    env = make_env("inverted_pendulum", cfg.algo.num_envs, 1, seed=3)
    slow = Collector(cfg, env, channel, threading.Event(), seed=3)
    try:
        wait_for(lambda: last(run, "Collectors/fast/rollouts") >= 2, 90, "the fast collector's rollouts")
        assert slow.wait_for_weights()
        buf = channel.acquire(10)
        made_with = slow.version
        obs, critic = env.reset()
        slow.fill_rollout(buf.arrays, obs, critic)
        wait_for(lambda: len(scalars(run, "perf/iter_ms")) >= made_with + 6, 60, "the learner to move 6 versions on")
        channel.commit(buf, 0, made_with, {"episodes": 0})
        wait_for(lambda: last(run, "Learner/refused_messages") >= 1, 30, "the stale rollout to be refused")
        # With fresh weights the same collector is accepted again.  The fast collector keeps the learner moving,
        # so under load a fresh rollout can age past the bound before it arrives and be refused in turn: the
        # collector then takes the current weights again, and one of three tries must be trained on.
        refused = 1
        for attempt in range(1, 4):
            buf = channel.acquire(10)
            slow._take_weights()
            slow.fill_rollout(buf.arrays, *env.reset())
            channel.commit(buf, attempt, slow.version, {"episodes": 0})
            outcome = wait_for(lambda seen=refused: ("used" if last(run, "Collectors/slow/rollouts") >= 1 else
                                                     "refused" if last(run, "Learner/refused_messages") > seen
                                                     else None),
                               30, "the fresh rollout to be used or refused")
            if outcome == "used":
                break
            refused += 1
        assert outcome == "used", f"{refused} refusals"
        learner.send_signal(signal.SIGTERM)
        assert learner.wait(timeout=60) == 0
        summary = read_summary(run)
        assert summary["refused_messages"].get("stale_policy", 0) == refused
        assert summary["rollouts_per_collector"]["slow"] == 1
        assert max(scalars(run, "Learner/policy_lag_max")) <= 3
    finally:
        channel.close()
        env.close()
        for p in (learner, fast):
            if p.poll() is None:
                p.kill()
            p.wait()
