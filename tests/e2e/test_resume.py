"""Resume and fault tolerance with the real executables: exact resume, kill -9 of learner or collector."""

import os
import signal
import subprocess

import torch
from e2e_helpers import children, exe, free_port, last, read_summary, scalars, wait_for

from common.checkpoint_io import load_checkpoint

TINY = [
    "--task", "inverted_pendulum", "training.console=false",
    "algo.num_envs=16", "algo.steps_per_env=16",
    "algo.policy.actor_hidden_dims=[32,32]", "algo.policy.critic_hidden_dims=[32,32]",
]


def _train(run, shm_root, *extra, check=True):
    proc = subprocess.run([exe("appo-train"), *TINY, "--log-dir", str(run), f"transport.shm_root={shm_root}", *extra],
                          capture_output=True, text=True, timeout=300)
    if check:
        assert proc.returncode == 0, proc.stderr[-3000:]
    return proc


def _same_state(a: dict, b: dict) -> None:
    for part in ("model", "target"):
        for k, v in a["appo"][part].items():
            assert torch.equal(v, b["appo"][part][k]), (part, k)
    oa, ob = a["appo"]["optimizer"]["state"], b["appo"]["optimizer"]["state"]
    assert oa.keys() == ob.keys()
    for k in oa:
        for name, v in oa[k].items():
            assert torch.equal(torch.as_tensor(v), torch.as_tensor(ob[k][name])), (k, name)
    for key in ("iteration", "policy_version", "total_env_steps"):
        assert a[key] == b[key], key
    assert a["appo"]["learning_rate"] == b["appo"]["learning_rate"]


def test_deterministic_resume_is_bit_identical_to_a_straight_run(tmp_path, shm_root):
    """Deterministic mode: two straight 6-iteration runs, and 3 + resume + 3, end with identical state."""
    det = ["training.deterministic=true", "algo.save_interval=3"]
    _train(tmp_path / "a", shm_root, *det, "algo.max_iterations=6")
    _train(tmp_path / "a2", shm_root, *det, "algo.max_iterations=6")
    _train(tmp_path / "b", shm_root, *det, "algo.max_iterations=3")
    _train(tmp_path / "b", shm_root, *det, "algo.max_iterations=6", "--resume", "latest")
    a = load_checkpoint(tmp_path / "a" / "model_6.pt")
    _same_state(a, load_checkpoint(tmp_path / "a2" / "model_6.pt"))
    _same_state(a, load_checkpoint(tmp_path / "b" / "model_6.pt"))
    assert scalars(tmp_path / "b", "perf/iter_ms") and len(scalars(tmp_path / "b", "perf/iter_ms")) == 6


def test_resume_refuses_a_different_network(tmp_path, shm_root):
    """Resuming with other hidden sizes is refused naming the key; a new max_iterations and num_envs are accepted,
    and the run goes on at the new rollout size (its staged replay, of the old size, dropped)."""
    _train(tmp_path / "r", shm_root, "algo.max_iterations=2", "training.replay_queue_size=2")
    proc = _train(tmp_path / "r", shm_root, "--resume", "latest", "algo.policy.actor_hidden_dims=[8]", check=False)
    assert proc.returncode == 2 and "algo.policy" in proc.stderr
    _train(tmp_path / "r", shm_root, "--resume", "latest", "algo.max_iterations=4", "algo.num_envs=32",
           "training.replay_queue_size=2")
    assert read_summary(tmp_path / "r")["completed_iterations"] == 4
    before = load_checkpoint(tmp_path / "r" / "model_2.pt")["total_env_steps"]
    after = load_checkpoint(tmp_path / "r" / "model_4.pt")["total_env_steps"]
    # Every rollout received since the resume is of the new size: 32 envs x 16 steps.
    assert after - before >= 2 * 32 * 16 and (after - before) % (32 * 16) == 0, (before, after)


def test_kill9_learner_then_resume_latest_continues_and_sweeps_stale_shm(tmp_path, shm_root):
    """kill -9 of appo-train between checkpoints: its collector exits, --resume latest continues from the last
    checkpoint, and the killed run's shared memory is swept at that start."""
    run = tmp_path / "run"
    proc = subprocess.Popen([exe("appo-train"), *TINY, "--log-dir", str(run), f"transport.shm_root={shm_root}",
                             "algo.max_iterations=100000", "algo.save_interval=5"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    wait_for(lambda: (run / "model_5.pt").exists() and len(scalars(run, "perf/iter_ms")) >= 7, 120,
             "model_5 and 7 laps")
    kids = children(proc.pid)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    wait_for(lambda: all(not os.path.exists(f"/proc/{k}") for k in kids), 30, "the orphaned collector to exit")
    assert list(shm_root.iterdir()), "a killed learner leaves its shared memory behind"
    _train(run, shm_root, "--resume", "latest", "algo.max_iterations=12")
    summary = read_summary(run)
    assert summary["completed_iterations"] == 12
    ckpt = load_checkpoint(run / "model_12.pt")
    assert ckpt["iteration"] == 12 and ckpt["total_env_steps"] > 5 * 256
    assert list(shm_root.iterdir()) == []


def test_zmq_collectors_reconnect_to_a_resumed_learner(tmp_path):
    """kill -9 of appo-learner, then --resume latest on the same address: the running collector streams again."""
    port = free_port()
    run = tmp_path / "run"
    zmq_args = [*TINY, "--listen", f"tcp://127.0.0.1:{port}", "--log-dir", str(run), "algo.max_iterations=100000",
                "algo.save_interval=5", "transport.heartbeat_s=0.2", "transport.peer_timeout_s=2"]
    learner = subprocess.Popen([exe("appo-learner"), *zmq_args], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    collector = subprocess.Popen([exe("appo-collector"), *TINY, "--learner", f"tcp://127.0.0.1:{port}",
                                  "transport.collector_name=c", "transport.heartbeat_s=0.2",
                                  "transport.peer_timeout_s=2"],
                                 stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_for(lambda: (run / "model_5.pt").exists(), 120, "the first checkpoint")
        learner.send_signal(signal.SIGKILL)
        learner.wait()
        resumed_from = max(int(p.stem.split("_")[1]) for p in run.glob("model_*.pt"))
        learner = subprocess.Popen([exe("appo-learner"), *zmq_args, "--resume", "latest"],
                                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        wait_for(lambda: len(scalars(run, "perf/iter_ms")) >= resumed_from + 5, 90, "training after the resume")
        assert collector.poll() is None, "the collector was not restarted"
        assert last(run, "Collectors/c/policy_version") >= resumed_from
        learner.send_signal(signal.SIGTERM)
        assert learner.wait(timeout=60) == 0
    finally:
        for p in (learner, collector):
            if p.poll() is None:
                p.kill()
            p.wait()


def test_supervisor_restarts_a_killed_collector_and_the_run_completes(tmp_path, shm_root):
    """kill -9 of a local collector: appo-train restarts it (logging why it died) and finishes the run."""
    run = tmp_path / "run"
    proc = subprocess.Popen([exe("appo-train"), *TINY, "--log-dir", str(run), f"transport.shm_root={shm_root}",
                             "algo.max_iterations=60", "training.collector_restart_backoff_s=0.2"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    wait_for(lambda: len(scalars(run, "perf/iter_ms")) >= 3, 120, "three laps")
    (collector,) = children(proc.pid)
    os.kill(collector, signal.SIGKILL)
    _, err = proc.communicate(timeout=240)
    assert proc.returncode == 0, err[-3000:]
    assert "collector died" in err and "collector restarted" in err
    assert read_summary(run)["completed_iterations"] == 60
