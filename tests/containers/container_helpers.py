"""Driving a local Docker engine from the container tests: the CLI, Compose v2, status servers, waits.

The images are built before these tests run (containers/test-containers.sh, `make test-containers`);
every container runs on the host's network, so each test picks free loopback ports.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
from pathlib import Path

from deploy_manifests import ROOT, compose_binary, compose_env, project_version

from common.status_server import parse_metrics
from common.status_server import probe as http_get  # (status, body) of a GET; 0 when nothing answers

VERSION = project_version()
IMAGES = {name: f"appo-{name}:{VERSION}" for name in ("learner", "collector", "collector-motrix", "eval")}
HERE = Path(__file__).resolve().parent


def docker_cli() -> str:
    path = os.environ.get("APPO_DOCKER") or shutil.which("docker")
    assert path, "no docker CLI on PATH (make test-containers installs Debian's docker.io)"
    return path


def docker(*args: str, check: bool = True, timeout: float = 120) -> subprocess.CompletedProcess:
    out = subprocess.run([docker_cli(), *args], capture_output=True, text=True, timeout=timeout)
    if check:
        assert out.returncode == 0, f"docker {' '.join(args)} failed ({out.returncode}):\n{out.stdout}{out.stderr}"
    return out


def inspect(obj: str, fmt: str) -> str:
    """`docker inspect -f fmt obj`, '' when the object does not exist (yet)."""
    out = docker("inspect", "-f", fmt, obj, check=False)
    return out.stdout.strip() if out.returncode == 0 else ""


def state(container: str) -> dict:
    """The container's .State plus RestartCount ({} when it does not exist)."""
    text = inspect(container, '{"state": {{json .State}}, "restarts": {{.RestartCount}}}')
    if not text:
        return {}
    parsed = json.loads(text)
    return {**parsed["state"], "RestartCount": parsed["restarts"]}


def main_pid(container: str) -> int:
    """The host pid of the container's own process: its State.Pid, or that process's child when it is the
    engine's init (`init: true`; a container that joins another's PID namespace gets no init)."""
    pid = state(container)["Pid"]
    if b"docker-init" in Path(f"/proc/{pid}/cmdline").read_bytes():
        children = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
        assert children, f"{container}: its init has no child"
        return int(children[0])
    return pid


def exits_since(container: str, since: float) -> list[int]:
    """Exit codes of the container's process since `since` (epoch seconds), from the engine's event log."""
    out = docker("events", "--since", f"{since:.0f}", "--until", f"{time.time():.0f}", "--filter",
                 f"container={container}", "--filter", "event=die", "--format", "{{.Actor.Attributes.exitCode}}")
    return [int(code) for code in out.stdout.split()]


def health(container: str) -> str:
    return (state(container).get("Health") or {}).get("Status", "")


def logs(container: str) -> str:
    out = docker("logs", container, check=False)
    return out.stdout + out.stderr


def json_events(container: str, event: str) -> list[dict]:
    """The container's JSON log lines whose "event" is `event` (APPO_LOG_FORMAT=json)."""
    found = []
    for line in logs(container).splitlines():
        if line.startswith("{") and f'"{event}"' in line:
            try:
                record = json.loads(line)
            except ValueError:
                continue
            if record.get("event") == event:
                found.append(record)
    return found


def metrics(port: int) -> dict[str, float]:
    """A status server's /metrics on 127.0.0.1 as {series: value}; {} when it does not answer."""
    status, body = http_get(f"http://127.0.0.1:{port}/metrics")
    return parse_metrics(body) if status == 200 else {}


def wait_for(predicate, timeout: float, what: str, diagnostics=None, interval: float = 0.5):
    """Poll until predicate() is truthy (its value is returned) or fail after `timeout` s with diagnostics().

    Polls every `interval` s (e2e_helpers.wait_for polls every 50 ms, too often for docker CLI calls on two cores).
    """
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() >= deadline:
            detail = diagnostics() if diagnostics else ""
            raise AssertionError(f"timed out after {timeout} s waiting for {what}\n{detail}")
        time.sleep(interval)


def holds_for(predicate, seconds: float, what: str, diagnostics=None, interval: float = 1.0) -> None:
    """Assert predicate() stays truthy for `seconds` s, checked every `interval` s (a negative property needs time)."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        assert predicate(), f"{what} stopped holding\n{diagnostics() if diagnostics else ''}"
        time.sleep(interval)


def volume_path(volume: str) -> Path:
    """Where a local named volume lives on this host (the tests run as root, like the engine)."""
    path = inspect(volume, "{{.Mountpoint}}")
    assert path, f"no volume {volume}"
    return Path(path)


def ensure_images() -> None:
    missing = [img for img in IMAGES.values() if not inspect(img, "{{.Id}}")]
    assert not missing, f"images missing: {missing}; build them: containers/build-images.sh (make test-containers)"


class Compose:
    """One Compose project: the repository's compose file plus a test override, under a test project name."""

    def __init__(self, project: str, files: list[str], env: dict[str, str], home: Path):
        self.project, self.env = project, env
        self.cmd = [compose_binary(), "--project-directory", str(ROOT), "-p", project]
        for f in files:
            self.cmd += ["-f", str(ROOT / f if not Path(f).is_absolute() else f)]
        home.mkdir(parents=True, exist_ok=True)
        self.base_env = compose_env(home, **{k: v for k, v in os.environ.items() if k == "DOCKER_HOST"})

    def __call__(self, *args: str, check: bool = True, timeout: float = 300, **env: str) -> subprocess.CompletedProcess:
        out = subprocess.run([*self.cmd, *args], capture_output=True, text=True, timeout=timeout,
                             env={**self.base_env, **self.env, **env})
        if check:
            assert out.returncode == 0, (f"docker compose {' '.join(args)} failed ({out.returncode}):\n"
                                         f"{out.stdout}{out.stderr}\n{self.diagnostics()}")
        return out

    def container(self, service: str, index: int = 1) -> str:
        return f"{self.project}-{service}-{index}"

    def volume(self, name: str) -> str:
        return f"{self.project}_{name}"

    def containers(self) -> list[str]:
        out = docker("ps", "-a", "--filter", f"label=com.docker.compose.project={self.project}",
                     "--format", "{{.Names}}", check=False)
        return sorted(out.stdout.split())

    def diagnostics(self) -> str:
        parts = []
        for name in self.containers():
            s = state(name)
            parts.append(f"--- {name}: {s.get('Status')} exit={s.get('ExitCode')} restarts={s.get('RestartCount')} "
                         f"health={(s.get('Health') or {}).get('Status')} error={s.get('Error')!r}")
            parts.append("\n".join(logs(name).splitlines()[-15:]))
        return "\n".join(parts)

    def down(self) -> None:
        self("down", "-v", "--remove-orphans", "-t", "5", check=False, timeout=180)
