"""Chaos soak: ZeroMQ training in the namespace lab under a schedule of network faults, freezes, floods and kill -9s.

    python -m benchmarks.chaos_soak --minutes 60 --json chaos.json
    python -m benchmarks.chaos_soak --minutes 1 --fault-s 4 --gap-s 1.5   # the short version of make test

Hosts: learner, c1, c2, c3 (which reaches the learner through the lab's delay proxy) and a flooder.
The schedule below repeats until the time is up; each fault is held --fault-s seconds, then the lab
runs clean for --gap-s:

  loss               8% of c1's packets dropped
  rate               c1 capped at 20 Mbit/s
  delay              c3's link 150 +- 50 ms
  partition          c1's link down (longer than the peer timeout)
  learner_partition  the learner's link down: every collector cut off
  freeze             c2 stopped (SIGSTOP), then continued
  flood              2,000 hellos from fake identities, then 10,000 garbage frames, from the flooder
  kill_collector     SIGKILL c2, started again
  kill_learner       SIGKILL the learner, started again with --resume latest

A fault's recovery is the time from its end until the learner trains on the collector it hit again
(that collector's trained-rollout count grows; for the learner's faults, its iteration count).  At the
end the learner is stopped with SIGTERM and resumed once more (--resume latest must go on from its last
checkpoint).  The report: faults by kind, recovery times, rollouts refused by reason (summed over the
learner's lives), the trained fraction, the learner's RSS over time and the resume check.
"""

from __future__ import annotations

import argparse
import json
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter, defaultdict
from pathlib import Path

from benchmarks.netlab import NetLab, netns_available
from benchmarks.soak import rss_mb
from common.status_server import parse_metrics

FAULTS = ("loss", "rate", "delay", "partition", "learner_partition", "freeze", "flood", "kill_collector",
          "kill_learner")
# The collector a fault hits, whose trained rollouts mark its recovery (None: the learner's iterations do).
TARGET = {"loss": "c1", "rate": "c1", "delay": "c3", "partition": "c1", "learner_partition": None, "freeze": "c2",
          "flood": None, "kill_collector": "c2", "kill_learner": None}
STATUS_PORT = 9100
PROBE = f"""
import sys, urllib.request
try:
    sys.stdout.write(urllib.request.urlopen("http://127.0.0.1:{STATUS_PORT}/metrics", timeout=3).read().decode())
except OSError:
    pass
"""


class ChaosSoak:
    """One soak: the lab, the learner and three collectors, the fault schedule, and what was seen."""

    def __init__(self, args: argparse.Namespace):
        self.args = args
        self.lab = NetLab()
        self.work = Path(args.log_dir)
        self.run_dir = self.work / "run"
        self.work.mkdir(parents=True, exist_ok=True)
        self.learner_addr = self.lab.add_host("learner")
        for host in ("c1", "c2", "c3", "flooder"):
            self.lab.add_host(host)
        self.collectors: dict[str, subprocess.Popen] = {}
        self.learner: subprocess.Popen | None = None
        self.proxy: subprocess.Popen | None = None
        self.t0 = time.monotonic()
        self.events: list[str] = []
        self.injected: Counter[str] = Counter()
        self.recoveries: dict[str, list[float]] = defaultdict(list)
        self.unrecovered: list[str] = []
        self.refused_before: Counter[str] = Counter()  # refusals counted by earlier lives of the learner
        self.last_metrics: dict[str, float] = {}
        self.rss: list[tuple[float, float]] = []
        # Each life of the learner: its RSS once it trains (warm), and the most it reached after that.
        self.warm_rss: dict[int, float] = {}
        self.max_rss: dict[int, float] = {}

    # ------------------------------------------------------------------ processes

    def config(self) -> list[str]:
        a = self.args
        return ["--task", a.task, f"algo.num_envs={a.num_envs}", f"algo.steps_per_env={a.steps_per_env}",
                "algo.policy.actor_hidden_dims=[64,64]", "algo.policy.critic_hidden_dims=[64,64]",
                "transport.heartbeat_s=0.5", f"transport.peer_timeout_s={a.peer_timeout_s}", "training.console=false"]

    def say(self, msg: str) -> None:
        line = f"[{time.monotonic() - self.t0:7.1f}s] {msg}"
        self.events.append(line)
        print(line, flush=True)

    def start_learner(self, resume: bool) -> None:
        argv = [sys.executable, "-m", "learner.main", *self.config(), "--listen", "tcp://0.0.0.0:5555",
                "--log-dir", str(self.run_dir), "algo.max_iterations=100000000",
                f"algo.save_interval={self.args.save_interval}", f"training.status_port={STATUS_PORT}",
                f"training.max_policy_lag={self.args.max_policy_lag}", "training.collector_gone_timeout_s=600"]
        if resume:
            argv += ["--resume", "latest"]
        with open(self.work / "learner.log", "a") as log:
            self.learner = self.lab.popen("learner", argv, stdout=subprocess.DEVNULL, stderr=log)
        self.say(f"learner started (pid {self.learner.pid}, resume={resume})")

    def start_collector(self, name: str) -> None:
        learner = "tcp://127.0.0.1:5555" if name == "c3" else f"tcp://{self.learner_addr}:5555"
        argv = [sys.executable, "-m", "collector.main", *self.config(), "--learner", learner,
                f"transport.collector_name={name}"]
        with open(self.work / f"{name}.log", "a") as log:
            self.collectors[name] = self.lab.popen(name, argv, stdout=subprocess.DEVNULL, stderr=log)

    def metrics(self) -> dict[str, float]:
        """The learner's /metrics, read inside its namespace ({} while it is down or cut off from nothing)."""
        out = subprocess.run(["ip", "netns", "exec", self.lab.hosts["learner"], sys.executable, "-c", PROBE],
                             capture_output=True, text=True, timeout=30).stdout
        m = parse_metrics(out)
        if m:
            self.last_metrics = m
        return m

    def iterations(self) -> float:
        return self.metrics().get("appo_iterations_total", -1.0)

    def trained(self, collector: str) -> float:
        return self.metrics().get(f'appo_rollouts_received_total{{collector="{collector}"}}', -1.0)

    def refused(self) -> Counter[str]:
        counts = Counter()
        for key, value in self.last_metrics.items():
            if key.startswith("appo_refused_messages_total{"):
                counts[key.split('reason="', 1)[1].split('"', 1)[0]] = int(value)
        return counts

    def sample_rss(self) -> None:
        if self.learner and self.learner.poll() is None:
            r = rss_mb(self.learner.pid)
            if r:
                self.rss.append((round(time.monotonic() - self.t0, 1), round(r, 1)))
                if self.learner.pid in self.warm_rss:
                    self.max_rss[self.learner.pid] = max(self.max_rss.get(self.learner.pid, r), r)

    def mark_warm(self) -> None:
        """The learner trains now: its RSS from here on is held against this one."""
        r = rss_mb(self.learner.pid)
        if r:
            self.warm_rss[self.learner.pid] = self.max_rss[self.learner.pid] = r

    def wait(self, cond, timeout: float) -> float | None:
        """Seconds until cond() held (sampling RSS meanwhile), or None at the timeout."""
        start = time.monotonic()
        while time.monotonic() - start < timeout:
            if cond():
                return time.monotonic() - start
            self.sample_rss()
            time.sleep(0.5)
        return None

    # ------------------------------------------------------------------ faults

    def inject(self, kind: str) -> None:
        a, lab = self.args, self.lab
        target = TARGET[kind]
        before = self.iterations() if target is None else self.trained(target)
        self.injected[kind] += 1
        self.say(f"fault {kind} for {a.fault_s:.0f} s")
        if kind == "loss":
            lab.drop("c1", 0.08)
        elif kind == "rate":
            lab.rate_limit("c1", 20)
        elif kind == "delay":
            self.proxy.send_signal(signal.SIGUSR1)
        elif kind == "partition":
            lab.set_link("c1", up=False)
        elif kind == "learner_partition":
            lab.set_link("learner", up=False)
        elif kind == "freeze":
            self.collectors["c2"].send_signal(signal.SIGSTOP)
        elif kind == "flood":
            rss = rss_mb(self.learner.pid) or 0.0
            flooder = lab.popen("flooder", [sys.executable, "-m", "benchmarks.flood",
                                            "--learner", f"tcp://{self.learner_addr}:5555", "--hellos", "2000",
                                            "--garbage", "10000", "--task", a.task, "--num-envs", str(a.num_envs),
                                            "--steps-per-env", str(a.steps_per_env)],
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            flooder.wait(timeout=max(120.0, a.fault_s))
            self.say(f"flood sent; learner RSS {rss:.0f} -> {rss_mb(self.learner.pid) or 0:.0f} MB")
        elif kind == "kill_collector":
            self.collectors["c2"].kill()
            self.collectors["c2"].wait()
        elif kind == "kill_learner":
            self.metrics()
            self.refused_before.update(self.refused())
            self.learner.kill()
            self.learner.wait()
        self.wait(lambda: False, a.fault_s)  # the fault holds for its time
        if kind in ("loss", "rate"):
            lab.clear_faults("c1")
        elif kind == "delay":
            self.proxy.send_signal(signal.SIGUSR1)
        elif kind == "partition":
            lab.set_link("c1", up=True)
        elif kind == "learner_partition":
            lab.set_link("learner", up=True)
        elif kind == "freeze":
            self.collectors["c2"].send_signal(signal.SIGCONT)
        elif kind == "kill_collector":
            self.start_collector("c2")
        elif kind == "kill_learner":
            self.start_learner(resume=True)
        ended = time.monotonic()
        if kind == "kill_learner":
            base = self.checkpoint_iteration()  # the resumed learner goes on from its newest checkpoint
        elif kind == "kill_collector":
            base = self.trained(target)  # the new c2 is counted under the same name
        else:
            base = max(before, self.iterations() if target is None else self.trained(target))
        took = self.wait(lambda: (self.iterations() if target is None else self.trained(target)) > base,
                         a.recovery_timeout_s)
        if took is None:
            self.unrecovered.append(kind)
            self.say(f"{kind}: NOT recovered within {a.recovery_timeout_s:.0f} s")
        else:
            took = time.monotonic() - ended
            self.recoveries[kind].append(round(took, 1))
            if kind == "kill_learner":
                self.wait(lambda: False, min(30.0, a.gap_s * 3))
                self.mark_warm()
            self.say(f"{kind}: recovered {took:.1f} s after the fault ended")

    def checkpoint_iteration(self) -> int:
        """The iteration of the newest checkpoint in the run directory (-1: none yet)."""
        return max((int(p.stem.split("_")[1]) for p in self.run_dir.glob("model_*.pt")), default=-1)

    # ------------------------------------------------------------------ the run

    def run(self) -> dict:
        a = self.args
        self.start_learner(resume=False)
        self.proxy = self.lab.delay_proxy("c3", [5555, 5556], self.learner_addr, 150, 50,
                                          self.work / "proxy.log", start_on=False)
        for name in ("c1", "c2", "c3"):
            self.start_collector(name)
        ok = self.wait(lambda: all(self.trained(c) >= 3 for c in ("c1", "c2", "c3")), 180)
        if ok is None:
            raise RuntimeError("training did not start on all three collectors within 180 s")
        self.say("training on c1, c2, c3")
        self.wait(lambda: False, min(30.0, a.gap_s * 3))  # past the first laps' allocations
        self.mark_warm()
        end = self.t0 + a.minutes * 60
        i = 0
        while time.monotonic() + a.fault_s + a.gap_s < end or i < len(FAULTS) and a.every_fault:
            self.inject(FAULTS[i % len(FAULTS)])
            i += 1
            self.wait(lambda: False, a.gap_s)
        return self.finish()

    def finish(self) -> dict:
        self.metrics()
        refused = self.refused_before + self.refused()
        rss_values = [r for _, r in self.rss]
        self.say("SIGTERM learner")
        self.learner.send_signal(signal.SIGTERM)
        code = self.learner.wait(timeout=120)
        summary = json.loads((self.run_dir / "summary.json").read_text())
        stopped_at = summary["completed_iterations"]
        self.start_learner(resume=True)
        went_on = self.wait(lambda: self.iterations() >= stopped_at + 3, 120)
        self.learner.send_signal(signal.SIGTERM)
        resume_code = self.learner.wait(timeout=120)
        resumed = json.loads((self.run_dir / "summary.json").read_text())
        report = {
            "minutes": round((time.monotonic() - self.t0) / 60, 1),
            "faults_injected": dict(self.injected),
            "recovery_s": {k: v for k, v in self.recoveries.items()},
            "recovery_s_median": {k: statistics.median(v) for k, v in self.recoveries.items()},
            "recovery_s_max": {k: max(v) for k, v in self.recoveries.items()},
            "unrecovered": self.unrecovered,
            "refused_by_reason": dict(refused),
            "trained_fraction": summary.get("trained_fraction"),
            "iterations": stopped_at,
            "env_steps": summary.get("total_env_steps"),
            "stop_exit_code": code,
            "stop_status": summary.get("status"),
            "rss_mb": {"min": min(rss_values, default=None), "max": max(rss_values, default=None),
                       "last": rss_values[-1] if rss_values else None},
            # Per life of the learner: warm RSS (once it trained) and the most it reached after that.
            "rss_growth_mb": max((self.max_rss[p] - w for p, w in self.warm_rss.items()), default=None),
            "rss_warm_to_max_mb": [(round(w), round(self.max_rss[p])) for p, w in self.warm_rss.items()],
            "rss_over_time": self.rss[:: max(1, len(self.rss) // 60)],
            "resume_check": {"stopped_at": stopped_at, "went_on": went_on is not None,
                             "resumed_to": resumed.get("completed_iterations"), "exit_code": resume_code},
            "events": self.events,
        }
        return report

    def close(self) -> None:
        self.lab.close()


def verdict(r: dict) -> list[str]:
    problems = []
    if r["unrecovered"]:
        problems.append(f"not recovered: {r['unrecovered']}")
    missing = [k for k in FAULTS if not r["faults_injected"].get(k)]
    if missing:
        problems.append(f"faults never injected: {missing}")
    if r["stop_exit_code"] != 0 or r["stop_status"] != "interrupted":
        problems.append(f"stop was not clean (exit {r['stop_exit_code']}, status {r['stop_status']})")
    rc = r["resume_check"]
    if not rc["went_on"] or rc["exit_code"] != 0 or (rc["resumed_to"] or 0) <= rc["stopped_at"]:
        problems.append(f"resume check failed: {rc}")
    if r["rss_growth_mb"] is not None and r["rss_growth_mb"] > 64:
        problems.append(f"learner RSS grew {r['rss_growth_mb']:.0f} MB past its warm value (more than 64 MB)")
    return problems


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.chaos_soak", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--minutes", type=float, default=60)
    p.add_argument("--fault-s", type=float, default=40, help="how long each fault holds (default 40)")
    p.add_argument("--gap-s", type=float, default=20, help="clean seconds between faults (default 20)")
    p.add_argument("--recovery-timeout-s", type=float, default=60)
    p.add_argument("--peer-timeout-s", type=float, default=5, help="transport.peer_timeout_s of every process")
    p.add_argument("--max-policy-lag", type=int, default=20)
    p.add_argument("--task", default="inverted_pendulum")
    p.add_argument("--num-envs", type=int, default=64)
    p.add_argument("--steps-per-env", type=int, default=16)
    p.add_argument("--save-interval", type=int, default=50)
    p.add_argument("--every-fault", action="store_true", help="inject each kind at least once, however short")
    p.add_argument("--log-dir", default=None, help="where the run and the logs go (default: a temporary folder)")
    p.add_argument("--json", help="write the report here")
    args = p.parse_args(argv)
    ok, why = netns_available()
    if not ok:
        print(f"error: {why}", file=sys.stderr)
        return 2
    args.log_dir = args.log_dir or tempfile.mkdtemp(prefix="appo-chaos-")
    soak = ChaosSoak(args)
    try:
        report = soak.run()
    finally:
        soak.close()
    report["problems"] = verdict(report)
    print(json.dumps({k: v for k, v in report.items() if k not in ("events", "rss_over_time")}, indent=2))
    if args.json:
        Path(args.json).write_text(json.dumps(report, indent=2))
    print("PASS" if not report["problems"] else "FAIL: " + "; ".join(report["problems"]))
    return 0 if not report["problems"] else 1


if __name__ == "__main__":
    sys.exit(main())
