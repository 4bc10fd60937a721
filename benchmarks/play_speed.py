"""appo-play's speed: how fast its page simulates, and what following a live run costs that run.

    python -m benchmarks.play_speed --load-run RUN --envs 4            # the page's real-time factor
    python -m benchmarks.play_speed --follow-cost --task go2_joystick_flat --window 45 --rounds 2

page:         appo-play on RUN's latest checkpoint with a headless chromium on its page (--no-browser: none),
              the real-time factor the page reports (simulated s per wall s over its last steps), sampled
              each 0.5 s for --seconds at 1x, then with the speed slider at its 4x maximum: at 4x the figure
              is as fast as the server can step, draw and stream.
follow-cost:  one appo-train run of --task; after a warm-up its received env steps (the learner's
              /metrics, polled every 50 ms and timed from the first to the last rollout that arrived) over
              alternating windows without and with `appo-play --follow --envs N` watched by --client, --rounds
              pairs; the cost is 1 - (with / without), the median of
              the pairs' own ratios, so the run's slow drifts divide out.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import re
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

import numpy as np

BIN = Path(sys.executable).parent
CHROMIUM_ARGS = ["--no-sandbox", "--enable-unsafe-swiftshader", "--use-angle=swiftshader", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync"]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Player:
    """appo-play as a subprocess, its stdout collected, optionally with a headless chromium on its page."""

    def __init__(self, args: list[str], client: str):
        self.port = free_port()
        self.proc = subprocess.Popen([str(BIN / "appo-play"), *args, "--port", str(self.port)],
                                     stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
                                     env={**os.environ, "APPO_LOG_FORMAT": "json"})
        self.lines: list[str] = []
        threading.Thread(target=lambda: self.lines.extend(self.proc.stdout), daemon=True).start()
        deadline = time.monotonic() + 120
        while not any(x.startswith("appo-play: http") for x in self.lines):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise SystemExit(f"error: appo-play did not start (exit {self.proc.poll()})")
            time.sleep(0.1)
        self._pw = self.page = self._browser = self._remote = None
        if client == "ws":
            self._remote = RemotePage(f"ws://localhost:{self.port}")
        if client == "chromium":
            from playwright.sync_api import sync_playwright

            self._pw = sync_playwright().start()
            self._browser = self._pw.chromium.launch(executable_path=chromium(), args=CHROMIUM_ARGS)
            self.page = self._browser.new_page(viewport={"width": 1280, "height": 800})
            self.page.goto(f"http://localhost:{self.port}")
            self.page.wait_for_selector("canvas", timeout=60000)

    def status(self) -> str:
        loc = self.page.get_by_text(re.compile("sim time"))
        return loc.first.inner_text() if loc.count() else ""

    def set_speed(self, speed: float) -> None:
        box = self.page.locator("xpath=//label[.='Speed (x real time)']/ancestor::*[.//input[@type='text']][1]"
                                "//input[@type='text']")
        box.fill(str(speed))
        box.press("Enter")

    def close(self) -> None:
        if self._remote is not None:
            self._remote.close()
        if self._browser is not None:
            self._browser.close()
            self._pw.stop()
        self.proc.send_signal(signal.SIGTERM)
        self.proc.wait(timeout=30)


class RemotePage:
    """Stands in for a browser on another machine: a websocket client of the page that announces a camera,
    as the browser does, and takes in every message the server sends (no rendering on this host)."""

    CAMERA = {"type": "ViewerCameraMessage", "wxyz": [1.0, 0.0, 0.0, 0.0], "position": [2.0, -2.0, 1.0],
              "fov": 1.0, "near": 0.01, "far": 100.0, "image_height": 800, "image_width": 1280,
              "look_at": [0.0, 0.0, 0.0], "up_direction": [0.0, 0.0, 1.0]}

    def __init__(self, url: str):
        self.url, self.received = url, 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=lambda: asyncio.run(self._run()), daemon=True)
        self._thread.start()

    async def _run(self) -> None:
        import msgspec
        import viser
        import websockets

        async with websockets.connect(self.url, subprotocols=[f"viser-v{viser.__version__}"], max_size=None) as ws:
            await ws.send(msgspec.msgpack.encode(self.CAMERA))
            while not self._stop.is_set():
                try:
                    self.received += len(await asyncio.wait_for(ws.recv(), timeout=0.5))
                except asyncio.TimeoutError:
                    continue

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)


def chromium() -> str:
    for path in ("/usr/bin/chromium", "/usr/bin/chromium-browser"):
        if Path(path).exists():
            return path
    raise SystemExit("error: Debian's chromium is not installed (apt-get install chromium), or pass --no-browser")


def page_speed(args) -> dict:
    """The page's real-time factor at 1x and at the 4x maximum."""
    player = Player(["--load-run", args.load_run, "--envs", str(args.envs)] + (["--task", args.task] if args.task
                                                                              else []), client="chromium")
    out = {"envs": args.envs, "load_run": args.load_run}
    try:
        for speed in (1.0, 4.0):
            player.set_speed(speed)
            time.sleep(3.0)  # the factor is over the last 50 steps: let the new speed fill them
            samples = []
            end = time.monotonic() + args.seconds
            while time.monotonic() < end:
                m = re.search(r"([0-9.]+)x real time", player.status())
                if m:
                    samples.append(float(m.group(1)))
                time.sleep(0.5)
            out[f"at_{speed:g}x"] = {"median": float(np.median(samples)), "min": float(np.min(samples)),
                                     "samples": len(samples)}
            print(f"speed {speed:g}x: the page reports {np.median(samples):.2f}x real time "
                  f"(median of {len(samples)} samples, min {np.min(samples):.2f})", flush=True)
        out["task"] = re.search(r"^(\S+), ", player.status()).group(1)
    finally:
        player.close()
    return out


def metric(port: int, name: str) -> float:
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
    return float(re.search(rf"^{name} ([0-9.e+]+)$", text, re.M).group(1))


def arrival_rate(port: int, seconds: float) -> float:
    """Env steps per second the learner received over `seconds`, timed from the first to the last arrival.

    The counter moves a whole rollout at a time; timing between arrivals, not window edges, keeps that
    step from blurring a comparison of a few percent."""
    seen: list[tuple[float, float]] = []
    end = time.monotonic() + seconds
    last = metric(port, "appo_env_steps_total")
    while time.monotonic() < end:
        time.sleep(0.05)
        steps = metric(port, "appo_env_steps_total")
        if steps != last:
            seen.append((time.monotonic(), steps))
            last = steps
    if len(seen) < 2:
        raise SystemExit(f"error: fewer than two rollouts arrived in {seconds:g} s; give a longer --window")
    (t0, s0), (t1, s1) = seen[0], seen[-1]
    return (s1 - s0) / (t1 - t0)


def follow_cost(args) -> dict:
    """Env steps per second of one appo-train run in windows without and with a follower."""
    status_port = free_port()
    with tempfile.TemporaryDirectory(prefix="appo-play-cost-") as tmp:
        logs = Path(tmp) / "logs"
        train = subprocess.Popen([str(BIN / "appo-train"), "--task", args.task, f"training.log_dir={logs}",
                                  "training.run_name=cost", "algo.max_iterations=1000000", "training.console=false",
                                  f"training.status_port={status_port}", "training.no_play=true"],
                                 stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        run = logs / args.task / "cost"
        rates: dict[str, list[float]] = {"without": [], "with": []}
        connected = []
        try:
            deadline = time.monotonic() + 180
            while True:
                try:
                    if metric(status_port, "appo_env_steps_total") > 0:
                        break
                except (OSError, AttributeError):
                    pass
                if train.poll() is not None or time.monotonic() > deadline:
                    raise SystemExit("error: appo-train did not start")
                time.sleep(0.5)
            time.sleep(args.warmup)
            for r in range(args.rounds):
                for kind in ("without", "with"):
                    player = None
                    if kind == "with":
                        player = Player(["--follow", "--load-run", str(run), "--envs", str(args.envs)],
                                        client=args.client)
                        time.sleep(3.0)  # its start-up (imports, model) is not part of following
                    rates[kind].append(arrival_rate(status_port, args.window))
                    if player is not None:
                        connected.append(metric(status_port, "appo_collectors_connected"))
                        player.close()
                    print(f"round {r + 1} {kind:>7} a follower: {rates[kind][-1]:,.0f} env-steps/s", flush=True)
        finally:
            train.send_signal(signal.SIGTERM)
            train.wait(timeout=60)
    ratios = [w / wo for w, wo in zip(rates["with"], rates["without"], strict=True)]
    cost = 1.0 - float(np.median(ratios))
    print(f"following costs the run {100 * cost:.2f}% of its env steps per second (median of {len(ratios)} pairs; "
          f"collectors the learner counted while followed: {sorted(set(connected))})")
    return {"task": args.task, "window_s": args.window, "rounds": args.rounds, "client": args.client,
            "follower_envs": args.envs,
            "rates": rates, "ratios": ratios, "cost": cost, "collectors_while_followed": connected}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.play_speed", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--load-run", help="page speed: the run (or checkpoint) to play")
    p.add_argument("--task", help="page speed: --task for appo-play; follow cost: the task appo-train trains")
    p.add_argument("--envs", type=int, default=4, help="envs on the page (default 4)")
    p.add_argument("--seconds", type=float, default=15.0, help="page speed: sampling time per speed (default 15)")
    p.add_argument("--follow-cost", action="store_true", help="measure what following costs a live run")
    p.add_argument("--window", type=float, default=45.0, help="follow cost: seconds per window (default 45)")
    p.add_argument("--rounds", type=int, default=2, help="follow cost: pairs of windows (default 2)")
    p.add_argument("--warmup", type=float, default=30.0, help="follow cost: seconds before the first window")
    p.add_argument("--client", choices=("ws", "chromium", "none"), default="ws",
                   help="follow cost: who watches the follower's page: ws (a websocket client taking every "
                        "message, as a browser on another machine; default), chromium (a headless browser on "
                        "this host, rendering WebGL in software on its cores) or none")
    p.add_argument("--json", help="write the figures here")
    args = p.parse_args(argv)
    if args.follow_cost:
        if not args.task:
            p.error("--follow-cost needs --task")
        out = follow_cost(args)
    else:
        if not args.load_run:
            p.error("give --load-run (page speed) or --follow-cost --task T")
        out = page_speed(args)
    out.update(machine=f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores",
               date=time.strftime("%Y-%m-%d %H:%M"))
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
