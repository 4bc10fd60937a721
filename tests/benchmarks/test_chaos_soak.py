"""The chaos soak, short: every fault kind once in the namespace lab, each recovered, then a clean stop and resume.

A benchmark (make test-benchmarks, about two minutes): make test checks each fault on its own (tests/e2e)."""

import json
import shutil
import subprocess
import sys

import pytest

from benchmarks.chaos_soak import FAULTS
from benchmarks.netlab import netns_available


@pytest.mark.benchmark
def test_a_short_chaos_soak_recovers_from_every_fault_and_resumes(tmp_path):
    """Loss, rate limit, delay, both partitions, a freeze, a flood and both kill -9s: all recovered, the learner's
    RSS bounded, nothing but stale or unknown-peer messages refused, the stop clean and the resume going on."""
    ok, why = netns_available()
    if not ok:
        pytest.skip(why)
    if shutil.which("iptables") is None:
        pytest.skip("iptables is not installed (make test installs it as root on Debian): no packet loss to inject")
    out = tmp_path / "chaos.json"
    proc = subprocess.run(
        [sys.executable, "-m", "benchmarks.chaos_soak", "--minutes", "1", "--fault-s", "4", "--gap-s", "1.5",
         "--peer-timeout-s", "3", "--every-fault", "--log-dir", str(tmp_path / "soak"), "--json", str(out)],
        capture_output=True, text=True, timeout=600,
    )
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
    r = json.loads(out.read_text())
    assert r["problems"] == [] and r["unrecovered"] == []
    assert set(r["faults_injected"]) == set(FAULTS) and set(r["recovery_s"]) == set(FAULTS)
    assert r["stop_exit_code"] == 0 and r["stop_status"] == "interrupted"
    assert r["resume_check"]["went_on"] and r["resume_check"]["resumed_to"] > r["resume_check"]["stopped_at"]
    assert r["trained_fraction"] >= 0.99
    assert r["rss_growth_mb"] is not None and r["rss_growth_mb"] < 64
