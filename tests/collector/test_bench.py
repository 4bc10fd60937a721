"""collector.bench as functions: the figures appo-bench reads from its --json file."""

from __future__ import annotations

import json

from collector import bench


def test_run_and_json_report_the_ceiling_collector_and_ratio(tmp_path):
    """run() and main(--json) give positive ceiling, collector and replay figures under the documented keys."""
    path = tmp_path / "bench.json"
    assert bench.main(["--task", "half_cheetah", "--num-envs", "8", "--threads", "1", "--seconds", "0.05",
                       "--rounds", "1", "--replay-ceiling", "--json", str(path)]) == 0
    result = json.loads(path.read_text())
    for key in ("physics_ceiling_steps_per_s", "collector_steps_per_s", "ratio", "replay_ceiling_steps_per_s",
                "collector_infer_ms_per_step", "collector_env_ms_per_step"):
        assert result[key] > 0, key
    assert result["ratio"] == result["collector_steps_per_s"] / result["physics_ceiling_steps_per_s"]
    assert result["collector_groups"] == 1  # 8 envs: below the split


def test_collector_of_a_large_batch_runs_on_two_groups():
    """From COLLECTOR_SPLIT_MIN_ENVS envs on the benchmarked collector is the double-buffered one."""
    from collector.envs import COLLECTOR_SPLIT_MIN_ENVS

    result = bench.run("inverted_pendulum", COLLECTOR_SPLIT_MIN_ENVS, threads=2, seconds=0.05, rounds=1)
    assert result["collector_groups"] == 2 and result["collector_steps_per_s"] > 0
