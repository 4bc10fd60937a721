"""Fixtures of the deploy tests: the rendered manifests and the resolved compose models."""

from __future__ import annotations

import pytest
from deploy_manifests import COMPOSE_FILES, compose_model, render_k8s


@pytest.fixture(scope="session")
def k8s_objects() -> list[dict]:
    """`kubectl kustomize k8s/`, parsed."""
    return render_k8s()


@pytest.fixture(scope="session")
def compose_models(tmp_path_factory) -> dict[str, dict]:
    """`docker compose config --format json` of each file combination, in a clean environment."""
    tmp = tmp_path_factory.mktemp("compose")
    return {name: compose_model(files, tmp) for name, files in COMPOSE_FILES.items()}
