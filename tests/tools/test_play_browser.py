"""appo-play in a real browser: Debian's chromium (headless, WebGL in software) drives the page of the real server."""

from __future__ import annotations

import io
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import threading
import time
from pathlib import Path

import numpy as np
import pytest
from checkpoint_helpers import write_checkpoint
from e2e_helpers import exe, free_port, wait_for

TASK = "go2_joystick_flat"
CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
CHROMIUM_ARGS = ["--no-sandbox", "--enable-unsafe-swiftshader", "--use-angle=swiftshader", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync"]


class Server:
    """A running appo-play with its stdout and JSON log lines collected as they come."""

    def __init__(self, *args: str, cwd: Path):
        env = {**os.environ, "APPO_LOG_FORMAT": "json"}
        self.proc = subprocess.Popen([exe("appo-play"), *args], cwd=cwd, env=env, stdout=subprocess.PIPE,
                                     stderr=subprocess.PIPE, text=True)
        self.out: list[str] = []
        self.logs: list[dict] = []
        self.err: list[str] = []
        threading.Thread(target=self._read, args=(self.proc.stdout, self.out), daemon=True).start()
        threading.Thread(target=self._read_err, daemon=True).start()

    def _read(self, stream, into) -> None:
        for line in stream:
            into.append(line)

    def _read_err(self) -> None:
        for line in self.proc.stderr:
            self.err.append(line)
            if line.startswith("{"):
                self.logs.append(json.loads(line))

    def url(self, timeout: float = 60.0) -> str:
        line = wait_for(lambda: next((x for x in self.out if x.startswith("appo-play: http")), None) or
                        self._died(), timeout, "appo-play to serve its page")
        return line.split()[1]

    def _died(self) -> None:
        if self.proc.poll() is not None:
            raise AssertionError(f"appo-play exited {self.proc.returncode}: {''.join(self.err)[-2000:]}")

    def events(self, name: str) -> list[dict]:
        return [e for e in self.logs if e.get("event") == name]

    def stop(self) -> float:
        """SIGTERM; seconds until it exited."""
        t0 = time.monotonic()
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        return time.monotonic() - t0


@pytest.fixture(scope="module")
def browser():
    from playwright.sync_api import sync_playwright

    assert Path(CHROMIUM).exists(), "Debian's chromium is missing: make test installs it (apt-get install chromium)"
    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        yield b
        b.close()


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    run = tmp_path_factory.mktemp("play") / "logs" / TASK / "run1"
    write_checkpoint(run / "model_5.pt", TASK, 5)
    return run


@pytest.fixture(scope="module")
def served(run_dir, browser):
    port = free_port()
    server = Server("--load-run", str(run_dir), "--envs", "2", "--port", str(port), cwd=run_dir)
    page = browser.new_page(viewport={"width": 1280, "height": 800})
    try:
        page.goto(server.url())
        page.wait_for_selector("canvas", timeout=30000)
        wait_for(lambda: "sim time" in status_text(page), 30, "the page's status line")
        yield server, page, port
    finally:
        page.close()
        server.stop()


def status_text(page) -> str:
    """The page's text, its status lines among it (one round trip to the browser)."""
    return page.evaluate("document.body.innerText")


def sim_time(page) -> float:
    return float(re.search(r"sim time ([0-9.]+) s", status_text(page)).group(1))


def canvas_pixels(page) -> np.ndarray:
    import imageio.v3 as iio

    return iio.imread(io.BytesIO(page.locator("canvas").first.screenshot()))[..., :3].astype(np.int16)


def test_page_draws_the_robot_moving(served):
    """The canvas is not blank (its pixels vary) and two screenshots a second apart differ."""
    _, page, _ = served
    first = canvas_pixels(page)
    time.sleep(1.0)
    second = canvas_pixels(page)
    for shot in (first, second):
        assert shot.std() > 5.0, "the canvas is blank"
    changed = np.abs(first - second).max(axis=2) > 10
    assert changed.mean() > 1e-4, "nothing moved on the canvas in a second"


def test_vx_slider_sets_the_command_inside_the_simulation(served):
    """Override on, vx typed into the slider: the server logs the command read back from the task's envs."""
    server, page, _ = served
    page.get_by_label("Override the sampled command").check()
    vx = page.locator("xpath=//label[.='vx (m/s)']/ancestor::*[.//input[@type='text']][1]//input[@type='text']")
    vx.fill("0.55")
    vx.press("Enter")
    event = wait_for(lambda: next((e for e in server.events("command in the simulation")
                                   if abs(e["vx"] - 0.55) < 1e-9), None), 10, "vx 0.55 in the simulation")
    assert event["vy"] == 0.0 and event["yaw_rate"] == 0.0


def test_pause_stops_the_simulation_clock_and_resume_restarts_it(served):
    """Paused, the page's sim time stands still (and the server logs the pause); resumed, it runs again."""
    server, page, _ = served
    page.get_by_role("button", name="Pause").click()
    wait_for(lambda: server.events("paused"), 10, "the server to pause")
    paused_at = server.events("paused")[-1]["sim_time"]
    wait_for(lambda: abs(sim_time(page) - paused_at) <= 0.021, 10, f"the page to show the paused clock, {paused_at} s")
    t0 = sim_time(page)
    time.sleep(1.5)  # the window over which the clock must stand still
    assert sim_time(page) == t0
    page.get_by_role("button", name="Resume").click()
    wait_for(lambda: sim_time(page) > t0 + 0.2, 10, "the clock to run again")


def test_sigterm_stops_the_server_within_2_s_and_frees_its_port(run_dir):
    """SIGTERM: appo-play exits 0 in under 2 s, and the port can be bound again at once."""
    port = free_port()
    server = Server("--load-run", str(run_dir), "--envs", "1", "--port", str(port), cwd=run_dir)
    server.url()
    took = server.stop()
    assert server.proc.returncode == 0 and took < 2.0, (took, "".join(server.err)[-1000:])
    with socket.socket() as s:
        s.bind(("0.0.0.0", port))


def test_port_in_use_is_a_clear_error_naming_it(run_dir):
    """A taken port: exit 2 with one line naming the port, no server started elsewhere."""
    with socket.socket() as s:
        s.bind(("0.0.0.0", 0))
        s.listen()
        port = s.getsockname()[1]
        done = subprocess.run([exe("appo-play"), "--load-run", str(run_dir), "--port", str(port)],
                              capture_output=True, text=True, timeout=120)
    assert done.returncode == 2
    assert f"port {port} is in use" in done.stderr
    assert "appo-play: http" not in done.stdout


def test_bad_runs_are_refused_naming_the_problem(tmp_path, run_dir):
    """Another task's checkpoint names both tasks; a run without checkpoints says so."""
    done = subprocess.run([exe("appo-play"), "--task", "hopper", "--load-run", str(run_dir)],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 2 and "go2_joystick_flat policy" in done.stderr and "task hopper" in done.stderr
    empty = tmp_path / TASK / "empty"
    empty.mkdir(parents=True)
    done = subprocess.run([exe("appo-play"), "--load-run", str(empty)], capture_output=True, text=True, timeout=120)
    assert done.returncode == 2 and "holds no checkpoint" in done.stderr


def test_native_viewer_without_a_display_names_the_web_viewer(run_dir):
    """--viewer native on a machine without a display: exit 2 naming --viewer web."""
    env = {k: v for k, v in os.environ.items() if k not in ("DISPLAY", "WAYLAND_DISPLAY")}
    done = subprocess.run([exe("appo-play"), "--load-run", str(run_dir), "--viewer", "native"], env=env,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 2 and "--viewer web" in done.stderr


def published_version(shm_dir: Path) -> int:
    """The version on a learner's shared-memory weights board (its header: seq, version, floats, stop)."""
    import struct

    return struct.unpack("<qqqq", (shm_dir / "weights.bin").read_bytes()[:32])[1]


def collectors_connected(port: int) -> float:
    """The learner's own count of attached collectors, from its /metrics."""
    import urllib.request

    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
    return float(re.search(r"^appo_collectors_connected (\S+)$", text, re.M).group(1))


def page_versions(page) -> list[int]:
    return [int(v) for v in re.findall(r"weights v(\d+)", status_text(page))]


def test_follow_shows_a_running_learners_versions_within_5_s_and_joins_as_no_collector(browser, tmp_path):
    """A real appo-train publishes weights; appo-play --follow shows a version at least as new as the board's
    within 5 s (three times), and the learner counts one collector all along: its own."""
    logs = tmp_path / "logs"
    status = free_port()
    train = subprocess.Popen([exe("appo-train"), "--task", "inverted_pendulum", f"training.log_dir={logs}",
                              "training.run_name=live", "algo.max_iterations=100000", "training.console=false",
                              f"training.status_port={status}"],
                             cwd=tmp_path, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    server = page = None
    try:
        shm_dir = Path(f"/dev/shm/appo-live-{train.pid}")
        wait_for(lambda: (shm_dir / "weights.bin").is_file() and published_version(shm_dir) >= 1, 120,
                 "the learner's first update")
        server = Server("--follow", "--load-run", str(logs / "inverted_pendulum" / "live"), "--envs", "1",
                        "--port", str(free_port()), cwd=tmp_path)
        page = browser.new_page()
        page.goto(server.url())
        wait_for(lambda: "sim time" in status_text(page), 30, "the page to connect")
        for _ in range(3):
            v0 = published_version(shm_dir)
            try:
                wait_for(lambda v0=v0: max(page_versions(page), default=-1) >= v0, 5.0, f"version {v0} on the page")
            except AssertionError as exc:
                raise AssertionError(f"{exc}; the page says: {status_text(page)[:600]!r}") from None
            wait_for(lambda v0=v0: published_version(shm_dir) > v0, 60, "a newer version")
        assert collectors_connected(status) == 1
        assert server.events("weights received")
    finally:
        if page is not None:
            page.close()
        if server is not None:
            server.stop()
        train.send_signal(signal.SIGTERM)
        train.wait(timeout=60)
