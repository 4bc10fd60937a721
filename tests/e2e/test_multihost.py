"""Multi-host training over ZeroMQ for real: learner and collectors in separate network namespaces."""

import os
import signal
import subprocess
import time

from e2e_helpers import exe, last, read_summary, wait_for

TINY = [
    "--task", "inverted_pendulum",
    "algo.num_envs=16", "algo.steps_per_env=16",
    "algo.policy.actor_hidden_dims=[32,32]", "algo.policy.critic_hidden_dims=[32,32]",
    "transport.heartbeat_s=0.2", "transport.peer_timeout_s=3",
]


def start_learner(lab, run, *extra):
    return lab.popen("learner", [exe("appo-learner"), *TINY, "--listen", "tcp://0.0.0.0:5555", "--log-dir", str(run),
                                 "algo.max_iterations=100000", "algo.save_interval=100000", "training.console=false",
                                 *extra],
                     stdout=subprocess.DEVNULL, stderr=open(f"{run}.learner.log", "a"))


def start_collector(lab, host, name, log_path, *extra):
    addr = lab.addresses["learner"]
    return lab.popen(host, [exe("appo-collector"), *TINY, "--learner", f"tcp://{addr}:5555",
                            f"transport.collector_name={name}", *extra],
                     stdout=subprocess.DEVNULL, stderr=open(log_path, "a"))


def rollouts(run, name) -> float:
    return last(run, f"Collectors/{name}/rollouts")


def test_two_hosts_train_survive_a_killed_collector_and_admit_a_new_one(netlab, tmp_path):
    """Both collectors' rollouts are trained on; kill -9 of one leaves training going; a new one joins fast with
    current weights."""
    lab = netlab
    for host in ("learner", "c1", "c2", "c3"):
        lab.add_host(host)
    run = tmp_path / "run"
    learner = start_learner(lab, run)
    start_collector(lab, "c1", "c1", tmp_path / "c1.log")
    c2 = start_collector(lab, "c2", "c2", tmp_path / "c2.log")
    wait_for(lambda: rollouts(run, "c1") >= 3 and rollouts(run, "c2") >= 3, 90, "rollouts from both collectors")
    os.kill(c2.pid, signal.SIGKILL)
    c2.wait()
    iters_at_kill = len(_iters(run))
    wait_for(lambda: len(_iters(run)) >= iters_at_kill + 10, 60, "ten more iterations after the kill")
    version_at_join = len(_iters(run))
    start_collector(lab, "c3", "c3", tmp_path / "c3.log")
    wait_for(lambda: rollouts(run, "c3") >= 2, 20, "rollouts from the new collector")
    # Its first rollouts were made with the learner's current policy, not the initial one.
    assert last(run, "Collectors/c3/policy_version") >= version_at_join - 2
    assert learner.poll() is None
    learner.send_signal(signal.SIGTERM)
    assert learner.wait(timeout=60) == 0
    summary = read_summary(run)
    assert {"c1", "c2", "c3"} <= set(summary["rollouts_per_collector"])


def _iters(run):
    from e2e_helpers import scalars

    return scalars(run, "perf/iter_ms")


def test_collectors_reconnect_to_a_restarted_learner(netlab, tmp_path):
    """A learner stopped and started again on the same address gets rollouts from the same collector processes."""
    lab = netlab
    lab.add_host("learner")
    lab.add_host("c1")
    run1, run2 = tmp_path / "run1", tmp_path / "run2"
    learner = start_learner(lab, run1)
    collector = start_collector(lab, "c1", "c1", tmp_path / "c1.log")
    wait_for(lambda: rollouts(run1, "c1") >= 3, 90, "rollouts before the restart")
    learner.send_signal(signal.SIGTERM)
    assert learner.wait(timeout=60) == 0
    learner = start_learner(lab, run2)
    wait_for(lambda: rollouts(run2, "c1") >= 3, 60, "rollouts after the restart")
    assert collector.poll() is None, "the collector must not have been restarted"
    learner.send_signal(signal.SIGTERM)
    assert learner.wait(timeout=60) == 0


def test_a_collector_healed_after_a_partition_trains_alone_with_current_weights(netlab, tmp_path):
    """Cut off for 30 s while another collector trains past the lag bound, then healed with the other one killed:
    the healed collector rejoins with current weights within 10 s, and its rollouts are trained on."""
    lab = netlab
    for host in ("learner", "c1", "c2"):
        lab.add_host(host)
    run = tmp_path / "run"
    learner = start_learner(lab, run, "training.max_policy_lag=5")
    start_collector(lab, "c1", "c1", tmp_path / "c1.log")
    c2 = start_collector(lab, "c2", "c2", tmp_path / "c2.log")
    wait_for(lambda: rollouts(run, "c1") >= 3 and rollouts(run, "c2") >= 3, 90, "rollouts from both collectors")
    lab.set_link("c1", up=False)
    cut = time.monotonic()
    cut_at = len(_iters(run))
    # Longer than the peer timeout (3 s) and long enough for TCP's retransmission backoff to matter; more updates
    # than the lag bound meanwhile, so the weights c1 holds are stale when it returns.
    wait_for(lambda: "collector silent, dropped" in (tmp_path / "run.learner.log").read_text(), 30, "c1 dropped")
    wait_for(lambda: len(_iters(run)) >= cut_at + 15, 60, "training on c2 alone")
    time.sleep(max(0.0, 30.0 - (time.monotonic() - cut)))  # the partition's length is the point here
    lab.set_link("c1", up=True)
    os.kill(c2.pid, signal.SIGKILL)
    c2.wait()
    healed_at = len(_iters(run))
    wait_for(lambda: len(_iters(run)) >= healed_at + 5, 10, "training on the healed collector alone")
    assert last(run, "Collectors/c1/policy_version") >= healed_at - 5
    assert learner.poll() is None
    learner.send_signal(signal.SIGTERM)
    assert learner.wait(timeout=60) == 0
