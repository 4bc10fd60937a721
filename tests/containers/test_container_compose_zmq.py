"""compose.zmq.yaml for real: learner and collectors over ZeroMQ with CurveZMQ keys, as on a cluster.

The tests run in order on one Compose project (compose.zmq.yaml plus compose.zmq.host.yaml: host network,
the learner on a loopback port, a tiny inverted_pendulum run); each leaves it running for the next.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import time
from pathlib import Path

import pytest
from container_helpers import (
    HERE,
    IMAGES,
    Compose,
    docker,
    exits_since,
    health,
    holds_for,
    json_events,
    logs,
    main_pid,
    metrics,
    state,
    volume_path,
    wait_for,
)
from deploy_manifests import python_executable
from e2e_helpers import free_port

pytestmark = [pytest.mark.container, pytest.mark.timeout(300)]


class ZmqRun:
    """The Compose project under test and its ports."""

    def __init__(self, tmp: Path):
        self.tmp = tmp
        self.ports = {"LEARNER_PORT": free_port(), "LEARNER_STATUS_PORT": free_port(),
                      "COLLECTOR_STATUS_PORT": free_port(), "TENSORBOARD_PORT": free_port()}
        self.compose = Compose("appo-ct-zmq", ["compose.zmq.yaml", str(HERE / "compose.zmq.host.yaml")],
                               {k: str(v) for k, v in self.ports.items()}, tmp)
        self.learner = self.compose.container("learner")
        self.rogue = f"{self.compose.project}-rogue"

    def metric(self, name: str, default: float = -1) -> float:
        return metrics(self.ports["LEARNER_STATUS_PORT"]).get(name, default)

    def keys_dir(self) -> Path:
        return volume_path(self.compose.volume("appo-keys"))

    def wait(self, predicate, timeout: float, what: str):
        return wait_for(predicate, timeout, what, self.diagnostics)

    def diagnostics(self) -> str:
        rogue = f"--- {self.rogue}\n{logs(self.rogue)[-3000:]}" if state(self.rogue) else ""
        return self.compose.diagnostics() + "\n" + rogue

    def training(self, collectors: int, more_than: float = 0) -> None:
        self.wait(lambda: self.metric("appo_collectors_connected") == collectors, 90, f"{collectors} collector(s)")
        self.wait(lambda: self.metric("appo_iterations_total") >= more_than + 5, 60, f"iterations past {more_than}")


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    r = ZmqRun(tmp_path_factory.mktemp("compose-zmq"))
    r.compose.down()
    docker("rm", "-f", r.rogue, check=False)
    yield r
    docker("rm", "-f", r.rogue, check=False)
    r.compose.down()


def test_up_writes_keys_once_and_trains_over_curve(run):
    """`up`: `keys` writes the CurveZMQ keys (secrets 0600, uid 10001) and exits 0; learner and collector turn
    healthy and train with CURVE on."""
    run.compose("up", "-d", "--no-build")
    assert state(run.compose.container("keys"))["ExitCode"] == 0
    secret = run.keys_dir() / "learner.key_secret"
    assert (secret.stat().st_mode & 0o777, secret.stat().st_uid) == (0o600, 10001)
    names = [run.learner, run.compose.container("collector")]
    run.wait(lambda: all(health(n) == "healthy" for n in names), 120, "learner and collector healthy")
    run.training(collectors=1, more_than=20)
    assert "transport is open" not in logs(run.learner), "CURVE must be on (transport.curve_dir)"


def test_a_collector_with_unknown_keys_is_refused(run):
    """A collector holding the learner's public key but a key pair the learner does not know never gets weights
    and is never counted."""
    rogue_keys = run.tmp / "rogue-keys"
    out = subprocess.run([python_executable("appo-keys"), str(rogue_keys)], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    shutil.copy(run.keys_dir() / "learner.key", rogue_keys / "learner.key")  # public: anyone may have it
    for f in rogue_keys.iterdir():
        shutil.chown(f, 10001, 10001)
    docker("run", "-d", "--name", run.rogue, "--network", "host", "-v", f"{rogue_keys}:/etc/appo/keys:ro",
           "-e", "APPO_TASK=inverted_pendulum", "-e", "APPO_TRANSPORT__KIND=zmq",
           "-e", "APPO_TRANSPORT__CURVE_DIR=/etc/appo/keys", "-e", "APPO_ALGO__NUM_ENVS=16",
           "-e", "APPO_ALGO__STEPS_PER_ENV=16", "-e", "APPO_ALGO__POLICY__ACTOR_HIDDEN_DIMS=[32,32]",
           "-e", "APPO_ALGO__POLICY__CRITIC_HIDDEN_DIMS=[32,32]",
           IMAGES["collector"], "--learner", f"tcp://127.0.0.1:{run.ports['LEARNER_PORT']}")
    run.wait(lambda: json_events(run.rogue, "collector started"), 60, "the rogue collector to start")
    holds_for(lambda: not json_events(run.rogue, "received weights") and run.metric("appo_collectors_connected") == 1
              and state(run.rogue).get("Running"), 15, "the rogue refused", run.diagnostics)
    docker("rm", "-f", run.rogue)


def test_scale_to_two_collectors(run):
    """`up --scale collector=2`: a second collector joins by the learner's address alone; both are counted and
    training goes on."""
    # Not per collector name: on the host's network both replicas are named <hostname>-<pid> alike.
    run.compose("up", "-d", "--no-build", "--scale", "collector=2", COLLECTOR_STATUS_PORT="0")
    run.training(collectors=2, more_than=run.metric("appo_iterations_total"))
    for i in (1, 2):
        assert json_events(run.compose.container("collector", i), "received weights")


def _crash_and_recover(run, crash, code: int) -> None:
    """crash() ends the learner's process; its restart policy brings it back, it resumes, both collectors train
    with it again without their containers restarting, and the engine saw the learner exit with `code`."""
    collectors = [run.compose.container("collector", i) for i in (1, 2)]
    started = {c: state(c)["StartedAt"] for c in collectors}
    since, restarts = time.time() - 1, state(run.learner)["RestartCount"]
    resumes = len(json_events(run.learner, "resumed"))
    crash()
    run.wait(lambda: state(run.learner)["RestartCount"] > restarts and state(run.learner)["Running"], 60,
             "the learner to restart")
    resumed = run.wait(lambda: json_events(run.learner, "resumed")[resumes:], 60, "the learner to resume")
    run.training(collectors=2, more_than=resumed[-1]["iteration"])
    assert {c: state(c)["StartedAt"] for c in collectors} == started, "a collector container was restarted"
    assert code in exits_since(run.learner, since)


def test_learner_sigkill_is_recovered_and_the_collectors_ride_it_out(run):
    """SIGKILL of the learner process: it restarts by itself and resumes; both collectors reconnect without
    restarting."""
    _crash_and_recover(run, lambda: os.kill(main_pid(run.learner), signal.SIGKILL), 137)


def test_learner_exception_is_recovered_and_the_collectors_ride_it_out(run):
    """The learner exits 1 on an exception (its run directory unwritable at a checkpoint): it restarts by itself
    and resumes; both collectors reconnect without restarting."""
    run_dir = volume_path(run.compose.volume("appo-logs")) / "logs" / "inverted_pendulum" / "compose-zmq"

    def unwritable_until_restarted() -> None:
        restarts = state(run.learner)["RestartCount"]
        run_dir.chmod(0o555)  # the next checkpoint write fails with PermissionError inside the learner
        try:
            run.wait(lambda: state(run.learner)["RestartCount"] > restarts, 60, "the learner to fail")
        finally:
            run_dir.chmod(0o755)

    _crash_and_recover(run, unwritable_until_restarted, 1)
    assert any("Permission denied" in e.get("error", "") for e in json_events(run.learner, "learner stopped"))


def test_learner_restart_resumes_and_collectors_reconnect_without_restarting(run):
    """The learner stopped (exit 0, final checkpoint) and started again resumes; both collectors reconnect on
    their own, their containers untouched, and the keys are not rewritten."""
    collectors = [run.compose.container("collector", i) for i in (1, 2)]
    started = {c: state(c)["StartedAt"] for c in collectors}
    secret = (run.keys_dir() / "learner.key_secret").read_bytes()
    docker("stop", "-t", "40", run.learner, timeout=60)
    assert state(run.learner)["ExitCode"] == 0
    assert json_events(run.learner, "done")[-1]["status"] == "interrupted"
    resumes = len(json_events(run.learner, "resumed"))
    t0 = time.monotonic()
    run.compose("up", "-d", "--no-build", "--scale", "collector=2", COLLECTOR_STATUS_PORT="0")
    run.wait(lambda: len(json_events(run.learner, "resumed")) > resumes, 60, "the learner to resume")
    run.training(collectors=2, more_than=json_events(run.learner, "resumed")[-1]["iteration"])
    assert {c: state(c)["StartedAt"] for c in collectors} == started, "a collector container was restarted"
    assert (run.keys_dir() / "learner.key_secret").read_bytes() == secret
    assert time.monotonic() - t0 < 120


def test_compose_stop_ends_every_container_cleanly(run):
    """`docker compose stop`: every container exits 0 and the learner's last word is 'interrupted'."""
    run.compose("stop", COLLECTOR_STATUS_PORT="0", timeout=120)
    for name in run.compose.containers():
        assert state(name)["ExitCode"] == 0, (name, state(name))
    assert json_events(run.learner, "done")[-1]["status"] == "interrupted"
