"""Cluster rehearsal: the k8s learner and two collectors, run exactly as the rendered manifests declare them,
each in its own network namespace ("pod"), probed from a fourth ("the node") like a kubelet would.

Mapping from the cluster to this machine (everything else is taken as declared):
  - command: the image's ENTRYPOINT (Dockerfile.learner / Dockerfile.collector) from this venv; args as declared;
  - env: the container's env list; PATH is added so the executables are found;
  - volumes: the ConfigMap's data as files, the Secret as the files `appo-keys` wrote (only the projected items),
    the PVC and emptyDirs as temp directories; container paths in args, env, workingDir and the run config file
    are rewritten to those directories (deploy_manifests.materialize_pod);
  - the Service name appo-learner resolves to the learner pod's address (its host part is replaced in the args);
  - tiny overrides, as extra APPO_* env (env beats the ConfigMap file, and the manifests' args set none of them),
    only where the declared values would be too slow or impossible here: no GPU (training.device=cpu), and
    16 envs x 16 steps with 32x32 networks instead of 2048 x 24 and the preset's sizes.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from deploy_manifests import (
    DOCKERFILES,
    entrypoint,
    find,
    image_of,
    k8s_env,
    materialize_pod,
    only_container,
    pod_spec,
    python_executable,
    rewrite,
)

from common.status_server import parse_metrics

TINY_ENV = {
    "APPO_TRAINING__DEVICE": "cpu",  # no GPU on this machine
    "APPO_ALGO__NUM_ENVS": "16",
    "APPO_ALGO__STEPS_PER_ENV": "16",
    "APPO_ALGO__POLICY__ACTOR_HIDDEN_DIMS": "[32,32]",
    "APPO_ALGO__POLICY__CRITIC_HIDDEN_DIMS": "[32,32]",
}

# An HTTP GET from inside a namespace (what a kubelet's httpGet probe does): prints the status, then the body.
_PROBE = """
import sys, urllib.request, urllib.error
try:
    with urllib.request.urlopen(sys.argv[1], timeout=3) as r:
        print(r.status); sys.stdout.write(r.read().decode())
except urllib.error.HTTPError as e:
    print(e.code); sys.stdout.write(e.read().decode())
except Exception as e:
    print(0); print(e)
"""


class Pod:
    def __init__(self, lab, host: str, workload: dict, objs: list[dict], root: Path, secret_dir: Path,
                 service_ips: dict[str, str]):
        self.lab, self.host, self.workload = lab, host, workload
        self.container = c = only_container(workload)
        self.ip = lab.addresses[host]
        mapping = materialize_pod(objs, workload, root / host, secret_dir)
        self.mapping = mapping
        exe = entrypoint(DOCKERFILES[image_of(c["image"])[0]])
        args = [rewrite(a, mapping) for a in c.get("args", [])]
        for svc, ip in service_ips.items():
            args = [a.replace(f"tcp://{svc}:", f"tcp://{ip}:") for a in args]
        self.argv = [python_executable(exe[0]), *exe[1:], *args]
        self.env = {k: rewrite(v, mapping) for k, v in k8s_env(c).items()}
        self.env.update(TINY_ENV)
        self.env["PATH"] = f"{Path(sys.executable).parent}:/usr/bin:/bin"
        self.cwd = rewrite(c.get("workingDir", str(root)), mapping)
        self.log = root / f"{host}.log"
        self.proc: subprocess.Popen | None = None

    def start(self) -> None:
        with open(self.log, "ab") as log:  # the child keeps its own copy of the descriptor
            self.proc = self.lab.popen(self.host, self.argv, env=self.env, cwd=self.cwd,
                                       stdout=subprocess.DEVNULL, stderr=log)

    def tail(self, n: int = 3000) -> str:
        return self.log.read_text(errors="replace")[-n:] if self.log.exists() else ""

    def port(self, ref) -> int:
        if isinstance(ref, int):
            return ref
        return next(p["containerPort"] for p in self.container["ports"] if p["name"] == ref)

    def get(self, path: str, port) -> tuple[int, str]:
        """GET http://<pod ip>:<port><path> from the node's namespace."""
        out = subprocess.run(["ip", "netns", "exec", self.lab.hosts["node"], sys.executable, "-c", _PROBE,
                              f"http://{self.ip}:{self.port(port)}{path}"], capture_output=True, text=True, timeout=15)
        status, _, body = out.stdout.partition("\n")
        return int(status or 0), body

    def probe(self, kind: str) -> tuple[int, str]:
        spec = self.container[kind]["httpGet"]
        return self.get(spec["path"], spec["port"])

    def metrics(self) -> dict[str, float]:
        status, body = self.get(self.workload["spec"]["template"]["metadata"]["annotations"]["prometheus.io/path"],
                                int(self.workload["spec"]["template"]["metadata"]["annotations"]["prometheus.io/port"]))
        assert status == 200, body
        return parse_metrics(body)


def wait_for(predicate, timeout: float, what: str, pods=()):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for p in pods:
            if p.proc is not None and p.proc.poll() is not None:
                raise AssertionError(f"{p.host} exited ({p.proc.returncode}) while waiting for {what}:\n{p.tail()}")
        value = predicate()
        if value:
            return value
        time.sleep(0.2)
    logs = "\n".join(f"--- {p.host}\n{p.tail()}" for p in pods)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}\n{logs}")


def probe_ok(pod: Pod, kind: str) -> bool:
    return 200 <= pod.probe(kind)[0] < 400


@pytest.mark.timeout(240)
def test_manifests_train_with_curve_pass_their_probes_stop_within_grace_and_resume(netlab, k8s_objects, tmp_path):
    """As declared, learner + 2 collectors train over CURVE, pass their probes, checkpoint on SIGTERM within the
    grace, and resume."""
    lab = netlab
    for host in ("learner", "c1", "c2", "node"):
        lab.add_host(host)
    secret_dir = tmp_path / "secret"
    keys = subprocess.run([python_executable("appo-keys"), str(secret_dir)], capture_output=True, text=True)
    assert keys.returncode == 0, keys.stderr
    sts = find(k8s_objects, "StatefulSet", "appo-learner")
    dep = find(k8s_objects, "Deployment", "appo-collector")
    services = {"appo-learner": lab.addresses["learner"]}
    learner = Pod(lab, "learner", sts, k8s_objects, tmp_path, secret_dir, services)
    collectors = [Pod(lab, h, dep, k8s_objects, tmp_path, secret_dir, services) for h in ("c1", "c2")]
    pods = [learner, *collectors]

    learner.start()
    wait_for(lambda: probe_ok(learner, "startupProbe"), 60, "the learner's startup probe", pods)
    wait_for(lambda: probe_ok(learner, "readinessProbe"), 30, "the learner's readiness probe", pods)
    for c in collectors:
        c.start()
    wait_for(lambda: all(probe_ok(c, "readinessProbe") for c in collectors), 60, "the collectors' readiness", pods)
    wait_for(lambda: learner.metrics().get("appo_iterations_total", 0) >= 3, 60, "three iterations", pods)
    for pod in pods:
        for kind in ("startupProbe", "livenessProbe", "readinessProbe"):
            status, body = pod.probe(kind)
            assert 200 <= status < 400, f"{pod.host} {kind}: {status} {body}"
    wait_for(lambda: learner.metrics().get("appo_collectors_connected") == 2, 30, "both collectors counted", pods)
    assert "transport is open" not in learner.tail(100000), "CURVE must be on (transport.curve_dir from the ConfigMap)"
    for c in collectors:
        assert c.metrics().get("appo_collector_rollouts_sent_total", 0) >= 1

    # SIGTERM, as the kubelet sends it: the final checkpoint lands within the declared grace.
    grace = pod_spec(sts)["terminationGracePeriodSeconds"]
    t0 = time.monotonic()
    learner.proc.send_signal(signal.SIGTERM)
    rc = learner.proc.wait(timeout=grace + 5)
    took = time.monotonic() - t0
    assert rc == 0, learner.tail()
    assert took < grace, f"the learner took {took:.1f} s, the pod is killed after {grace} s"
    run_dirs = [p.parent for p in Path(learner.mapping["/var/lib/appo"]).rglob("summary.json")]
    assert len(run_dirs) == 1, run_dirs
    run_dir = run_dirs[0]
    summary = json.loads((run_dir / "summary.json").read_text())
    done = summary["completed_iterations"]
    assert summary["status"] == "interrupted" and done >= 3
    assert (run_dir / f"model_{done}.pt").is_file(), sorted(os.listdir(run_dir))
    assert len(summary["rollouts_per_collector"]) == 2

    # The same pod starts again (args include --resume latest): it continues from model_<done>.pt.  The
    # collectors are paused so that no update can happen before the first scrape.
    for c in collectors:
        os.kill(c.proc.pid, signal.SIGSTOP)
    learner.start()
    try:
        wait_for(lambda: probe_ok(learner, "readinessProbe"), 60, "the restarted learner's readiness", pods)
        assert learner.metrics()["appo_iterations_total"] == done, "the restarted learner did not resume"
    finally:
        for c in collectors:
            os.kill(c.proc.pid, signal.SIGCONT)
    wait_for(lambda: learner.metrics().get("appo_iterations_total", 0) >= done + 2, 60,
             "training to continue after the restart", pods)

    # Scale-down of everything: collectors and learner stop cleanly within their graces.
    collector_grace = pod_spec(dep)["terminationGracePeriodSeconds"]
    for pod in pods:
        pod.proc.send_signal(signal.SIGTERM)
    for pod, limit in ((learner, grace), *((c, collector_grace) for c in collectors)):
        assert pod.proc.wait(timeout=limit) == 0, pod.tail()
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["completed_iterations"] >= done + 2
    assert (run_dir / f"model_{summary['completed_iterations']}.pt").is_file()
