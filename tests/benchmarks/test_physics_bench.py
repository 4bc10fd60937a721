"""benchmarks.physics as functions: the figures appo-bench reads from its --json file."""

from __future__ import annotations

import json

import huggingface_hub.constants
import numpy as np
import pytest

from benchmarks import physics
from common.hub import MOTIONS_REPO, SEED_MOTION_FILE, HubError


def test_run_and_json_report_the_ceiling_collector_and_ratio(tmp_path):
    """run() and main(--json) give positive ceiling, collector, held and replay figures under the documented keys."""
    path = tmp_path / "physics.json"
    assert physics.main(["--task", "half_cheetah", "--num-envs", "8", "--threads", "1", "--seconds", "0.05",
                       "--rounds", "1", "--replay-ceiling", "--held-ceiling", "--json", str(path)]) == 0
    result = json.loads(path.read_text())
    for key in ("physics_ceiling_steps_per_s", "collector_steps_per_s", "ratio", "replay_ceiling_steps_per_s",
                "held_ceiling_steps_per_s", "collector_infer_ms_per_step", "collector_env_ms_per_step"):
        assert result[key] > 0, key
    assert result["ratio"] == result["collector_steps_per_s"] / result["physics_ceiling_steps_per_s"]  # 1 round
    assert result["held_ratio"] == result["collector_steps_per_s"] / result["held_ceiling_steps_per_s"]
    assert result["random_action_std"] == 0.5  # half_cheetah's preset init_noise_std
    assert result["collector_groups"] == 1  # 8 envs: below the split
    assert (result["mujoco_threads"], result["collector_mujoco_threads"]) == (1, 1)
    assert 0 < result["physics_share_of_step"] <= 1


def test_physics_share_is_the_native_steps_part_of_env_step():
    """The share of env.step in MuJoCo's native step falls when the task's NumPy part is made slower, and the
    timing wrapper is gone afterwards."""
    import time

    from collector.envs import make_env

    with make_env("g1_walk_flat", 16, 1, seed=0) as env:
        actions = physics.random_policy_actions(env, 0.5, 8, np.random.default_rng(0))
        share = physics.measure_physics_share(env, 0.3, actions)
        start = time.perf_counter()
        for i in range(50):
            env.step(actions[i % len(actions)])
        step_s = (time.perf_counter() - start) / 50
        compute = env._compute_terms

        def slow_terms(*args):
            time.sleep(step_s)  # as long again as a whole step on this machine: the share about halves
            compute(*args)

        env._compute_terms = slow_terms
        slowed = physics.measure_physics_share(env, 0.3, actions)
        assert "step" not in vars(env._sim)
    assert 0 < slowed < 0.8 * share <= 0.8


def test_collector_of_a_large_batch_runs_on_two_groups():
    """From COLLECTOR_SPLIT_MIN_ENVS envs on the benchmarked collector is the double-buffered one."""
    from collector.envs import COLLECTOR_SPLIT_MIN_ENVS

    result = physics.run("inverted_pendulum", COLLECTOR_SPLIT_MIN_ENVS, threads=3, seconds=0.05, rounds=1)
    assert result["collector_groups"] == 2 and result["collector_steps_per_s"] > 0
    assert (result["mujoco_threads"], result["collector_mujoco_threads"]) == (3, 2)  # a core for inference
    forced = physics.run("inverted_pendulum", COLLECTOR_SPLIT_MIN_ENVS, threads=3, seconds=0.05, rounds=1,
                       collector_threads=3)
    assert forced["collector_mujoco_threads"] == 3


def test_ceiling_actions_are_fresh_draws_with_the_initial_policy_spread():
    """The ceiling's per-step actions are distinct N(0, std^2) arrays; the held ceiling is one uniform array."""
    from collector.envs import make_env

    with make_env("half_cheetah", 512, 1, seed=0) as env:
        rng = np.random.default_rng(0)
        drawn = physics.random_policy_actions(env, 0.5, 4, rng)
        held = physics.held_actions(env, rng)
    assert len(drawn) == 4 and all(a.shape == (512, 6) and a.dtype == np.float32 for a in drawn)
    assert not np.array_equal(drawn[0], drawn[1])
    both = np.stack(drawn)
    assert abs(both.mean()) < 0.02 and abs(both.std() - 0.5) < 0.02
    assert len(held) == 1 and held[0].min() >= -1 and held[0].max() <= 1 and abs(held[0].std() - 1 / 3**0.5) < 0.03


def test_replay_actions_are_the_rollout_steps_in_order():
    """Replayed step t is the rollout's actions[:, t], contiguous."""
    actions = np.arange(2 * 3 * 4, dtype=np.float32).reshape(2, 3, 4)
    steps = physics.replay_actions(actions)
    assert len(steps) == 3 and all(s.flags.c_contiguous for s in steps)
    assert all(np.array_equal(s, actions[:, t]) for t, s in enumerate(steps))


def test_ratio_is_the_median_of_each_rounds_own_ratio():
    """Rounds are paired: 0.9, 0.95 and 0.8 give 0.9, where the ratio of the medians (64 / 80) would be 0.8."""
    assert physics.paired_ratio([90.0, 57.0, 64.0], [100.0, 60.0, 80.0]) == 0.9


def test_several_tasks_are_compared_side_by_side_then_run_each(tmp_path):
    """--task A,B: both ceilings in the same rounds, the first's cost x1, and each task's own ceiling/collector run."""
    path = tmp_path / "compare.json"
    assert physics.main(["--task", "inverted_pendulum,half_cheetah", "--num-envs", "8", "--threads", "1",
                         "--seconds", "0.05", "--rounds", "2", "--json", str(path)]) == 0
    result = json.loads(path.read_text())
    tasks = result["comparison"]["tasks"]
    assert list(tasks) == ["inverted_pendulum", "half_cheetah"]
    assert tasks["inverted_pendulum"]["cost_vs_first"] == 1.0
    assert all(len(t["rounds"]) == 2 and t["physics_ceiling_steps_per_s"] > 0 for t in tasks.values())
    cheetah = tasks["half_cheetah"]
    assert cheetah["cost_vs_first"] == physics.paired_ratio(tasks["inverted_pendulum"]["rounds"], cheetah["rounds"])
    assert cheetah["us_per_env_step"] == 1e6 / cheetah["physics_ceiling_steps_per_s"]
    assert [r["task"] for r in result["runs"]] == ["inverted_pendulum", "half_cheetah"]
    assert all(r["collector_steps_per_s"] > 0 for r in result["runs"])


def test_a_tracking_task_without_its_clip_takes_the_seeds_and_names_it_when_out_of_reach(tmp_path, monkeypatch):
    """g1_motion_tracking with no --motion-file runs the seed's clip; where it is neither on disk nor may be
    downloaded (HF_HUB_OFFLINE), the benchmark stops before measuring, naming the clip and its dataset."""
    assert physics.task_config("g1_motion_tracking", 8).task_options.motion_file == SEED_MOTION_FILE
    monkeypatch.setenv("APPO_TASK_OPTIONS__ASSETS_DIR", str(tmp_path))
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)  # HF_HUB_OFFLINE=1, read at its import
    with pytest.raises(HubError, match=f"{SEED_MOTION_FILE}.*{MOTIONS_REPO}.*cannot be reached"):
        physics.main(["--task", "g1_motion_tracking", "--num-envs", "4", "--seconds", "0.1", "--rounds", "1"])


def test_engines_are_compared_side_by_side_on_the_same_task(tmp_path):
    """--sim mujoco,motrix: one task on both engines in the same rounds, labelled by engine, then each run."""
    path = tmp_path / "engines.json"
    assert physics.main(["--task", "go2_joystick_flat", "--sim", "mujoco,motrix", "--num-envs", "4", "--threads", "1",
                         "--seconds", "0.1", "--rounds", "2", "--json", str(path)]) == 0
    result = json.loads(path.read_text())
    tasks = result["comparison"]["tasks"]
    assert list(tasks) == ["go2_joystick_flat (mujoco)", "go2_joystick_flat (motrix)"]
    assert all(len(t["rounds"]) == 2 and t["physics_ceiling_steps_per_s"] > 0 for t in tasks.values())
    assert [(r["task"], r["sim"]) for r in result["runs"]] == [("go2_joystick_flat", "mujoco"),
                                                               ("go2_joystick_flat", "motrix")]
    assert all(r["collector_steps_per_s"] > 0 for r in result["runs"])


def test_an_unknown_engine_is_refused_naming_the_engines(capsys):
    """--sim with a name that is no engine exits 2 naming mujoco and motrix."""
    with pytest.raises(SystemExit) as exc:
        physics.main(["--sim", "mujoco,bullet"])
    assert exc.value.code == 2 and "mujoco,motrix" in capsys.readouterr().err
