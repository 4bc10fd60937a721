"""What a flood costs training: trained env-steps/s before, during and after a sustained flood, in the namespace lab.

    python -m benchmarks.flood_impact --curve off     # hellos from fake identities
    python -m benchmarks.flood_impact --curve on      # unknown CURVE keys and raw garbage frames

Hosts: learner, c1, c2 (real collectors) and a flooder.  After a warm-up, three windows of --seconds each: clean,
flooding, clean again.  During the second the flooder repeats rounds of the issue's flood (CURVE off:
2,000 hellos from fresh identities; CURVE on: 1,000 connections with unknown keys, then 10,000 garbage frames
over raw TCP) until the window is over.  The flooder runs at nice 19 by default: on a cluster it is another
machine, here it shares the cores, and its own work must not be charged to the learner; it then floods only as
fast as the cores left over allow, so the report gives its rate.  --flooder-nice 0 floods as fast as it can, at
the price of taking cores from the collectors itself.

The report: trained env-steps/s per window (from the learner's perf/total_env_steps and their wall times) and the
ratio flooding/clean, the learner's RSS (warm, most during the flood, after), what the flooder sent and how it
was answered, and the refusals counted by reason.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from benchmarks.netlab import NetLab, netns_available
from benchmarks.soak import rss_mb
from tools.tb_scalars import read_scalars, wait_first_iteration

PORT = 5555


def cpu_s(pid: int) -> float:
    """CPU seconds (user + system) a process has used so far, all its threads."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def steps_between(points: list[tuple[float, int, float]], t0: float, t1: float) -> float:
    """Env steps trained between wall times t0 and t1, interpolated between the learner's logged laps."""
    wall = np.array([p[0] for p in points])
    steps = np.array([p[2] for p in points])
    if wall.size < 2 or t0 < wall[0] or t1 > wall[-1]:
        raise RuntimeError(f"the learner logged no laps around [{t0:.1f}, {t1:.1f}]: see learner.log")
    return float(np.interp(t1, wall, steps) - np.interp(t0, wall, steps))


class FloodImpact:
    """The lab, the learner, two collectors and the flooder; the three windows and what was seen in them."""

    def __init__(self, a: argparse.Namespace):
        self.a = a
        self.work = Path(a.log_dir)
        self.work.mkdir(parents=True, exist_ok=True)
        self.run_dir = self.work / "run"
        self.lab = NetLab()
        self.addr = self.lab.add_host("learner")
        for host in ("c1", "c2", "flooder"):
            self.lab.add_host(host)
        self.extra: list[str] = []
        if a.curve == "on":
            subprocess.run([sys.executable, "-m", "common.transport.curve", str(self.work / "keys")], check=True,
                           capture_output=True)
            self.extra = [f"transport.curve_dir={self.work / 'keys'}"]

    def config(self) -> list[str]:
        a = self.a
        out = ["--task", a.task, "training.console=false", *self.extra]
        if a.num_envs:
            out.append(f"algo.num_envs={a.num_envs}")
        return out

    def start(self) -> subprocess.Popen:
        argv = [sys.executable, "-m", "learner.main", *self.config(), "--listen", f"tcp://0.0.0.0:{PORT}",
                "--log-dir", str(self.run_dir), "algo.max_iterations=100000000", "algo.save_interval=100000000"]
        with open(self.work / "learner.log", "w") as log:
            learner = self.lab.popen("learner", argv, stdout=subprocess.DEVNULL, stderr=log)
        for name in ("c1", "c2"):
            argv = [sys.executable, "-m", "collector.main", *self.config(), "--learner", f"tcp://{self.addr}:{PORT}",
                    f"transport.collector_name={name}"]
            with open(self.work / f"{name}.log", "w") as log:
                self.lab.popen(name, argv, stdout=subprocess.DEVNULL, stderr=log)
        return learner

    def flooder(self) -> subprocess.Popen:
        a = self.a
        argv = ["nice", "-n", str(a.flooder_nice), sys.executable, "-m", "benchmarks.flood", "--learner", f"tcp://{self.addr}:{PORT}",
                "--seconds", str(a.seconds), "--task", a.task]
        if a.curve == "on":
            argv += ["--unknown-keys", "1000", "--raw-garbage", "10000", "--server-key",
                     str(self.work / "keys" / "learner.key")]
        else:
            spec = self.spec()
            argv += ["--hellos", "2000", "--num-envs", str(spec[0]), "--steps-per-env", str(spec[1])]
        return self.lab.popen("flooder", argv, stdout=subprocess.PIPE, stderr=open(self.work / "flooder.log", "w"))

    def spec(self) -> tuple[int, int]:
        """The learner's num_envs and steps_per_env, as its config resolved them (for hellos it accepts)."""
        from common.config import load_config

        cfg = load_config([a for a in self.config()[2:] if "=" in a], extra={"task": self.a.task}, environ={})
        return cfg.algo.num_envs, cfg.algo.steps_per_env

    def hold(self, learner: subprocess.Popen, seconds: float, rss: list[float]) -> None:
        """Let `seconds` pass, sampling the learner's RSS; fail loudly if it died."""
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            if learner.poll() is not None:
                raise RuntimeError(f"the learner exited ({learner.returncode}): see {self.work / 'learner.log'}")
            r = rss_mb(learner.pid)
            if r:
                rss.append(r)
            time.sleep(0.5)

    def run(self) -> dict:
        a = self.a
        learner = self.start()
        # The warm-up counts from the first lap: on a loaded machine start-up alone can outlast it.
        wait_first_iteration(learner, self.run_dir, timeout=120)
        warm: list[float] = []
        self.hold(learner, a.warmup_s, warm)
        clean: list[float] = []
        t0, c0 = time.time(), cpu_s(learner.pid)
        self.hold(learner, a.seconds, clean)
        t1, c1 = time.time(), cpu_s(learner.pid)
        reaped = resource.getrusage(resource.RUSAGE_CHILDREN)  # the flooder is the only child reaped meanwhile
        flooder = self.flooder()
        flooding: list[float] = []
        while flooder.poll() is None:
            self.hold(learner, 0.5, flooding)
        t2, c2 = time.time(), cpu_s(learner.pid)
        usage = resource.getrusage(resource.RUSAGE_CHILDREN)
        flooder_cpu = usage.ru_utime + usage.ru_stime - reaped.ru_utime - reaped.ru_stime
        sent = json.loads(flooder.stdout.read() or "{}")
        after: list[float] = []
        self.hold(learner, a.seconds, after)
        t3, c3 = time.time(), cpu_s(learner.pid)
        self.hold(learner, 3.0, after)  # a few more laps, so the learner's log covers t3
        learner.send_signal(signal.SIGTERM)
        code = learner.wait(timeout=120)
        points = read_scalars(self.run_dir)["perf/total_env_steps"]
        rates = {name: steps_between(points, s, e) / (e - s)
                 for name, (s, e) in {"clean": (t0, t1), "flooding": (t1, t2), "after": (t2, t3)}.items()}
        summary = json.loads((self.run_dir / "summary.json").read_text())
        return {
            "curve": a.curve, "task": a.task, "window_s": {"clean": round(t1 - t0, 1), "flooding": round(t2 - t1, 1),
                                                          "after": round(t3 - t2, 1)},
            "env_steps_per_s": {k: round(v) for k, v in rates.items()},
            "flooding_over_clean": round(rates["flooding"] / rates["clean"], 3),
            # The learner's share of the cores: what the flood costs it shows here first.
            "learner_cores": {"clean": round((c1 - c0) / (t1 - t0), 3), "flooding": round((c2 - c1) / (t2 - t1), 3),
                              "after": round((c3 - c2) / (t3 - t2), 3)},
            # The flooder's share, taken from the same cores here (on a cluster it is another machine's).
            "flooder_cores": round(flooder_cpu / (t2 - t1), 3),
            "rss_mb": {"warm": round(clean[-1]), "max_flooding": round(max(flooding)), "after": round(after[-1])},
            "rss_growth_mb": round(max(flooding + after) - clean[-1], 1),
            "flood": sent,
            "flood_per_s": {k: round(v / (t2 - t1), 1) for k, v in sent.items() if k.endswith("_sent")},
            "refused_messages": summary.get("refused_messages"),
            "rollouts_per_collector": summary.get("rollouts_per_collector"),
            "learner_exit_code": code,
        }

    def close(self) -> None:
        self.lab.close()


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.flood_impact", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--curve", choices=("on", "off"), default="off", help="CURVE security on every process")
    p.add_argument("--seconds", type=float, default=30, help="each window's length (default 30)")
    p.add_argument("--warmup-s", type=float, default=30, help="training before the first window (default 30)")
    p.add_argument("--flooder-nice", type=int, default=19, help="the flooder's nice value (default 19)")
    p.add_argument("--task", default="half_cheetah")
    p.add_argument("--num-envs", type=int, default=0, help="algo.num_envs (default: the task's preset)")
    p.add_argument("--log-dir", default=None, help="where the run and the logs go (default: a temporary folder)")
    p.add_argument("--json", help="write the report here")
    a = p.parse_args(argv)
    ok, why = netns_available()
    if not ok:
        print(f"error: {why}", file=sys.stderr)
        return 2
    a.log_dir = a.log_dir or tempfile.mkdtemp(prefix="appo-flood-")
    bench = FloodImpact(a)
    try:
        report = bench.run()
    finally:
        bench.close()
    text = json.dumps(report, indent=2)
    print(text)
    if a.json:
        Path(a.json).write_text(text)
    drop = 1 - report["flooding_over_clean"]
    print(f"trained env-steps/s during the flood: {report['flooding_over_clean']:.3f} of clean ({drop:+.1%} drop); "
          f"learner RSS +{report['rss_growth_mb']} MB; logs in {a.log_dir}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
