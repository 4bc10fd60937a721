"""The real executables end to end: artifacts, clean stop, refused config, crash reporting."""

import contextlib
import os
import signal
import subprocess
import time
from pathlib import Path

import yaml
from e2e_helpers import children, exe, read_summary, scalars, wait_for
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from common.cores import SHARED_COLLECTOR_NICE

TINY = [
    "algo.num_envs=16",
    "algo.steps_per_env=16",
    "algo.policy.actor_hidden_dims=[32,32]",
    "algo.policy.critic_hidden_dims=[32,32]",
    "training.console=false",
]


def test_train_leaves_events_checkpoints_and_summary(tmp_path, shm_root):
    """appo-train runs a few iterations and leaves config.yaml, TensorBoard events, model_<i>.pt and summary.json."""
    run = tmp_path / "run"
    args = [exe("appo-train"), "--task", "inverted_pendulum", "--log-dir", str(run), *TINY,
            "algo.max_iterations=4", "algo.save_interval=2", f"transport.shm_root={shm_root}"]
    proc = subprocess.run(args, capture_output=True, text=True, timeout=180)
    assert proc.returncode == 0, proc.stderr[-3000:]
    summary = read_summary(run)
    assert summary["status"] == "completed"
    assert summary["completed_iterations"] == 4
    assert summary["total_env_steps"] >= 4 * 16 * 16
    assert summary["last_checkpoint"].endswith("model_4.pt")
    for key in ("final_mean_reward", "best_mean_reward", "mean_episode_length", "training_wall_time_sec",
                "env_steps_per_sec"):
        assert key in summary
    assert (run / "model_2.pt").is_file() and (run / "model_4.pt").is_file()
    assert yaml.safe_load((run / "config.yaml").read_text())["algo"]["num_envs"] == 16
    acc = EventAccumulator(str(run))
    acc.Reload()
    tags = set(acc.Tags()["scalars"])
    for tag in ("Loss/surrogate", "Loss/value", "Loss/learning_rate", "Train/approx_kl", "Train/vtrace_rho_p99",
                "Policy/mean_std", "perf/iter_ms", "perf/collector_wait_ms", "perf/env_steps_per_s",
                "Learner/policy_lag_mean"):
        assert tag in tags, tag
    assert [e.step for e in acc.Scalars("perf/iter_ms")] == [1, 2, 3, 4]


def test_sigterm_stops_cleanly_with_final_checkpoint(tmp_path, shm_root):
    """SIGTERM mid-run: exit 0, a final checkpoint, status interrupted, no collector left, no shm left."""
    run = tmp_path / "run"
    args = [exe("appo-train"), "--task", "inverted_pendulum", "--log-dir", str(run), *TINY,
            "algo.max_iterations=100000", "algo.save_interval=100000", f"transport.shm_root={shm_root}"]
    proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    wait_for(lambda: _iterations(run) >= 2, 120, "two iterations")
    kids = children(proc.pid)
    # The collector shares the learner's cores at a lower priority (common/cores.py): every one of its threads.
    learner_nice = os.getpriority(os.PRIO_PROCESS, proc.pid)  # the learner's main thread, as this test started it
    expected = {min(19, learner_nice + SHARED_COLLECTOR_NICE)}
    assert kids and all(_thread_nices(pid) == expected for pid in kids), [_thread_nices(p) for p in kids]
    proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err[-3000:]
    summary = read_summary(run)
    assert summary["status"] == "interrupted"
    assert (run / f"model_{summary['completed_iterations']}.pt").is_file()
    for pid in kids:
        assert not os.path.exists(f"/proc/{pid}") or _zombie(pid), f"collector {pid} still running"


def _iterations(run) -> int:
    if not list(run.glob("events*")):
        return 0
    acc = EventAccumulator(str(run))
    acc.Reload()
    return len(acc.Scalars("perf/iter_ms")) if "perf/iter_ms" in acc.Tags()["scalars"] else 0


def _thread_nices(pid: int) -> set[int]:
    """The niceness of each thread of a process (/proc/PID/task/TID/stat, field 19)."""
    nices = set()
    for stat in Path(f"/proc/{pid}/task").glob("*/stat"):
        with contextlib.suppress(OSError, IndexError):  # a thread that ended meanwhile
            nices.add(int(stat.read_text().rsplit(")", 1)[1].split()[16]))
    return nices


def _zombie(pid: int) -> bool:
    try:
        return open(f"/proc/{pid}/stat").read().split()[2] == "Z"
    except OSError:
        return True


def test_bad_config_is_refused_before_anything_starts(tmp_path, shm_root):
    """An unknown key and an out-of-range value exit 2 naming the key; no run directory is made."""
    run = tmp_path / "run"
    for bad, key in (("algo.num_env=8", "algo.num_env"), ("algo.algorithm.gamma=2", "algo.algorithm.gamma")):
        proc = subprocess.run([exe("appo-train"), "--log-dir", str(run), bad, f"transport.shm_root={shm_root}"],
                              capture_output=True, text=True, timeout=60)
        assert proc.returncode == 2
        assert key in proc.stderr
    proc = subprocess.run([exe("appo-train"), "--task", "no_such_task", "--log-dir", str(run)],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and "no_such_task" in proc.stderr and "half_cheetah" in proc.stderr
    assert not run.exists()


def test_collector_crash_is_reported_not_hidden(tmp_path, shm_root):
    """kill -9 of the only collector with restarts disabled: appo-train reports it died and stops with an error."""
    run = tmp_path / "run"
    args = [exe("appo-train"), "--task", "inverted_pendulum", "--log-dir", str(run), *TINY,
            "algo.max_iterations=100000", f"transport.shm_root={shm_root}", "training.collector_max_restarts=0"]
    proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    wait_for(lambda: _iterations(run) >= 1, 120, "first iteration")
    (collector,) = children(proc.pid)
    os.kill(collector, signal.SIGKILL)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 1
    assert "collector died" in err and "every collector exited" in err
    assert read_summary(run)["status"] == "failed"


def test_learner_and_collector_executables_over_shared_memory(tmp_path, shm_root):
    """appo-learner prints its shm dir; a separately started appo-collector joins and the run completes."""
    run = tmp_path / "run"
    learner = subprocess.Popen([exe("appo-learner"), "--task", "inverted_pendulum", "--log-dir", str(run), *TINY,
                                "algo.max_iterations=3", f"transport.shm_root={shm_root}"],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    line = learner.stdout.readline()
    assert line.startswith("shm_dir="), line
    shm_dir = line.strip().split("=", 1)[1]
    collector = subprocess.Popen([exe("appo-collector"), "--task", "inverted_pendulum", "--shm-dir", shm_dir,
                                  "--config", str(run / "config.yaml")],
                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert learner.wait(timeout=180) == 0, learner.stderr.read()[-3000:]
    assert collector.wait(timeout=60) == 0, collector.stderr.read()[-3000:]
    assert read_summary(run)["completed_iterations"] == 3


def test_a_learner_resumed_on_a_complete_run_exits_or_idles_as_configured(tmp_path, shm_root):
    """On a run already at max_iterations appo-learner exits 0 at once by default; with training.idle_when_complete
    it says 'run already complete' and stays up until SIGTERM, then exits 0 (compose and Kubernetes)."""
    run = tmp_path / "run"
    args = ["--task", "inverted_pendulum", "--log-dir", str(run), *TINY, "algo.max_iterations=2",
            f"transport.shm_root={shm_root}"]
    assert subprocess.run([exe("appo-train"), *args], capture_output=True, timeout=180).returncode == 0
    again = subprocess.run([exe("appo-learner"), *args, "--resume", "latest"], capture_output=True, text=True,
                           timeout=120)
    assert again.returncode == 0, again.stderr[-3000:]
    idle = subprocess.Popen([exe("appo-learner"), *args, "--resume", "latest", "training.idle_when_complete=true"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        lines = []
        deadline = time.monotonic() + 120
        while not any("run already complete" in line for line in lines):
            assert time.monotonic() < deadline and idle.poll() is None, "".join(lines)[-3000:]
            lines.append(idle.stderr.readline())
        assert idle.poll() is None  # still up, idle
        idle.send_signal(signal.SIGTERM)
        assert idle.wait(timeout=60) == 0
    finally:
        if idle.poll() is None:
            idle.kill()
    assert read_summary(run)["completed_iterations"] == 2


def test_go2_smoke_run(tmp_path, shm_root):
    """A short real Go2 run (the CI smoke run of the reference task): three iterations and a checkpoint."""
    run = tmp_path / "run"
    proc = subprocess.run([exe("appo-train"), "--task", "go2_joystick_flat", "--log-dir", str(run),
                           "algo.num_envs=32", "algo.steps_per_env=8", "algo.max_iterations=3",
                           "algo.policy.actor_hidden_dims=[32]", "algo.policy.critic_hidden_dims=[32]",
                           "training.console=false", f"transport.shm_root={shm_root}"],
                          capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0, proc.stderr[-3000:]
    summary = read_summary(run)
    assert summary["completed_iterations"] == 3 and summary["total_env_steps"] >= 3 * 32 * 8
    assert (run / "model_3.pt").is_file()


def test_two_local_collectors_both_feed_the_learner(tmp_path, shm_root):
    """appo-train --collectors 2: rollouts from both shared-memory collectors are trained on."""
    run = tmp_path / "run"
    # Runs until both have been trained on: the first collector up can fill many tiny laps
    # before the second has imported torch, so a fixed iteration count would race.
    proc = subprocess.Popen([exe("appo-train"), "--task", "inverted_pendulum", "--collectors", "2",
                             "--log-dir", str(run), *TINY, "algo.max_iterations=100000",
                             "algo.save_interval=100000", f"transport.shm_root={shm_root}"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        wait_for(lambda: all(scalars(run, f"Collectors/local-{i}/rollouts") for i in (0, 1)), 120,
                 "rollouts of both collectors trained on")
    finally:
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err[-3000:]
    per_collector = read_summary(run)["rollouts_per_collector"]
    assert set(per_collector) == {"local-0", "local-1"} and min(per_collector.values()) >= 1


def test_a_crashed_learner_leaves_its_shm_collectors_exiting_non_zero(tmp_path, shm_root):
    """A learner that fails (its checkpoint cannot be written) does not stop its collectors: each finds it gone
    and exits 1, so a restart policy (compose's on-failure) brings it back for the restarted learner."""
    run = tmp_path / "run"
    (run / "model_2.pt").mkdir(parents=True)  # the checkpoint of iteration 2 cannot replace a directory
    with open(tmp_path / "learner.log", "w") as learner_log, open(tmp_path / "collector.log", "w") as collector_log:
        learner = subprocess.Popen([exe("appo-learner"), "--task", "inverted_pendulum", "--log-dir", str(run), *TINY,
                                    "algo.max_iterations=100", "algo.save_interval=2",
                                    f"transport.shm_root={shm_root}"],
                                   stdout=subprocess.PIPE, stderr=learner_log, text=True)
        line = learner.stdout.readline()
        assert line.startswith("shm_dir="), line
        collector = subprocess.Popen([exe("appo-collector"), "--task", "inverted_pendulum",
                                      "--shm-dir", line.strip().split("=", 1)[1], "--config", str(run / "config.yaml")],
                                     stdout=subprocess.DEVNULL, stderr=collector_log)
    try:
        assert learner.wait(timeout=180) == 1
        assert "writing checkpoint" in (tmp_path / "learner.log").read_text()
        assert collector.wait(timeout=60) == 1
        assert "the learner went away without ending the run" in (tmp_path / "collector.log").read_text()
    finally:
        for p in (learner, collector):
            if p.poll() is None:
                p.kill()
            p.wait()


def _lag_and_length(run: Path, shm_root, *extra: str) -> tuple[list[float], float]:
    """appo-train on 4-step rollouts for 8 updates: each update's largest policy lag, and the longest mean episode."""
    args = [exe("appo-train"), "--task", "inverted_pendulum", "--log-dir", str(run), *TINY, "algo.steps_per_env=4",
            "algo.max_iterations=8", "algo.save_interval=8", "algo.normalizer_warmup=true",
            f"transport.shm_root={shm_root}", *extra]
    proc = subprocess.run(args, capture_output=True, text=True, timeout=180)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return scalars(run, "Learner/policy_lag_max"), max(scalars(run, "Train/mean_episode_length"))


def test_lockstep_trains_each_rollout_on_the_policy_that_acted_it(tmp_path, shm_root):
    """training.lockstep: policy lag 0 at every update, episodes longer than a rollout; without it the lag shows."""
    lags, longest = _lag_and_length(tmp_path / "lockstep", shm_root, "training.lockstep=true")
    assert len(lags) == 8 and max(lags) == 0
    # Episodes carry on across 4-step rollouts (the deterministic mode would cut them at 4).
    assert longest > 4
    free_lags, _ = _lag_and_length(tmp_path / "async", shm_root)
    assert len(free_lags) == 8 and max(free_lags) >= 1
