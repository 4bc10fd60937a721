"""Soak: a long appo-train run under faults, checked for leaks and leftovers.

    python -m benchmarks.soak --minutes 30 --task half_cheetah

A collector is killed (SIGKILL) every --kill-collector-every seconds (the
supervisor restarts it); the learner is killed (SIGKILL) at 1/3 and 2/3 of the
time and restarted with --resume latest.  At the end the run is stopped with
SIGTERM and checked: it completed its lap cleanly, the resident memory of the
learner and of the collectors is within 10% of its value after warm-up, and no
process or shared-memory directory is left behind.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

from common.transport.shm import DIR_PREFIX


def rss_mb(pid: int) -> float | None:
    try:
        with open(f"/proc/{pid}/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20
    except OSError:
        return None


def children(pid: int) -> list[int]:
    out = subprocess.run(["pgrep", "-P", str(pid)], capture_output=True, text=True).stdout
    return [int(p) for p in out.split()]


def shm_dirs(root: Path) -> set[str]:
    return {p.name for p in root.glob(DIR_PREFIX + "*")}


class Soak:
    """One soak run: starts appo-train, injects the kills, samples memory, and collects the end checks."""

    def __init__(self, args: argparse.Namespace):
        self.args = args
        self.run_dir = Path(args.log_dir)
        self.shm_root = Path(args.shm_root)
        self.events: list[str] = []
        self.proc: subprocess.Popen | None = None
        self.started = 0.0
        self.all_pids: set[int] = set()
        self.learner_pids: list[int] = []

    def say(self, msg: str) -> None:
        line = f"[{time.monotonic() - self.t0:7.1f}s] {msg}"
        self.events.append(line)
        print(line, flush=True)

    def start_learner(self, resume: bool) -> None:
        cmd = [sys.executable, "-m", "learner.train", "--task", self.args.task, "--collectors",
               str(self.args.collectors), "--log-dir", str(self.run_dir), "algo.max_iterations=100000000",
               f"algo.save_interval={self.args.save_interval}", "training.console=false",
               f"transport.shm_root={self.shm_root}", "training.collector_max_restarts=1000",
               *self.args.overrides]
        if resume:
            cmd += ["--resume", "latest"]
        # The child gets its own copy of the log's descriptor, so ours can close right after the start.
        with open(self.run_dir.parent / f"{self.run_dir.name}.soak.log", "a") as log:
            self.proc = subprocess.Popen(cmd, stdout=log, stderr=log)
        self.learner_pids.append(self.proc.pid)
        self.started = time.monotonic()
        self.say(f"learner started (pid {self.proc.pid}, resume={resume})")

    def track(self) -> None:
        if self.proc:
            self.all_pids.add(self.proc.pid)
            self.all_pids.update(children(self.proc.pid))

    def sample(self) -> tuple[float | None, list[float]]:
        kids = children(self.proc.pid) if self.proc else []
        return rss_mb(self.proc.pid), [r for r in (rss_mb(k) for k in kids) if r]  # 0: a zombie

    def run(self) -> dict:
        a = self.args
        self.t0 = time.monotonic()
        self.run_dir.parent.mkdir(parents=True, exist_ok=True)
        total = a.minutes * 60
        learner_kills = [total / 3, 2 * total / 3]
        next_collector_kill = a.kill_collector_every
        self.start_learner(resume=False)
        warm: tuple[float | None, list[float]] | None = None
        while time.monotonic() - self.t0 < total:
            time.sleep(2)
            self.track()
            elapsed = time.monotonic() - self.t0
            if learner_kills and elapsed >= learner_kills[0]:
                learner_kills.pop(0)
                self.say("SIGKILL learner")
                self.proc.kill()
                self.proc.wait()
                time.sleep(3)  # collectors notice their learner is gone and exit
                self.start_learner(resume=True)
                warm = None
                continue
            if elapsed >= next_collector_kill and total - elapsed > 60:  # not right before the end sample
                next_collector_kill += a.kill_collector_every
                kids = children(self.proc.pid)
                if kids:
                    victim = random.choice(kids)
                    os.kill(victim, signal.SIGKILL)
                    self.say(f"SIGKILL collector {victim}")
            if warm is None and time.monotonic() - self.started >= a.warmup:
                warm = self.sample()
                self.say(f"warm RSS: learner {warm[0]:.0f} MB, collectors {[round(x) for x in warm[1]]} MB")
        end = self.sample()
        self.say(f"end RSS: learner {end[0]:.0f} MB, collectors {[round(x) for x in end[1]]} MB")
        self.say("SIGTERM learner")
        self.proc.send_signal(signal.SIGTERM)
        code = self.proc.wait(timeout=60)
        time.sleep(1)
        leftovers = sorted(p for p in self.all_pids if os.path.exists(f"/proc/{p}") and not _zombie(p))
        summary = json.loads((self.run_dir / "summary.json").read_text())
        return {
            "minutes": a.minutes,
            "exit_code": code,
            "status": summary["status"],
            "iterations": summary["completed_iterations"],
            "env_steps": summary["total_env_steps"],
            "warm_rss_learner_mb": warm[0] if warm else None,
            "end_rss_learner_mb": end[0],
            "warm_rss_collectors_mb": warm[1] if warm else None,
            "end_rss_collectors_mb": end[1],
            "leftover_processes": leftovers,
            # Only this soak's learners' directories count (other runs may share /dev/shm).
            "leftover_shm": sorted(shm_dirs(self.shm_root) & {f"{DIR_PREFIX}{self.run_dir.name}-{pid}"
                                                              for pid in self.learner_pids}),
            "events": self.events,
        }


def _zombie(pid: int) -> bool:
    try:
        return open(f"/proc/{pid}/stat").read().split()[2] == "Z"
    except OSError:
        return True


def verdict(r: dict) -> list[str]:
    problems = []
    if r["exit_code"] != 0 or r["status"] != "interrupted":
        problems.append(f"stop was not clean (exit {r['exit_code']}, status {r['status']})")
    if r["leftover_processes"]:
        problems.append(f"processes left running: {r['leftover_processes']}")
    if r["leftover_shm"]:
        problems.append(f"shared memory left: {r['leftover_shm']}")
    w, e = r["warm_rss_learner_mb"], r["end_rss_learner_mb"]
    if w and e and abs(e - w) > 0.1 * w:
        problems.append(f"learner RSS moved {w:.0f} -> {e:.0f} MB (more than 10%)")
    wc, ec = r["warm_rss_collectors_mb"] or [], r["end_rss_collectors_mb"]
    if wc and ec and abs(max(ec) - max(wc)) > 0.1 * max(wc):
        problems.append(f"collector RSS moved {max(wc):.0f} -> {max(ec):.0f} MB (more than 10%)")
    return problems


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.soak", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--minutes", type=float, default=30)
    p.add_argument("--task", default="half_cheetah")
    p.add_argument("--collectors", type=int, default=2)
    p.add_argument("--kill-collector-every", type=float, default=180, help="seconds between collector kills")
    p.add_argument("--warmup", type=float, default=120, help="seconds after a learner start to take the warm RSS")
    p.add_argument("--save-interval", type=int, default=20)
    p.add_argument("--log-dir", default=f"logs/soak/{time.strftime('%Y-%m-%d_%H-%M-%S')}")
    p.add_argument("--shm-root", default="/dev/shm")
    p.add_argument("--json", help="write the result here")
    p.add_argument("overrides", nargs="*", help="extra key=value config overrides for the run")
    args = p.parse_intermixed_args(argv)
    result = Soak(args).run()
    problems = verdict(result)
    result["problems"] = problems
    print(json.dumps({k: v for k, v in result.items() if k != "events"}, indent=2))
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=2))
    print("PASS" if not problems else "FAIL: " + "; ".join(problems))
    return 0 if not problems else 1


if __name__ == "__main__":
    sys.exit(main())
