"""Helpers for driving the real executables on tiny budgets (tests/conftest.py puts tests/ on the path)."""

import json
import subprocess
import sys
import time
from pathlib import Path

BIN = Path(sys.executable).parent


def exe(name: str) -> str:
    return str(BIN / name)


def wait_for(predicate, timeout: float, what: str):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.05)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}")


def children(pid: int) -> list[int]:
    out = subprocess.run(["pgrep", "-P", str(pid)], capture_output=True, text=True).stdout
    return [int(p) for p in out.split()]


def read_summary(run_dir: Path) -> dict:
    return json.loads((run_dir / "summary.json").read_text())





def scalars(run: Path, tag: str) -> list[float]:
    """Values of one TensorBoard scalar written so far (empty if none yet)."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    if not run.is_dir() or not list(run.glob("events*")):
        return []
    acc = EventAccumulator(str(run), size_guidance={"scalars": 0})
    acc.Reload()
    if tag not in acc.Tags()["scalars"]:
        return []
    return [e.value for e in acc.Scalars(tag)]


def last(run: Path, tag: str, default: float = 0.0) -> float:
    values = scalars(run, tag)
    return values[-1] if values else default


def free_port() -> int:
    """A loopback port pair (P, P+1) that is free now: rollouts on P, weights on P+1."""
    import socket

    for _ in range(50):
        with socket.socket() as a:
            a.bind(("127.0.0.1", 0))
            port = a.getsockname()[1]
            if port >= 65534:
                continue
            with socket.socket() as b:
                try:
                    b.bind(("127.0.0.1", port + 1))
                except OSError:
                    continue
            return port
    raise RuntimeError("no free port pair on loopback")
