"""compose.yaml for real: learner, collectors over shared memory and TensorBoard, with the images as built.

The tests run in order on one Compose project (compose.yaml plus compose.host.yaml: host network, a tiny
inverted_pendulum run); each leaves it running for the next.  Nobody types `up` between a fault and its
recovery: restart policies and depends_on do it.
"""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path

import pytest
from container_helpers import (
    HERE,
    Compose,
    docker,
    exits_since,
    health,
    holds_for,
    http_get,
    json_events,
    main_pid,
    metrics,
    state,
    volume_path,
    wait_for,
)
from e2e_helpers import free_port

pytestmark = [pytest.mark.container, pytest.mark.timeout(300)]

TASK = "inverted_pendulum"


class Run:
    """The Compose project under test, its ports and the run directory on its volume."""

    def __init__(self, tmp: Path):
        self.ports = {"LEARNER_STATUS_PORT": free_port(), "COLLECTOR_STATUS_PORT": free_port(),
                      "TENSORBOARD_PORT": free_port()}
        self.compose = Compose("appo-ct-shm", ["compose.yaml", str(HERE / "compose.host.yaml")],
                               {k: str(v) for k, v in self.ports.items()}, tmp)
        self.learner, self.collector = self.compose.container("learner"), self.compose.container("collector")

    @property
    def learner_port(self) -> int:
        return self.ports["LEARNER_STATUS_PORT"]

    @property
    def run_dir(self) -> Path:
        return volume_path(self.compose.volume("appo-logs")) / "logs" / TASK / "compose"

    def metric(self, name: str, default: float = -1) -> float:
        return metrics(self.learner_port).get(name, default)

    def iterations(self) -> float:
        return self.metric("appo_iterations_total")

    def collectors(self) -> list[str]:
        return [n for n in self.compose.containers() if n.startswith(f"{self.compose.project}-collector-")]

    def summary(self) -> dict:
        return json.loads((self.run_dir / "summary.json").read_text())

    def wait(self, predicate, timeout: float, what: str):
        return wait_for(predicate, timeout, what, self.compose.diagnostics)

    def training(self, collectors: int = 1, more_than: float = 0) -> None:
        """Wait until `collectors` are attached and iterations pass `more_than` by at least 5."""
        self.wait(lambda: self.metric("appo_collectors_connected") == collectors, 90, f"{collectors} collector(s)")
        self.wait(lambda: self.iterations() >= more_than + 5, 60, f"iterations past {more_than + 5}")


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    r = Run(tmp_path_factory.mktemp("compose-shm"))
    r.compose.down()
    yield r
    r.compose.down()


def test_up_starts_collectors_once_the_learner_is_ready_and_training_progresses(run):
    """`up` starts learner, collector and TensorBoard; all turn healthy and training makes progress over /dev/shm."""
    out = run.compose("up", "-d", "--no-build")
    assert "Healthy" in out.stderr, out.stderr  # the collector waited for the learner's /readyz
    names = [run.learner, run.collector, run.compose.container("tensorboard")]
    run.wait(lambda: all(health(n) == "healthy" for n in names), 120, "every container healthy")
    run.training(more_than=20)
    assert http_get(f"http://127.0.0.1:{run.ports['COLLECTOR_STATUS_PORT']}/readyz")[0] == 200
    assert http_get(f"http://127.0.0.1:{run.ports['TENSORBOARD_PORT']}/")[0] == 200
    # The collector joined the learner's /dev/shm: the run directory there belongs to uid 10001.
    owner = docker("exec", run.collector, "stat", "-c", "%u", "/dev/shm/appo-compose").stdout.strip()
    assert owner == "10001"
    run.wait(lambda: list(run.run_dir.glob("model_*.pt")) and list(run.run_dir.glob("events.out.tfevents.*")),
             60, "checkpoints and TensorBoard events on the volume")
    assert run.run_dir.stat().st_uid == 10001
    # The torch-free collector runs the policy in NumPy.
    assert json_events(run.collector, "received weights")[0]["inference"] == "numpy"


def test_sigterm_stops_the_learner_with_a_final_checkpoint_within_the_grace(run):
    """`docker stop` on the learner (SIGTERM): exit 0 well within stop_grace_period (40 s), summary 'interrupted'
    and model_<last iteration>.pt on the volume."""
    t0 = time.monotonic()
    docker("stop", "-t", "40", run.learner, timeout=60)
    took = time.monotonic() - t0
    assert state(run.learner)["ExitCode"] == 0
    assert took < 30, f"stopping took {took:.1f} s"
    summary = run.summary()
    assert summary["status"] == "interrupted"
    assert (run.run_dir / f"model_{summary['completed_iterations']}.pt").is_file()
    # The learner told its collector to stop: it ends with exit 0 and is not restarted.
    run.wait(lambda: state(run.collector).get("Status") == "exited", 30, "the collector to exit")
    assert state(run.collector)["ExitCode"] == 0


def test_up_resumes_from_the_final_checkpoint(run):
    """A second `up` resumes at the interrupted run's last iteration and trains on with its collector."""
    done = run.summary()["completed_iterations"]
    run.compose("up", "-d", "--no-build")
    resumed = run.wait(lambda: json_events(run.learner, "resumed"), 60, "the learner's 'resumed'")
    assert resumed[-1]["iteration"] == done
    run.training(more_than=done)


def test_learner_sigkill_is_recovered_by_the_restart_policies(run):
    """SIGKILL of the learner process: learner and collector restart by themselves, resume, and train again."""
    since = time.time() - 1
    restarts = state(run.learner)["RestartCount"], state(run.collector)["RestartCount"]
    resumes = len(json_events(run.learner, "resumed"))
    newest = max(int(f.stem.split("_")[1]) for f in run.run_dir.glob("model_*.pt"))
    os.kill(main_pid(run.learner), signal.SIGKILL)
    run.wait(lambda: state(run.learner)["RestartCount"] > restarts[0]
             and state(run.collector)["RestartCount"] > restarts[1], 60, "both containers restarted")
    resumed = run.wait(lambda: json_events(run.learner, "resumed")[resumes:], 60, "the restarted learner to resume")
    # From the newest checkpoint the killed learner wrote: at most one save interval is lost.
    assert resumed[-1]["iteration"] >= newest
    run.training(more_than=resumed[-1]["iteration"])
    assert 137 in exits_since(run.learner, since)


def test_learner_exception_is_recovered_by_the_restart_policies(run):
    """The learner exits 1 on an exception (its run directory unwritable at a checkpoint): learner and collector
    restart by themselves and train again."""
    since = time.time() - 1
    restarts = state(run.learner)["RestartCount"], state(run.collector)["RestartCount"]
    run_dir = run.run_dir
    run_dir.chmod(0o555)  # the next checkpoint write fails with PermissionError inside the learner
    try:
        run.wait(lambda: state(run.learner)["RestartCount"] > restarts[0], 60, "the learner to fail and restart")
    finally:
        run_dir.chmod(0o755)
    assert any("Permission denied" in e.get("error", "") for e in json_events(run.learner, "learner stopped"))
    run.wait(lambda: state(run.collector)["RestartCount"] > restarts[1], 60, "the collector to restart")
    run.training(more_than=0)
    assert 1 in exits_since(run.learner, since)


def test_scale_to_two_collectors(run):
    """`up --scale collector=2`: a second collector claims a free id in the same run directory and both deliver
    rollouts."""
    # Replicas share the host's network namespace here, so their status port is off (0).
    run.compose("up", "-d", "--no-build", "--scale", "collector=2", COLLECTOR_STATUS_PORT="0")
    run.training(collectors=2, more_than=run.iterations())
    received = {k: v for k, v in metrics(run.learner_port).items() if k.startswith("appo_rollouts_received_total")}
    run.wait(lambda: sum(v > 0 for k, v in metrics(run.learner_port).items()
                         if k.startswith("appo_rollouts_received_total")) >= 2, 60,
             f"rollouts from two collectors (so far {received})")


def test_compose_stop_ends_every_container_cleanly(run):
    """`docker compose stop`: every container exits 0 and the learner writes its final checkpoint."""
    run.compose("stop", COLLECTOR_STATUS_PORT="0", timeout=120)
    for name in run.compose.containers():
        assert state(name)["ExitCode"] == 0, (name, state(name))
    summary = run.summary()
    assert summary["status"] == "interrupted"
    assert (run.run_dir / f"model_{summary['completed_iterations']}.pt").is_file()


def test_a_completed_run_stays_complete_and_up_says_so(run):
    """At algo.max_iterations the learner exits 0 and nothing restarts; a later `up` exits 0, the learner says
    'run already complete' and its collector exits 0."""
    target = run.summary()["completed_iterations"] + 20
    env = {"APPO_ALGO__MAX_ITERATIONS": str(target), "COLLECTOR_STATUS_PORT": "0"}
    run.compose("up", "-d", "--no-build", "--scale", "collector=1", "learner", "collector", **env)
    collector = run.collectors()[0]  # compose keeps either replica when scaling down
    run.wait(lambda: state(run.learner).get("Status") == "exited", 120, "the learner to complete")
    assert state(run.learner)["ExitCode"] == 0
    summary = run.summary()
    assert summary["status"] == "completed" and summary["completed_iterations"] == target
    run.wait(lambda: state(collector).get("Status") == "exited", 30, "the collector to exit")
    holds_for(lambda: state(run.learner)["Status"] == "exited" and state(collector)["Status"] == "exited", 5,
              "both staying exited (restart: on-failure)", run.compose.diagnostics)
    assert state(collector)["ExitCode"] == 0

    out = run.compose("up", "-d", "--no-build", "learner", "collector", check=False, **env)
    assert out.returncode == 0, out.stdout + out.stderr
    complete = run.wait(lambda: json_events(run.learner, "run already complete"), 30, "'run already complete'")
    assert complete[-1]["iterations"] == target
    run.wait(lambda: state(collector).get("Status") == "exited", 30, "the collector to be told to stop")
    assert state(collector)["ExitCode"] == 0
    assert run.summary()["completed_iterations"] == target, "nothing was trained"
    assert health(run.learner) == "healthy"
    run.compose("stop", "-t", "40", "learner", **env)
    assert state(run.learner)["ExitCode"] == 0
