"""benchmarks.time_to_criterion: criteria, medians, and a real timed run whose checkpoints are evaluated."""

import json
import subprocess
import sys

import pytest

from benchmarks.time_to_criterion import VELOCITY, criteria_for, meets, summarize
from tools.tb_scalars import read_scalars

WALKING = {"time_limit_fraction": 0.95, "velocity_xy_rms_error": 0.20, "yaw_rate_rms_error": 0.30}


@pytest.mark.parametrize(("change", "walking", "tight"), [
    ({}, True, False),
    ({"velocity_xy_rms_error": 0.15, "yaw_rate_rms_error": 0.20}, True, True),  # bounds are inclusive
    ({"time_limit_fraction": 0.85}, False, False),
    ({"yaw_rate_rms_error": 0.36}, False, False),
    ({"velocity_xy_rms_error": None}, False, False),  # a figure the evaluation lacks never passes
])
def test_walking_and_tight_criteria_bound_every_figure(change, walking, tight):
    """The walking and tight criteria hold only when every bound holds, inclusive, and no figure is missing."""
    figures = {k: v for k, v in {**WALKING, **change}.items() if v is not None}
    assert meets(figures, VELOCITY["walking"]) is walking
    assert meets(figures, VELOCITY["tight"]) is tight


def test_velocity_criteria_apply_only_to_tasks_that_track_velocity():
    """A task without velocity figures gets only the return criterion, and only when asked for."""
    assert set(criteria_for(WALKING, None)) == {"walking", "tight"}
    assert criteria_for({"return_mean": 5.0}, None) == {}
    assert criteria_for({"return_mean": 5.0}, 4.0) == {"return": {"return_mean": (">=", 4.0)}}


def test_median_counts_a_missed_criterion_as_beyond_the_budget():
    """Median over seeds: a seed that never met the criterion is slower than any that did."""
    def seed(seconds, ret):
        return {"criteria": ["walking"], "first": {} if seconds is None else {"walking": {"seconds": seconds}},
                "last": {"return_mean": ret}}
    out = summarize({7: seed(200.0, 1.0), 8: seed(None, 2.0), 9: seed(100.0, 3.0)}, 6)
    assert out["walking"] == {"median_seconds": 200.0, "met_by": 2, "seeds": 3}
    assert out["last_return_mean"] == pytest.approx(2.0)
    assert summarize({7: seed(None, 1.0), 8: seed(None, 1.0), 9: seed(100.0, 1.0)}, 6)["walking"][
        "median_seconds"] is None


def test_a_short_run_is_timed_and_its_checkpoints_evaluated(tmp_path):
    """Real appo-train for 20 s: checkpoint times match the run's own scalars, and a met and a missed criterion
    are told apart (return >= 1 is met by the first checkpoint: every inverted_pendulum step pays 1)."""
    out = tmp_path / "ttc.json"
    cmd = [sys.executable, "-m", "benchmarks.time_to_criterion", "--task", "inverted_pendulum", "--seeds", "3",
           "--minutes", "0.33", "--save-every", "15", "--episodes", "4", "--return-at-least", "1",
           "--log-dir", str(tmp_path / "runs"), "--json", str(out), "algo.num_envs=16", "algo.steps_per_env=16"]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    res = json.loads(out.read_text())
    seed = res["seeds"]["3"]
    assert seed["criteria"] == ["return"] and seed["first"]["return"]["iteration"] == 15
    steps = read_scalars(tmp_path / "runs" / "inverted_pendulum" / "seed_3")["perf/total_env_steps"]
    by_iteration = {it: (wall - steps[0][0], value) for wall, it, value in steps}
    assert seed["first"]["return"]["seconds"] == pytest.approx(by_iteration[15][0])
    assert seed["first"]["return"]["env_steps"] == by_iteration[15][1]
    last = seed["last"]
    assert last["iteration"] % 15 == 0 and last["iteration"] > 15  # more than one checkpoint in 20 s
    assert last["seconds"] <= 0.33 * 60 and last["episodes"] == 4
    assert res["summary"]["return"]["met_by"] == 1
    assert "median time to return" in proc.stdout
