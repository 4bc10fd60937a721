"""Fixtures of the container tests: a Docker engine that answers, the three images built, free ports."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

# The deploy tests' readers of the deployment files (kustomize, compose, Dockerfiles) are shared.
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "deploy"))

from container_helpers import docker, ensure_images  # noqa: E402
from deploy_manifests import render_k8s  # noqa: E402


@pytest.fixture(scope="session", autouse=True)
def engine() -> None:
    """The engine answers and the images exist (containers/test-containers.sh builds them before pytest)."""
    out = docker("info", "--format", "{{.ServerVersion}}", check=False)
    assert out.returncode == 0, f"no Docker engine answers: {out.stderr.strip()} (run: make test-containers)"
    ensure_images()


@pytest.fixture(scope="session")
def k8s_objects() -> list[dict]:
    """`kubectl kustomize k8s/`, parsed."""
    return render_k8s()
