"""The seed's env as a benchmarks.parity driver: a child process of the seed's Python (benchmarks/unilab_bridge.py)."""

from __future__ import annotations

import contextlib
import os
import subprocess
from pathlib import Path

import numpy as np

from benchmarks.parity import StepOut, SyncState
from benchmarks.unilab_bridge import receive, send

BRIDGE = Path(__file__).with_name("unilab_bridge.py")
SEED_ENV = {"WANDB_MODE": "disabled", "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}


class SeedDriver:
    """UniLab 1.5.2's env of `task` with `num_envs` envs, driven through the bridge."""

    def __init__(self, task: str, num_envs: int, venv: Path, workdir: Path, names: tuple[list[str], list[str]]):
        self.obs_names, self.critic_names = names
        self.proc = subprocess.Popen([str(venv / "bin" / "python"), str(BRIDGE), "--task", task,
                                      "--envs", str(num_envs)], cwd=workdir, stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                     env={**os.environ, **SEED_ENV})
        try:
            header, _ = receive(self.proc.stdout)
        except EOFError:
            err = self.proc.stderr.read().decode(errors="replace").strip().splitlines()
            raise RuntimeError(f"the seed's env did not start: {err[-1] if err else 'no output'}") from None
        self.term_names: list[str] = header["terms"]

    def _ask(self, op: str, arrays: dict | None = None) -> dict[str, np.ndarray]:
        send(self.proc.stdin, {"op": op}, arrays)
        header, out = receive(self.proc.stdout)
        if not header.get("ok"):
            raise RuntimeError(f"the seed's env refused {op}: {header.get('error')}")
        return out

    def state(self) -> SyncState:
        s = self._ask("state")
        return SyncState(s["qpos"], s["qvel"], s["command"], s["clock"], s["last_action"], s["kp"], s["kd"])

    def load(self, state: SyncState) -> None:
        self._ask("load", {k: np.asarray(v, np.float64) for k, v in vars(state).items()})

    def step(self, actions: np.ndarray) -> StepOut:
        o = self._ask("step", {"actions": np.asarray(actions, np.float64)})
        terms = {name: o["terms"][:, i] for i, name in enumerate(self.term_names)}
        return StepOut(o["obs"], o["critic"], terms, o["terminated"], o["truncated"], o["root_pos"])

    def close(self) -> None:
        if self.proc.poll() is None:
            with contextlib.suppress(EOFError, BrokenPipeError, RuntimeError):  # it may have died: wait or kill
                self._ask("close")
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
