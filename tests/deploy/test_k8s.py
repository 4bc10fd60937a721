"""k8s/: renders with kustomize, validates against Kubernetes 1.32 (strict), and agrees with the executables' config."""

from __future__ import annotations

import copy
import subprocess
from pathlib import Path

import pytest
from deploy_manifests import (
    DOCKERFILES,
    K8S_VERSION,
    ROOT,
    container_port,
    entrypoint,
    find,
    image_of,
    installed_packages,
    k8s_env,
    materialize_pod,
    only_container,
    pod_spec,
    project_version,
    python_executable,
    resolve_config,
    selects,
    status_port,
    workloads,
)

from common.cores import collector_mujoco_threads

LEARNER, COLLECTOR, TENSORBOARD = "appo-learner", "appo-collector", "appo-tensorboard"
SECRET = "appo-curve-keys"


@pytest.fixture(scope="module")
def secret_dir(tmp_path_factory) -> Path:
    """What `appo-keys` writes: the files the documented `kubectl create secret --from-file` turns into keys."""
    d = tmp_path_factory.mktemp("keys") / "keys"
    out = subprocess.run([python_executable("appo-keys"), str(d)], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    return d


@pytest.fixture(scope="module")
def resolved(k8s_objects, secret_dir, tmp_path_factory) -> dict[str, tuple]:
    """name -> (container, argparse namespace, AppoConfig) for the learner and the collectors."""
    out = {}
    for name in (LEARNER, COLLECTOR):
        w = next(o for o in workloads(k8s_objects) if o["metadata"]["name"] == name)
        c = only_container(w)
        assert "command" not in c, f"{name}: the image's ENTRYPOINT starts the executable; give only args"
        exe = image_entrypoint(c["image"])[0]
        # Only the config file's path is mapped; the values in it stay container paths.
        mapping = materialize_pod(k8s_objects, w, tmp_path_factory.mktemp(name), secret_dir, rewrite_files=False)
        args, cfg = resolve_config(exe, c.get("args", []), k8s_env(c), mapping)
        out[name] = (c, args, cfg)
    return out


def image_entrypoint(ref: str) -> list[str]:
    name, _ = image_of(ref)
    assert name in DOCKERFILES, f"image {ref} is built by none of the Dockerfiles"
    return entrypoint(DOCKERFILES[name])


def test_kustomize_renders_the_expected_objects(k8s_objects):
    """`kubectl kustomize k8s/` renders the namespace, config, learner, collectors, TensorBoard and the policy, all
    namespaced."""
    def name(o: dict) -> str:
        return o["metadata"]["name"].split("-m")[0] if o["kind"] == "ConfigMap" else o["metadata"]["name"]

    kinds = {(o["kind"], name(o)) for o in k8s_objects}
    assert {("Namespace", "appo"), ("StatefulSet", LEARNER), ("Service", LEARNER), ("Deployment", COLLECTOR),
            ("Deployment", TENSORBOARD), ("Service", TENSORBOARD), ("NetworkPolicy", LEARNER)} <= kinds
    assert any(o["kind"] == "ConfigMap" and o["metadata"]["name"].startswith("appo-config-") for o in k8s_objects)
    for o in k8s_objects:
        if o["kind"] != "Namespace":
            assert o["metadata"]["namespace"] == "appo", o["metadata"]["name"]
    secrets = [o for o in k8s_objects if o["kind"] == "Secret"]
    assert not secrets, "keys are never rendered; the Secret is created by hand"


def test_every_object_validates_against_kubernetes_1_32_strict(k8s_objects):
    """Each rendered object passes kubernetes-validate's 1.32 schema in strict mode (unknown fields refused)."""
    import kubernetes_validate
    from kubernetes_validate.utils import all_versions

    assert K8S_VERSION in all_versions(), f"kubernetes-validate ships {all_versions()}"
    for obj in k8s_objects:
        # SchemaNotFoundError (a kind without a schema) fails here too; the CLI only warns.
        assert kubernetes_validate.validate(obj, K8S_VERSION, strict=True) == "1.32"


def test_strict_validation_refuses_an_unknown_field(k8s_objects):
    """Negative control: the validator does reject a misspelt field in a pod spec."""
    import kubernetes_validate

    bad = copy.deepcopy(find(k8s_objects, "StatefulSet", LEARNER))
    pod_spec(bad)["terminationGracePeriodSecond"] = 30
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(bad, K8S_VERSION, strict=True)


def test_container_args_and_env_are_accepted_by_the_executables(resolved):
    """Learner and collector args parse with their executables' parsers, and args + APPO_* env + the ConfigMap load."""
    learner_c, learner_args, learner_cfg = resolved[LEARNER]
    collector_c, collector_args, collector_cfg = resolved[COLLECTOR]
    assert learner_cfg.transport.kind == collector_cfg.transport.kind == "zmq"
    assert learner_cfg.task == collector_cfg.task
    # The rollout shape is the same on both sides (same ConfigMap, no per-role override).
    for key in ("num_envs", "steps_per_env"):
        assert getattr(learner_cfg.algo, key) == getattr(collector_cfg.algo, key)
    assert learner_cfg.algo.policy == collector_cfg.algo.policy


def test_learner_starts_with_resume_latest_in_a_fixed_run_directory(resolved, k8s_objects):
    """Every learner start resumes (`--resume latest`), and its run directory is fixed and on the PVC."""
    c, args, cfg = resolved[LEARNER]
    assert getattr(args, "resume", None) == "latest"
    assert cfg.training.run_name, "a timestamped run name would start a new run on each restart"
    sts = find(k8s_objects, "StatefulSet", LEARNER)
    claims = {t["metadata"]["name"] for t in sts["spec"]["volumeClaimTemplates"]}
    pvc_mounts = [m["mountPath"] for m in c["volumeMounts"] if m["name"] in claims]
    assert pvc_mounts and any((cfg.training.log_dir + "/").startswith(p.rstrip("/") + "/") for p in pvc_mounts)


def test_learner_statefulset_requests_a_gpu_and_outlasts_the_stop_grace(resolved, k8s_objects):
    """One replica, nvidia.com/gpu: 1 requested and limited, and a termination grace above training.stop_grace_s."""
    sts = find(k8s_objects, "StatefulSet", LEARNER)
    c, _, cfg = resolved[LEARNER]
    assert sts["spec"]["replicas"] == 1
    assert str(c["resources"]["requests"]["nvidia.com/gpu"]) == "1"
    assert str(c["resources"]["limits"]["nvidia.com/gpu"]) == "1"
    grace = pod_spec(sts)["terminationGracePeriodSeconds"]
    assert grace >= cfg.training.stop_grace_s + 10, "the final checkpoint needs time after the lap is cut"
    assert sts["spec"]["persistentVolumeClaimRetentionPolicy"]["whenDeleted"] == "Retain"


def test_ports_agree_between_config_containers_services_probes_and_policy(resolved, k8s_objects):
    """Listen port, port+1 and status port are the container ports, the Service ports, the probe and scrape ports."""
    c, _, cfg = resolved[LEARNER]
    listen_port = int(cfg.transport.listen.rsplit(":", 1)[1])
    named = {p["name"]: p["containerPort"] for p in c["ports"]}
    assert named == {"rollouts": listen_port, "weights": listen_port + 1, "status": cfg.training.status_port}
    svc = find(k8s_objects, "Service", LEARNER)
    sts = find(k8s_objects, "StatefulSet", LEARNER)
    assert selects(svc["spec"]["selector"], sts["spec"]["template"]["metadata"]["labels"])
    for p in svc["spec"]["ports"]:
        # Collectors derive the weights port as the Service's rollout port + 1: numbers must match as is.
        assert p["port"] == container_port(c, p["targetPort"]), p
    assert {p["name"]: p["port"] for p in svc["spec"]["ports"]} == named
    annotations = sts["spec"]["template"]["metadata"]["annotations"]
    assert annotations["prometheus.io/port"] == str(cfg.training.status_port)
    policy = find(k8s_objects, "NetworkPolicy", LEARNER)
    zmq_rule = [r for r in policy["spec"]["ingress"] if {p["port"] for p in r["ports"]} & {listen_port}]
    assert len(zmq_rule) == 1 and {p["port"] for p in zmq_rule[0]["ports"]} == {listen_port, listen_port + 1}


def test_collectors_point_at_the_learner_service(resolved, k8s_objects):
    """The collectors' --learner is the learner Service's name and rollout port."""
    _, args, cfg = resolved[COLLECTOR]
    host_port = cfg.transport.learner.removeprefix("tcp://")
    host, port = host_port.rsplit(":", 1)
    svc = find(k8s_objects, "Service", LEARNER)
    assert host.split(".")[0] == svc["metadata"]["name"]
    if "." in host:
        assert host.split(".")[1] == svc["metadata"]["namespace"]
    assert int(port) == next(p["port"] for p in svc["spec"]["ports"] if p["name"] == "rollouts")


def test_probes_and_scrape_annotations_use_the_status_server(resolved, k8s_objects):
    """Startup/liveness probe /healthz and readiness /readyz on the status port; scrape annotations name it."""
    for name, exe in ((LEARNER, "appo-learner"), (COLLECTOR, "appo-collector")):
        c, _, cfg = resolved[name]
        port = status_port(exe, cfg)
        assert port > 0, f"{name}: the status server is off"
        assert {p["name"]: p["containerPort"] for p in c["ports"]}["status"] == port
        for probe, path in (("startupProbe", "/healthz"), ("livenessProbe", "/healthz"), ("readinessProbe", "/readyz")):
            get = c[probe]["httpGet"]
            assert get["path"] == path, (name, probe)
            assert container_port(c, get["port"]) == port, (name, probe)
        w = next(o for o in workloads(k8s_objects) if o["metadata"]["name"] == name)
        ann = w["spec"]["template"]["metadata"]["annotations"]
        assert ann == {"prometheus.io/scrape": "true", "prometheus.io/port": str(port),
                       "prometheus.io/path": "/metrics"}


def test_curve_keys_come_from_a_referenced_secret_with_least_privilege(resolved, k8s_objects, secret_dir):
    """Both sides mount the appo-curve-keys Secret at transport.curve_dir; each gets only the keys it needs."""
    learner_c, _, learner_cfg = resolved[LEARNER]
    collector_c, _, collector_cfg = resolved[COLLECTOR]
    client = collector_cfg.transport.curve_client_name
    needs = {LEARNER: {"learner.key_secret", f"{client}.key"}, COLLECTOR: {f"{client}.key_secret", "learner.key"}}
    for name, (c, _, cfg) in resolved.items():
        w = next(o for o in workloads(k8s_objects) if o["metadata"]["name"] == name)
        volumes = {v["name"]: v for v in pod_spec(w)["volumes"]}
        mount = next(m for m in c["volumeMounts"] if m["mountPath"] == cfg.transport.curve_dir)
        secret = volumes[mount["name"]]["secret"]
        assert secret["secretName"] == SECRET and mount.get("readOnly")
        keys = {item["key"] for item in secret["items"]}
        assert keys == needs[name], name
        assert keys <= {p.name for p in secret_dir.iterdir()}, "appo-keys must write every projected key"
    docs = (ROOT / "docs" / "deploy.md").read_text()
    assert f"create secret generic {SECRET} --from-file=" in docs


def test_collectors_are_spread_and_sized_for_their_threads(resolved, k8s_objects):
    """Collectors spread over nodes, have CPU requests = limits, and --threads leaves the main thread one core."""
    dep = find(k8s_objects, "Deployment", COLLECTOR)
    c, args, cfg = resolved[COLLECTOR]
    spread = pod_spec(dep)["topologySpreadConstraints"]
    assert any(s["topologyKey"] == "kubernetes.io/hostname"
               and selects(s["labelSelector"]["matchLabels"], dep["spec"]["template"]["metadata"]["labels"])
               for s in spread)
    res = c["resources"]
    assert str(res["requests"]["cpu"]) == str(res["limits"]["cpu"]) and "memory" in res["limits"]
    assert cfg.training.collector_threads == collector_mujoco_threads(int(str(res["limits"]["cpu"])))


def test_network_policy_admits_only_collectors_to_the_zeromq_ports(resolved, k8s_objects):
    """The policy selects the learner pods and lets only pods with the collector labels reach 5555/5556."""
    policy = find(k8s_objects, "NetworkPolicy", LEARNER)
    learner_labels = find(k8s_objects, "StatefulSet", LEARNER)["spec"]["template"]["metadata"]["labels"]
    collector_labels = find(k8s_objects, "Deployment", COLLECTOR)["spec"]["template"]["metadata"]["labels"]
    tb_labels = find(k8s_objects, "Deployment", TENSORBOARD)["spec"]["template"]["metadata"]["labels"]
    assert selects(policy["spec"]["podSelector"]["matchLabels"], learner_labels)
    assert policy["spec"]["policyTypes"] == ["Ingress"]
    _, _, cfg = resolved[LEARNER]
    listen = int(cfg.transport.listen.rsplit(":", 1)[1])
    for rule in policy["spec"]["ingress"]:
        ports = {p["port"] for p in rule["ports"]}
        if ports & {listen, listen + 1}:
            assert all("namespaceSelector" not in peer and "ipBlock" not in peer for peer in rule["from"])
            peers = [peer["podSelector"]["matchLabels"] for peer in rule["from"]]
            assert all(selects(p, collector_labels) and not selects(p, tb_labels) for p in peers)
        else:
            assert ports == {cfg.training.status_port}


def test_tensorboard_reads_the_learner_volume_on_the_learners_node(resolved, k8s_objects):
    """TensorBoard mounts the learner's PVC read-only, on the learner's node (RWO), with --logdir = training.log_dir."""
    _, _, cfg = resolved[LEARNER]
    sts = find(k8s_objects, "StatefulSet", LEARNER)
    tb = find(k8s_objects, "Deployment", TENSORBOARD)
    c = only_container(tb)
    template = sts["spec"]["volumeClaimTemplates"][0]
    claim = f"{template['metadata']['name']}-{sts['metadata']['name']}-0"
    assert template["spec"]["accessModes"] == ["ReadWriteOnce"]
    vol = next(v for v in pod_spec(tb)["volumes"] if "persistentVolumeClaim" in v)
    assert vol["persistentVolumeClaim"] == {"claimName": claim, "readOnly": True}
    learner_mount = next(m for m in only_container(sts)["volumeMounts"] if m["name"] == template["metadata"]["name"])
    tb_mount = next(m for m in c["volumeMounts"] if m["name"] == vol["name"])
    assert tb_mount["mountPath"] == learner_mount["mountPath"] and tb_mount["readOnly"]
    assert c["args"][c["args"].index("--logdir") + 1] == cfg.training.log_dir
    assert c["command"] == ["tensorboard"] and "tensorboard" in installed_packages(image_of(c["image"])[0]), \
        f"{c['image']} does not install TensorBoard"
    affinity = pod_spec(tb)["affinity"]["podAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][0]
    assert affinity["topologyKey"] == "kubernetes.io/hostname"
    assert selects(affinity["labelSelector"]["matchLabels"], sts["spec"]["template"]["metadata"]["labels"])
    assert tb["spec"]["strategy"]["type"] == "Recreate"
    svc = find(k8s_objects, "Service", TENSORBOARD)
    assert container_port(c, svc["spec"]["ports"][0]["targetPort"]) == int(c["args"][c["args"].index("--port") + 1])


def test_images_are_the_dockerfiles_images_at_the_project_version(k8s_objects):
    """Every pod image is appo-learner or appo-collector at pyproject's version, as the Dockerfile labels say."""
    seen = set()
    for w in workloads(k8s_objects):
        for c in pod_spec(w)["containers"]:
            name, tag = image_of(c["image"])
            assert name in DOCKERFILES and tag == project_version(), c["image"]
            seen.add(name)
    assert seen == set(DOCKERFILES)


def test_pods_meet_the_restricted_pod_security_standard(k8s_objects):
    """Non-root uid 10001 (the images' USER), fsGroup for keys and volumes, RuntimeDefault seccomp, no escalation,
    read-only root."""
    ns = find(k8s_objects, "Namespace", "appo")
    assert ns["metadata"]["labels"]["pod-security.kubernetes.io/enforce"] == "restricted"
    for w in workloads(k8s_objects):
        spec = pod_spec(w)
        sc = spec["securityContext"]
        assert sc["runAsNonRoot"] is True and sc["runAsUser"] == 10001
        assert sc["seccompProfile"]["type"] == "RuntimeDefault"
        for v in spec.get("volumes", []):
            mode = v.get("secret", {}).get("defaultMode", 0o644)
            if ("secret" in v and not mode & 0o004) or "persistentVolumeClaim" in v:
                where = f"{w['metadata']['name']}: {v['name']}"
                assert sc.get("fsGroup") == sc["runAsGroup"] == 10001, f"{where} unreadable"
        for c in spec["containers"]:
            csc = c["securityContext"]
            assert csc["allowPrivilegeEscalation"] is False and csc["capabilities"]["drop"] == ["ALL"]
            assert csc["readOnlyRootFilesystem"] is True
            tmp = [m for m in c["volumeMounts"] if m["mountPath"] == "/tmp"]
            assert tmp, f"{c['name']}: a read-only root needs a writable /tmp"
            env = {e["name"]: e.get("value") for e in c.get("env", [])}
            assert env.get("HOME") == "/tmp" and c.get("workingDir") == "/tmp"
