"""appo-train's local collector processes: started, watched, and stopped with the run."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

from common.logging import get_logger

log = get_logger("train")


class LocalCollectors:
    def __init__(self, count: int, config_path: Path, shm_dir: Path, threads: int, log_dir: Path):
        self.count = count
        self.config_path = config_path
        self.shm_dir = shm_dir
        self.threads = threads
        self.log_dir = log_dir
        self.procs: list[subprocess.Popen] = []
        self.reported: set[int] = set()

    def log_path(self, i: int) -> Path:
        return self.log_dir / f"collector_{i}.log"

    def start(self) -> None:
        for i in range(self.count):
            cmd = [
                sys.executable, "-m", "collector.main",
                "--config", str(self.config_path),
                "--shm-dir", str(self.shm_dir),
                "--collector-id", str(i),
                "--threads", str(self.threads),
            ]
            with open(self.log_path(i), "ab") as out:
                env = {**os.environ, "APPO_LOG_FORMAT": os.environ.get("APPO_LOG_FORMAT", "json")}
                self.procs.append(subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, env=env))
        log.info("collectors started", count=self.count, threads_each=self.threads)

    def tail(self, i: int, lines: int = 20) -> str:
        try:
            return "\n".join(self.log_path(i).read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""

    def check(self) -> str | None:
        """Report collectors that died; a problem string once none is left running."""
        for i, p in enumerate(self.procs):
            code = p.poll()
            if code not in (None, 0) and i not in self.reported:
                self.reported.add(i)
                log.error("collector died", id=i, exit_code=code, log=str(self.log_path(i)), tail=self.tail(i))
        if self.procs and all(p.poll() is not None for p in self.procs):
            codes = [p.returncode for p in self.procs]
            return f"every collector exited (exit codes {codes}); see {self.log_dir}/collector_*.log"
        return None

    def stop(self, timeout: float = 10.0) -> None:
        """The learner has already asked them to stop through the transport; wait, then terminate."""
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
