"""Multi-host training over ZeroMQ for real: learner and collectors in separate network namespaces."""

import os
import signal
import subprocess
import sys
import time

from e2e_helpers import exe, last, read_summary, scalars, wait_for

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


FREEZE_S = 12.0  # a frozen VM: four peer timeouts (3 s), and more updates than the lag bound meanwhile


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


def _status(lab, host: str, port: int, path: str) -> tuple[int, str]:
    """GET a status endpoint from inside `host`'s namespace: (HTTP status, body)."""
    code = ("import sys, urllib.error, urllib.request\n"
            f"try: r = urllib.request.urlopen('http://127.0.0.1:{port}{path}', timeout=3); c, b = r.status, r.read()\n"
            "except urllib.error.HTTPError as e: c, b = e.code, e.read()\n"
            "print(c); sys.stdout.write(b.decode())\n")
    out = subprocess.run(["ip", "netns", "exec", lab.hosts[host], sys.executable, "-c", code],
                         capture_output=True, text=True, timeout=20).stdout
    status, _, body = out.partition("\n")
    return int(status), body


def test_a_learner_cut_off_from_every_collector_waits_alive_and_resumes_after_the_heal(netlab, tmp_path):
    """The learner's link down for 30 s: both collectors are dropped, the learner stays live and says why it
    waits, and after the heal training goes on within 10 s with the same processes."""
    lab = netlab
    for host in ("learner", "c1", "c2"):
        lab.add_host(host)
    run = tmp_path / "run"
    learner = start_learner(lab, run, "training.status_port=9100", "training.collector_wait_warn_s=2")
    c1 = start_collector(lab, "c1", "c1", tmp_path / "c1.log")
    c2 = start_collector(lab, "c2", "c2", tmp_path / "c2.log")
    wait_for(lambda: rollouts(run, "c1") >= 3 and rollouts(run, "c2") >= 3, 90, "rollouts from both collectors")
    lab.set_link("learner", up=False)
    cut = time.monotonic()
    log = tmp_path / "run.learner.log"
    wait_for(lambda: log.read_text().count("collector silent, dropped") >= 2, 30, "both collectors dropped")
    wait_for(lambda: "waiting" in _status(lab, "learner", 9100, "/readyz")[1], 30, "readiness to say it waits")
    assert _status(lab, "learner", 9100, "/healthz")[0] == 200  # the lap loop is alive while it waits
    code, body = _status(lab, "learner", 9100, "/readyz")
    assert code == 200 and "0 collectors connected" in body, body
    time.sleep(max(0.0, 30.0 - (time.monotonic() - cut)))  # the partition's length is the point here
    lab.set_link("learner", up=True)
    healed_at = len(_iters(run))
    wait_for(lambda: len(_iters(run)) >= healed_at + 5, 10, "training after the heal")
    assert learner.poll() is None and c1.poll() is None and c2.poll() is None  # nothing was restarted
    learner.send_signal(signal.SIGTERM)
    assert learner.wait(timeout=60) == 0


def test_a_frozen_collector_is_dropped_then_readmitted_and_what_it_held_is_refused(netlab, tmp_path):
    """SIGSTOP for 12 s (a frozen VM) while another collector trains past the lag bound, then SIGCONT: the frozen one
    is dropped, its rollout from before the freeze is refused as stale, never trained on, and it is readmitted."""
    lab = netlab
    for host in ("learner", "c1", "c2"):
        lab.add_host(host)
    run = tmp_path / "run"
    learner = start_learner(lab, run, "training.max_policy_lag=5")
    c1 = start_collector(lab, "c1", "c1", tmp_path / "c1.log")
    start_collector(lab, "c2", "c2", tmp_path / "c2.log")
    wait_for(lambda: rollouts(run, "c1") >= 3 and rollouts(run, "c2") >= 3, 90, "rollouts from both collectors")
    os.kill(c1.pid, signal.SIGSTOP)
    frozen = time.monotonic()
    frozen_at = len(_iters(run))
    log = tmp_path / "run.learner.log"
    wait_for(lambda: "collector silent, dropped" in log.read_text(), 30, "c1 dropped")
    wait_for(lambda: len(_iters(run)) >= frozen_at + 15, 60, "training on c2 past the lag bound")
    time.sleep(max(0.0, FREEZE_S - (time.monotonic() - frozen)))  # the freeze's length is the point here
    trained_before, stale_before = rollouts(run, "c1"), last(run, "Collectors/c1/refused_stale")
    os.kill(c1.pid, signal.SIGCONT)
    wait_for(lambda: last(run, "Collectors/c1/refused_stale") > stale_before, 20, "c1's held rollout refused")
    wait_for(lambda: rollouts(run, "c1") >= trained_before + 3, 20, "c1 readmitted and trained on")
    assert max(scalars(run, "Learner/policy_lag_max")) <= 5  # nothing past the bound was trained
    learner.send_signal(signal.SIGTERM)
    assert learner.wait(timeout=60) == 0
    assert read_summary(run)["refused_messages"].get("stale_policy", 0) >= 1
