"""The flood-impact benchmark, short: it floods a training learner in the namespace lab and reports what it cost."""

import json
import subprocess
import sys

import pytest

from benchmarks.flood_impact import steps_between
from benchmarks.netlab import netns_available


def test_steps_between_interpolates_between_laps_and_refuses_a_window_the_log_does_not_cover():
    """Env steps in a window are read off the logged laps by linear interpolation; an uncovered window is an error."""
    points = [(100.0, 1, 0.0), (102.0, 2, 1000.0), (104.0, 3, 3000.0)]
    assert steps_between(points, 101.0, 103.0) == pytest.approx(500.0 + 1000.0)
    with pytest.raises(RuntimeError, match="no laps"):
        steps_between(points, 103.0, 105.0)


@pytest.mark.benchmark  # make test-benchmarks; tests/e2e/test_zmq_flood.py checks the flood's cap in make test
def test_a_short_hello_flood_is_reported_with_its_rate_and_the_learner_survives_it(tmp_path):
    """CURVE off, windows of 4 s: the report has a throughput per window, the flood's rate and every hello answered,
    the refusals are only evictions of idle fakes, and the learner stops cleanly."""
    ok, why = netns_available()
    if not ok:
        pytest.skip(why)
    out = tmp_path / "flood.json"
    proc = subprocess.run(
        [sys.executable, "-m", "benchmarks.flood_impact", "--curve", "off", "--seconds", "4", "--warmup-s", "8",
         "--flooder-nice", "0", "--task", "inverted_pendulum", "--num-envs", "16", "--log-dir", str(tmp_path / "lab"),
         "--json", str(out)],
        capture_output=True, text=True, timeout=300,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    r = json.loads(out.read_text())
    assert all(v > 0 for v in r["env_steps_per_s"].values()), r["env_steps_per_s"]
    assert r["flood"]["hellos_sent"] >= 2000 and r["flood"]["hellos_welcomed"] == r["flood"]["hellos_sent"]
    assert r["flood_per_s"]["hellos_sent"] > 0
    assert set(r["refused_messages"]) <= {"evicted_idle_peer"}
    assert set(r["rollouts_per_collector"]) == {"c1", "c2"}
    assert r["learner_exit_code"] == 0
    assert r["rss_growth_mb"] < 64
