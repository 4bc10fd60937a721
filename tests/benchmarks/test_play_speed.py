"""benchmarks.play_speed: the page's real-time factor read from a real server and browser; bad flags refused."""

from __future__ import annotations

import json
import subprocess
import sys

from checkpoint_helpers import write_checkpoint


def test_page_speed_reports_the_factor_at_1x_and_4x(tmp_path):
    """On a Go2 checkpoint the page keeps near real time at 1x and runs faster at 4x (both from the page)."""
    run = tmp_path / "go2_joystick_flat" / "run"
    write_checkpoint(run / "model_1.pt", "go2_joystick_flat", 1)
    out = tmp_path / "speed.json"
    done = subprocess.run([sys.executable, "-m", "benchmarks.play_speed", "--load-run", str(run), "--envs", "2",
                           "--seconds", "3", "--json", str(out)], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    figures = json.loads(out.read_text())
    assert figures["task"] == "go2_joystick_flat" and figures["envs"] == 2
    assert 0.7 < figures["at_1x"]["median"] < 1.1
    assert figures["at_4x"]["median"] > 1.5 * figures["at_1x"]["median"]
    assert "speed 4x: the page reports" in done.stdout


def test_follow_cost_needs_a_task():
    """--follow-cost without --task: a usage error naming --task."""
    done = subprocess.run([sys.executable, "-m", "benchmarks.play_speed", "--follow-cost"], capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 2 and "--follow-cost needs --task" in done.stderr
