"""benchmarks.ablation: variants parsed and checked before any run, and real runs at equal env steps compared."""

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from benchmarks.ablation import iterations_for, parse_variant


def test_a_variant_is_a_name_and_its_overrides():
    """NAME=KEY=VALUE,KEY=VALUE splits into the name and its overrides; NAME= has none; malformed ones are named."""
    assert parse_variant("lam1=algo.algorithm.lam=1.0,algo.seed=3") == ("lam1", ["algo.algorithm.lam=1.0",
                                                                                 "algo.seed=3"])
    assert parse_variant("base=") == ("base", [])
    for bad in ("base", "=algo.seed=1", "x=algo.seed"):
        with pytest.raises(ValueError, match="variant"):
            parse_variant(bad)


def test_every_variant_gets_the_iterations_of_the_same_env_step_budget():
    """Iterations = ceil(budget / (envs x steps per env)), from each variant's own config."""
    assert iterations_for(10_000, "inverted_pendulum", ["algo.num_envs=16", "algo.steps_per_env=16"]) == (40, 256)
    assert iterations_for(10_000, "inverted_pendulum", ["algo.num_envs=32", "algo.steps_per_env=16"]) == (20, 512)


def test_an_unknown_key_is_refused_before_any_run(tmp_path):
    """A misspelt override in any variant: exit 2 naming it, and nothing trained."""
    proc = subprocess.run([sys.executable, "-m", "benchmarks.ablation", "--task", "inverted_pendulum",
                           "--env-steps", "1000", "--out", str(tmp_path), "--variant", "a=",
                           "--variant", "b=algo.algorithm.lamda=1"], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and "lamda" in proc.stderr
    assert not (tmp_path / "inverted_pendulum").exists()


def test_two_variants_train_the_same_env_steps_and_are_evaluated(tmp_path):
    """Real appo-train runs: each variant's own override reaches its run, both train the same env steps, and
    both final policies are evaluated."""
    out = tmp_path / "abl.json"
    cmd = [sys.executable, "-m", "benchmarks.ablation", "--task", "inverted_pendulum", "--env-steps", "1024",
           "--seeds", "4", "--out", str(tmp_path), "--json", str(out), "--episodes", "2", "--points", "2",
           "--variant", "base=", "--variant", "lam9=algo.algorithm.lam=0.9",
           "algo.num_envs=16", "algo.steps_per_env=16"]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    results = json.loads(out.read_text())
    assert [(r["variant"], r["seed"]) for r in results] == [("base", 4), ("lam9", 4)]
    for r, lam in zip(results, (1.0, 0.9), strict=True):  # inverted_pendulum's preset keeps lam 1.0
        cfg = yaml.safe_load(Path(r["run"], "config.yaml").read_text())
        assert cfg["algo"]["algorithm"]["lam"] == lam and cfg["algo"]["seed"] == 4
        summary = json.loads(Path(r["run"], "summary.json").read_text())
        assert summary["completed_iterations"] == 4 and summary["total_env_steps"] >= 1024
        assert r["eval"]["length_mean"] > 0 and r["curve"]["Train/mean_episode_length"][-1] is not None
    assert "| lam9 | 4 |" in proc.stdout
