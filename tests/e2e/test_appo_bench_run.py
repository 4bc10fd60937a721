"""appo-bench drives the real benchmarks and a real appo-train run, and reports consistent figures."""

import json
import subprocess

from e2e_helpers import exe

from common.cores import split_cores, usable_cores


def test_appo_bench_small_run_reports_every_part(tmp_path):
    """Tiny sizes, every part: table printed, JSON complete, ratios consistent with the absolute figures, the core
    split appo-train chose reported with the KEY=VALUE override applied."""
    out = tmp_path / "bench.json"
    proc = subprocess.run(
        [exe("appo-bench"), "--task", "inverted_pendulum", "--num-envs", "32", "--steps-per-env", "8",
         "--seconds", "0.5", "--iterations", "6", "--json", str(out), "training.collector_nice=3"],
        capture_output=True, text=True, timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    res = json.loads(out.read_text())
    assert set(res) >= {"physics", "learner", "ingest", "e2e", "ratios"}
    phys, e2e = res["physics"], res["e2e"]
    assert phys["physics_ceiling_steps_per_s"] > 0 and phys["collector_steps_per_s"] > 0
    rounds = phys["rounds"]
    per_round = sorted(a / b for a, b in zip(rounds["collector_steps_per_s"], rounds["physics_ceiling_steps_per_s"],
                                             strict=True))
    assert len(per_round) == 3 and res["ratios"]["collector / physics ceiling"] == per_round[1]  # paired median
    assert e2e["iterations"] == 6
    assert e2e["trained_fraction"] == 1.0  # back-pressure: nothing simulated and staged went untrained
    assert 0.0 <= e2e["learner_wait_fraction"] <= 1.0
    assert res["learner"]["ours_samples_per_s"] > 0 and res["learner"]["reference_samples_per_s"] > 0
    for k in ("raw", "zmq", "shm"):
        assert res["ingest"][k]["rollouts_per_s"] > 0, k
    assert "collector / physics ceiling" in proc.stdout and "e2e trained fraction" in proc.stdout
    # The split appo-train logged: the automatic one for this machine, with the override applied.
    auto = split_cores(usable_cores(), 1)
    assert e2e["core_split"] == {"usable_cores": usable_cores(), "learner_threads": auto.learner_threads,
                                 "collector_threads": auto.collector_threads, "cores_shared": auto.shared,
                                 "collector_nice": 3}
    assert "e2e core split" in proc.stdout
