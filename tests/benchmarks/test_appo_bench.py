"""appo-bench's arithmetic and argument checks: steady-state rates from a run's scalars, ratios, bad --only."""

import pytest

from benchmarks.appo_bench import parse_args, ratios, steady_state


def _scalars(n: int, lap_s: float, steps_per_lap: int, wait_ms: float) -> dict:
    t0 = 1000.0
    rows = {"perf/total_env_steps": [], "perf/collector_wait_ms": [], "perf/iter_ms": [], "perf/train_ms": [],
            "Learner/policy_lag_mean": [], "Learner/policy_lag_max": []}
    for i in range(1, n + 1):
        # The first lap is slow (start-up): steady state must leave it out.
        t = t0 + (5.0 if i > 1 else 0.0) + i * lap_s
        rows["perf/total_env_steps"].append((t, i, float(i * steps_per_lap)))
        rows["perf/collector_wait_ms"].append((t, i, wait_ms))
        rows["perf/iter_ms"].append((t, i, lap_s * 1e3))
        rows["perf/train_ms"].append((t, i, lap_s * 1e3 - wait_ms))
        rows["Learner/policy_lag_mean"].append((t, i, 0.5))
        rows["Learner/policy_lag_max"].append((t, i, 1.0 if i != 7 else 3.0))
    return rows


def test_steady_state_rates_skip_the_start_up():
    """Env-steps/s is measured after the warm-up laps; wait fraction and lag come from the scalars."""
    summary = {"completed_iterations": 20, "total_env_steps": 20 * 4096, "trained_env_steps": 20 * 4096,
               "trained_fraction": 1.0, "training_wall_time_sec": 30.0, "staging_overflow": "wait"}
    out = steady_state(summary, _scalars(20, 0.5, 4096, 100.0))
    assert out["env_steps_per_s"] == pytest.approx(4096 / 0.5)
    assert out["trained_env_steps_per_s"] == pytest.approx(4096 / 0.5)
    assert out["learner_wait_fraction"] == pytest.approx(0.2)
    assert out["policy_lag_max"] == 3.0


def test_trained_rate_counts_only_trained_steps():
    """With half the simulated steps trained on, the trained rate is half the simulated rate."""
    summary = {"completed_iterations": 10, "total_env_steps": 100, "trained_env_steps": 50,
               "trained_fraction": 0.5, "training_wall_time_sec": 10.0, "staging_overflow": "overwrite"}
    out = steady_state(summary, _scalars(10, 1.0, 1000, 0.0))
    assert out["trained_env_steps_per_s"] == pytest.approx(out["env_steps_per_s"] / 2)


def test_ratios_pair_the_parts():
    """Each ratio divides the right two figures."""
    res = {"physics": {"ratio": 0.95, "physics_ceiling_steps_per_s": 20000.0},
           "e2e": {"trained_env_steps_per_s": 10000.0}}
    r = ratios(res)
    assert r["collector / physics ceiling"] == 0.95
    assert r["e2e trained env-steps/s / physics ceiling"] == pytest.approx(0.5)


def test_learner_ratios_name_the_precision():
    """The learner's ratio says which arithmetic ours ran in, with the fp32 one beside a bf16 run."""
    learn = {"precision": "bf16", "ratio": 1.9, "fp32_ratio": 1.2}
    r = ratios({"learner": learn})
    assert r == {"learner ours (bf16) / reference loop": 1.9, "learner ours (fp32) / reference loop": 1.2}
    assert ratios({"learner": {"precision": "fp32", "ratio": 1.2}}) == {"learner ours (fp32) / reference loop": 1.2}


def test_unknown_part_is_refused(capsys):
    """--only with a part that does not exist exits 2 naming it."""
    with pytest.raises(SystemExit) as e:
        parse_args(["--only", "physics,warp"])
    assert e.value.code == 2
    assert "warp" in capsys.readouterr().err
