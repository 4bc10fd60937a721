"""The k8s pods' containers for real: the images run with the settings the rendered manifests declare.

Mapping from the cluster to one Docker engine (everything else is taken as declared, from `kubectl kustomize k8s/`):
  - securityContext: runAsUser/runAsGroup -> --user, fsGroup -> --group-add (and the group owning the volumes),
    readOnlyRootFilesystem -> --read-only, capabilities.drop ALL -> --cap-drop ALL, allowPrivilegeEscalation false
    -> no-new-privileges, seccomp RuntimeDefault -> the engine's default profile; no init process (the executable
    is PID 1, as in a pod); terminationGracePeriodSeconds -> the stop timeout; memory limits -> --memory;
  - volumes: the ConfigMap's data as read-only files, the Secret as the files `appo-keys` wrote (only the projected
    items, mode 0440, group fsGroup), the PVC as a host directory shared by the pods that mount it, emptyDirs as
    fresh directories;
  - the network: every pod on the host's network, so the Service name appo-learner becomes 127.0.0.1 and each
    declared port a free loopback port (args rewritten; status ports through their APPO_* variables);
  - tiny overrides as APPO_* env (they beat the ConfigMap file): no GPU (training.device=cpu), 16 envs x 16 steps
    with 32x32 networks instead of the preset's sizes, and a save interval of 10.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
from pathlib import Path

import pytest
from container_helpers import IMAGES, docker, http_get, json_events, logs, metrics, state, wait_for
from deploy_manifests import find, image_of, k8s_env, materialize_pod, only_container, pod_spec, python_executable
from e2e_helpers import free_port

pytestmark = [pytest.mark.container, pytest.mark.timeout(300)]

TINY_ENV = {
    "APPO_TRAINING__DEVICE": "cpu",
    "APPO_ALGO__NUM_ENVS": "16",
    "APPO_ALGO__STEPS_PER_ENV": "16",
    "APPO_ALGO__POLICY__ACTOR_HIDDEN_DIMS": "[32,32]",
    "APPO_ALGO__POLICY__CRITIC_HIDDEN_DIMS": "[32,32]",
    "APPO_ALGO__SAVE_INTERVAL": "10",
}
STATUS_ENV = {"APPO_TRAINING__STATUS_PORT", "APPO_TRAINING__COLLECTOR_STATUS_PORT"}


def _mebibytes(quantity: str) -> int:
    units = {"Ki": 1 / 1024, "Mi": 1, "Gi": 1024, "Ti": 1024 * 1024}
    for unit, factor in units.items():
        if quantity.endswith(unit):
            return int(float(quantity[: -len(unit)]) * factor)
    return int(quantity) // (1 << 20)


class Pod:
    """One pod's only container, run by docker as the manifest declares it (see the module docstring)."""

    def __init__(self, name: str, workload: dict, objs: list[dict], root: Path, secret_dir: Path,
                 ports: dict[int, int]):
        self.name, self.workload = name, workload
        self.container = c = only_container(workload)
        spec = pod_spec(workload)
        sc, csc = spec["securityContext"], c["securityContext"]
        self.ports = ports  # declared port -> the free loopback port it becomes here
        mounts = materialize_pod(objs, workload, root / name, secret_dir, rewrite_files=False)
        fs_group = sc.get("fsGroup")
        for mount in c.get("volumeMounts", []):
            local = Path(mounts[mount["mountPath"]])
            volume = next((v for v in spec.get("volumes", []) if v["name"] == mount["name"]), {})
            if "secret" in volume:
                for f in local.iterdir():  # the kubelet projects a Secret's files with the pod's fsGroup
                    os.chown(f, 0, fs_group)
                    f.chmod(volume["secret"].get("defaultMode", 0o644))
            elif "emptyDir" in volume:
                local.chmod(0o777)
            elif "configMap" not in volume:  # the PVC: owned by fsGroup, group-writable
                os.chown(local, 0, fs_group)
                local.chmod(0o2775)
        args = [*c.get("command", [])[1:], *c.get("args", [])]
        args = [a.replace("tcp://appo-learner:", "tcp://127.0.0.1:").replace("tcp://0.0.0.0:", "tcp://127.0.0.1:")
                .replace("0.0.0.0", "127.0.0.1") for a in args]
        args = [self._port_in(a) for a in args]
        env = k8s_env(c)
        if any(k.startswith("APPO_") for k in env):  # an APPO executable (TensorBoard has none)
            env.update(TINY_ENV)
            for key in STATUS_ENV & set(env):
                env[key] = str(ports[int(env[key])])
            env["APPO_TRAINING__STATUS_HOST"] = "127.0.0.1"
        limits = c.get("resources", {}).get("limits", {})
        self.run_args = [
            "--name", name, "--network", "host", "--user", f"{sc['runAsUser']}:{sc['runAsGroup']}",
            *(["--group-add", str(fs_group)] if fs_group else []),
            *(["--read-only"] if csc.get("readOnlyRootFilesystem") else []),
            *[f"--cap-drop={cap}" for cap in csc.get("capabilities", {}).get("drop", [])],
            *(["--security-opt", "no-new-privileges"] if csc.get("allowPrivilegeEscalation") is False else []),
            *(["--memory", f"{_mebibytes(limits['memory'])}m"] if "memory" in limits else []),
            "--stop-timeout", str(spec.get("terminationGracePeriodSeconds", 30)),
            *(["-w", c["workingDir"]] if c.get("workingDir") else []),
            *[a for k, v in env.items() for a in ("-e", f"{k}={v}")],
            *[a for m in c.get("volumeMounts", []) for a in
              ("-v", f"{mounts[m['mountPath']]}:{m['mountPath']}{':ro' if m.get('readOnly') else ''}")],
            *(["--entrypoint", c["command"][0]] if c.get("command") else []),
            IMAGES[image_of(c["image"])[0].removeprefix("appo-")], *args,
        ]
        self.mounts = mounts

    def _port_in(self, arg: str) -> str:
        for declared, actual in self.ports.items():
            if arg == str(declared) or arg.endswith(f":{declared}"):
                return arg[: len(arg) - len(str(declared))] + str(actual)
        return arg

    def start(self) -> None:
        docker("run", "-d", *self.run_args)

    def port(self, ref) -> int:
        declared = ref if isinstance(ref, int) else next(
            p["containerPort"] for p in self.container["ports"] if p["name"] == ref)
        return self.ports[declared]

    def probe(self, kind: str) -> int:
        spec = self.container[kind]["httpGet"]
        return http_get(f"http://127.0.0.1:{self.port(spec['port'])}{spec['path']}")[0]

    def metrics(self) -> dict[str, float]:
        annotations = self.workload["spec"]["template"]["metadata"]["annotations"]
        return metrics(self.port(int(annotations["prometheus.io/port"])))


class Cluster:
    """The learner, collector and TensorBoard pods, their shared PVC and the Secret's files."""

    def __init__(self, objs: list[dict], root: Path):
        self.root, self.secret_dir = root / "pods", root / "secret"
        out = subprocess.run([python_executable("appo-keys"), str(self.secret_dir)], capture_output=True, text=True)
        assert out.returncode == 0, out.stderr
        sts, dep = find(objs, "StatefulSet", "appo-learner"), find(objs, "Deployment", "appo-collector")
        tb = find(objs, "Deployment", "appo-tensorboard")
        ports = {p: free_port() for p in (5555, 9100, 9101, 6006)}
        ports[5556] = ports[5555] + 1  # weights on the rollout port + 1 (free_port gives a free pair)
        self.learner = Pod("appo-ct-k8s-learner", sts, objs, self.root, self.secret_dir, ports)
        self.collector = Pod("appo-ct-k8s-collector", dep, objs, self.root, self.secret_dir, ports)
        self.tensorboard = Pod("appo-ct-k8s-tensorboard", tb, objs, self.root, self.secret_dir, ports)
        self.pods = [self.learner, self.collector, self.tensorboard]

    def diagnostics(self) -> str:
        return "\n".join(f"--- {p.name}: {state(p.name).get('Status')} exit={state(p.name).get('ExitCode')}\n"
                         + "\n".join(logs(p.name).splitlines()[-15:]) for p in self.pods if state(p.name))

    def wait(self, predicate, timeout: float, what: str):
        return wait_for(predicate, timeout, what, self.diagnostics)

    def remove(self) -> None:
        for p in self.pods:
            docker("rm", "-f", p.name, check=False)


@pytest.fixture(scope="module")
def cluster(k8s_objects, tmp_path_factory):
    c = Cluster(k8s_objects, tmp_path_factory.mktemp("k8s"))
    c.remove()
    yield c
    c.remove()
    shutil.rmtree(c.root, ignore_errors=True)


def test_pods_as_declared_train_over_curve_and_pass_their_probes(cluster):
    """Under a read-only root, no capabilities and uid 10001, learner and collector train over CURVE, pass their
    startup, liveness and readiness probes, and TensorBoard serves the learner's volume read-only."""
    learner, collector = cluster.learner, cluster.collector
    learner.start()
    cluster.wait(lambda: learner.probe("startupProbe") == 200, 60, "the learner's startup probe")
    cluster.wait(lambda: learner.probe("readinessProbe") == 200, 30, "the learner's readiness probe")
    collector.start()
    cluster.wait(lambda: collector.probe("readinessProbe") == 200, 60, "the collector's readiness probe")
    cluster.wait(lambda: learner.metrics().get("appo_iterations_total", 0) >= 20, 120, "20 iterations")
    for pod in (learner, collector):
        for kind in ("startupProbe", "livenessProbe", "readinessProbe"):
            assert pod.probe(kind) == 200, (pod.name, kind)
    assert learner.metrics()["appo_collectors_connected"] == 1
    assert "transport is open" not in logs(learner.name), "CURVE must be on (transport.curve_dir from the ConfigMap)"
    assert collector.metrics().get("appo_collector_rollouts_sent_total", 0) >= 1
    run_dir = Path(learner.mounts["/var/lib/appo"]) / "logs" / "go2_joystick_flat" / "cluster"
    assert list(run_dir.glob("model_*.pt")) and run_dir.stat().st_uid == 10001
    cluster.tensorboard.start()
    cluster.wait(lambda: cluster.tensorboard.probe("readinessProbe") == 200, 60, "TensorBoard's readiness probe")


def test_sigterm_stops_pid_1_within_the_grace_and_a_restart_resumes(cluster):
    """The learner as PID 1 checkpoints and exits 0 on SIGTERM within terminationGracePeriodSeconds; started again
    with the same arguments it resumes and its collector reconnects; the collector stops within its grace."""
    learner, collector = cluster.learner, cluster.collector
    grace = pod_spec(learner.workload)["terminationGracePeriodSeconds"]
    t0 = time.monotonic()
    docker("stop", learner.name, timeout=grace + 30)  # SIGTERM, SIGKILL after --stop-timeout (the grace)
    took = time.monotonic() - t0
    code = state(learner.name)["ExitCode"]
    assert code == 0 and took < grace, f"exit {code} after {took:.1f} s (grace {grace} s)"
    run_dir = Path(learner.mounts["/var/lib/appo"]) / "logs" / "go2_joystick_flat" / "cluster"
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["status"] == "interrupted"
    assert (run_dir / f"model_{summary['completed_iterations']}.pt").is_file()

    docker("start", learner.name)
    resumed = cluster.wait(lambda: json_events(learner.name, "resumed"), 60, "the restarted learner to resume")
    assert resumed[-1]["iteration"] == summary["completed_iterations"]
    cluster.wait(lambda: learner.metrics().get("appo_collectors_connected") == 1, 90, "the collector to reconnect")
    cluster.wait(lambda: learner.metrics().get("appo_iterations_total", 0) >= summary["completed_iterations"] + 5,
                 60, "training to go on")

    collector_grace = pod_spec(collector.workload)["terminationGracePeriodSeconds"]
    t0 = time.monotonic()
    docker("stop", collector.name, timeout=collector_grace + 30)
    assert state(collector.name)["ExitCode"] == 0 and time.monotonic() - t0 < collector_grace
    docker("stop", learner.name, timeout=grace + 30)
    assert state(learner.name)["ExitCode"] == 0
