"""appo-train's local collector processes: started, supervised (restarted with back-off), stopped with the run."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from common.logging import get_logger

log = get_logger("train")
MAX_BACKOFF_S = 60.0


@dataclass
class _Slot:
    """One local collector's process and its restart bookkeeping."""

    proc: subprocess.Popen | None = None
    restarts: int = 0
    restart_at: float | None = None  # when a crashed collector is due to start again
    given_up: bool = False


class LocalCollectors:
    """appo-train's collector processes: started with the run, restarted with back-off when they crash, stopped."""

    def __init__(self, count: int, config_path: Path, shm_dir: Path, threads: int, log_dir: Path,
                 max_restarts: int = 5, backoff_s: float = 1.0, nice: int = 0):
        self.config_path = config_path
        self.shm_dir = shm_dir
        self.threads = threads
        self.log_dir = log_dir
        self.max_restarts = max_restarts
        self.backoff_s = backoff_s
        self.nice = nice
        self.slots = [_Slot() for _ in range(count)]
        self.stopping = False

    @property
    def procs(self) -> list[subprocess.Popen]:
        return [s.proc for s in self.slots if s.proc is not None]

    def log_path(self, i: int) -> Path:
        return self.log_dir / f"collector_{i}.log"

    def _spawn(self, i: int) -> subprocess.Popen:
        cmd = [
            sys.executable, "-m", "collector.main",
            "--config", str(self.config_path),
            "--shm-dir", str(self.shm_dir),
            "--collector-id", str(i),
            "--threads", str(self.threads),
            "training.collector_status_port=0",  # several local collectors cannot share one port
            f"training.collector_nice={self.nice}",
        ]
        env = {**os.environ, "APPO_LOG_FORMAT": os.environ.get("APPO_LOG_FORMAT", "json")}
        with open(self.log_path(i), "ab") as out:
            return subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, env=env)

    def start(self) -> None:
        for i, slot in enumerate(self.slots):
            slot.proc = self._spawn(i)
        log.info("collectors started", count=len(self.slots), threads_each=self.threads, nice=self.nice)

    def tail(self, i: int, lines: int = 20) -> str:
        try:
            return "\n".join(self.log_path(i).read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""

    def check(self) -> str | None:
        """Restart crashed collectors (with back-off, up to max_restarts); a problem string once none can run."""
        now = time.monotonic()
        for i, slot in enumerate(self.slots):
            if slot.restart_at is not None and now >= slot.restart_at and not self.stopping:
                slot.restart_at = None
                slot.proc = self._spawn(i)
                log.info("collector restarted", id=i, restarts=slot.restarts)
                continue
            code = slot.proc.poll() if slot.proc else None
            if code in (None, 0) or slot.restart_at is not None or slot.given_up:
                continue
            log.error("collector died", id=i, exit_code=code, log=str(self.log_path(i)), tail=self.tail(i))
            if slot.restarts < self.max_restarts and not self.stopping:
                delay = min(MAX_BACKOFF_S, self.backoff_s * 2**slot.restarts)
                slot.restarts += 1
                slot.restart_at = now + delay
                log.info("collector restart scheduled", id=i, in_s=delay, attempt=slot.restarts, of=self.max_restarts)
            else:
                slot.given_up = True
                log.error("collector not restarted", id=i, restarts=slot.restarts, limit=self.max_restarts)
        running = [s for s in self.slots if s.restart_at is not None or (s.proc and s.proc.poll() is None)]
        if not running:
            codes = [s.proc.returncode for s in self.slots if s.proc]
            return f"every collector exited (exit codes {codes}); see {self.log_dir}/collector_*.log"
        return None

    def stop(self, timeout: float = 10.0) -> None:
        """The learner has already asked them to stop through the transport; wait, then terminate."""
        self.stopping = True
        deadline = time.monotonic() + timeout
        for p in self.procs:
            try:
                p.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                p.terminate()
        for p in self.procs:
            try:
                p.wait(timeout=5)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
