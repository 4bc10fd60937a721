"""A remote collector's id, which picks its seed: distinct across replicas started alike, stable for a named one."""

import json
import subprocess
import time

from e2e_helpers import exe, free_port

from collector.main import id_from_name


def started_id(port: int, *extra: str) -> int:
    """The id a real appo-collector aimed at `port` logs when it starts (it is stopped right after)."""
    proc = subprocess.Popen([exe("appo-collector"), "--task", "inverted_pendulum", "--learner",
                             f"tcp://127.0.0.1:{port}", "algo.num_envs=4", *extra],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                            env={"APPO_LOG_FORMAT": "json", "PATH": "/usr/bin:/bin"})
    deadline = time.monotonic() + 60
    try:
        for line in proc.stderr:
            if '"collector started"' in line:
                return json.loads(line)["id"]
            assert time.monotonic() < deadline, "no 'collector started' line within 60 s"
        raise AssertionError(f"the collector exited ({proc.wait()}) without starting")
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def test_replicas_without_ids_get_distinct_ids_and_a_named_collector_a_stable_one():
    """Two ZeroMQ collectors started with the same command (as a Deployment's pods) get different ids, hence
    different seeds; a collector named by transport.collector_name gets the id its name gives, every time."""
    port = free_port()
    assert started_id(port) != started_id(port)
    named = [started_id(port, "transport.collector_name=walker-3") for _ in range(2)]
    assert named == [id_from_name("walker-3")] * 2
