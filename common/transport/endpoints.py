"""Endpoints derived from the one address a collector is given."""

from __future__ import annotations


def split_endpoint(endpoint: str) -> tuple[str, int]:
    """'tcp://host:5555' -> ('tcp://host', 5555)."""
    head, _, port = endpoint.rpartition(":")
    return head, int(port)


def weights_endpoint(endpoint: str) -> str:
    """Weights are published on the port after the rollout port, on the same host."""
    head, port = split_endpoint(endpoint)
    return f"{head}:{port + 1}"
