"""benchmarks.vs_unilab without the seed installed: bad input is one clear line, and the seed trainer's
TensorBoard scalars become a curve against env steps in appo-train's columns."""

from __future__ import annotations

import pytest

from benchmarks import vs_unilab


def _error(capsys, argv: list[str]) -> str:
    with pytest.raises(SystemExit) as exc:
        vs_unilab.parse_args(argv)
    assert exc.value.code == 2
    return capsys.readouterr().err.strip().splitlines()[-1]


def test_unknown_task_is_named(capsys):
    """A task neither side has: the error names it and lists this project's tasks."""
    line = _error(capsys, ["--parity", "--task", "go3_flat"])
    assert "'go3_flat': unknown task" in line and "go2_joystick_flat" in line


def test_task_the_seed_lacks_is_named(capsys):
    """A task of ours the seed has no APPO config for: the error says so and lists the seed's three."""
    line = _error(capsys, ["--train", "--task", "hopper", "--env-steps", "1000"])
    assert "hopper: the seed (UniLab 1.5.2) has no such APPO task" in line
    assert "go2_joystick_flat, g1_walk_flat, g1_motion_tracking" in line


def test_parity_of_a_task_built_as_mjlab_is_refused(capsys):
    """g1_motion_tracking here is mjlab's: parity is refused, saying why and what it covers."""
    line = _error(capsys, ["--parity", "--task", "g1_motion_tracking"])
    assert "built as mjlab's" in line and "go2_joystick_flat, g1_walk_flat" in line


def test_train_needs_a_budget_and_one_mode(capsys):
    """--train without --env-steps, and neither mode, are refused."""
    assert "--train needs --env-steps" in _error(capsys, ["--train", "--task", "g1_walk_flat"])
    assert "one of the arguments --parity --train is required" in _error(capsys, ["--task", "g1_walk_flat"])


def test_failed_seed_install_is_one_line(tmp_path, capsys):
    """A seed venv that cannot be created: exit 1 and one line naming the venv and the failed step."""
    blocked = tmp_path / "not_a_folder"
    blocked.write_text("a file where the venv would go")
    rc = vs_unilab.main(["--train", "--task", "g1_walk_flat", "--env-steps", "1000", "--venv", str(blocked),
                         "--out", str(tmp_path / "out")])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 1 and len(err) == 1
    assert err[0].startswith(f"error: the seed's venv {blocked}: creating the seed's venv failed")


def test_seed_rows_read_its_scalars_against_env_steps(tmp_path):
    """The seed logs against collector env steps, Train/iteration as a value: rows keep both, with its
    episode length, return, learning rate and std, and nothing it did not log."""
    from torch.utils.tensorboard import SummaryWriter

    w = SummaryWriter(str(tmp_path))
    for it, steps in ((1, 49152), (2, 98304), (3, 160000)):
        w.add_scalar("Train/iteration", float(it), steps)
        w.add_scalar("Loss/learning_rate", 1e-3 / it, steps)
        w.add_scalar("Policy/mean_std", 1.0 - 0.01 * it, steps)
        if it > 1:  # the seed logs episode figures from the first completed episode on
            w.add_scalar("Train/mean_reward", 0.5 * it, steps)
            w.add_scalar("Train/mean_episode_length", 40.0 * it, steps)
    w.close()
    rows = vs_unilab.seed_rows(tmp_path)
    assert [(r["iteration"], r["env_steps"]) for r in rows] == [(1, 49152), (2, 98304), (3, 160000)]
    assert "return" not in rows[0] and rows[2]["return"] == pytest.approx(1.5)
    assert rows[1]["episode_length"] == pytest.approx(80.0) and rows[2]["learning_rate"] == pytest.approx(1e-3 / 3)
    assert rows[0]["policy_std"] == pytest.approx(0.99) and "tracking_error_xy" not in rows[2]
    assert rows[0]["wall_s"] == pytest.approx(0.0, abs=1.0)


def test_seed_checkpoint_becomes_an_elu_mlp_policy_or_is_refused(tmp_path):
    """A checkpoint in the seed's layout ({"actor": {"mlp.<i>.weight"...}}) acts as Linear-ELU-...-Linear, checked
    against a hand-computed forward pass; one of other widths, or a file of another kind, is refused by name."""
    import torch

    from benchmarks.unilab_policy import SeedPolicyError, load_seed_actor

    g = torch.Generator().manual_seed(0)
    shapes = [(8, 5), (6, 8), (3, 6)]
    actor = {"distribution.std_param": torch.ones(3)}
    for i, (o, n) in zip((0, 2, 4), shapes, strict=True):
        actor[f"mlp.{i}.weight"] = torch.randn(o, n, generator=g)
        actor[f"mlp.{i}.bias"] = torch.randn(o, generator=g)
    path = tmp_path / "model_5.pt"
    torch.save({"actor": actor, "critic": {}}, path)
    obs = torch.randn(4, 5, generator=g)
    x = obs
    for i in (0, 2, 4):
        x = x @ actor[f"mlp.{i}.weight"].T + actor[f"mlp.{i}.bias"]
        x = torch.where(x > 0, x, torch.exp(x) - 1) if i < 4 else x
    torch.testing.assert_close(load_seed_actor(path, 5, 3).act_deterministic(obs), x)
    with pytest.raises(SeedPolicyError, match="maps 5 observations to 3 actions; the env has 49 and 12"):
        load_seed_actor(path, 49, 12)
    junk = tmp_path / "junk.pt"
    junk.write_text("not a checkpoint")
    with pytest.raises(SeedPolicyError, match="not a seed APPO checkpoint"):
        load_seed_actor(junk, 5, 3)


def test_scripted_stepping_swings_pitch_joints_in_antiphase():
    """The scripted sequence moves only the legs' pitch joints, the two sides (G1) or diagonal pairs (Go2) half a
    cycle apart, and repeats every 1/1.5 s."""
    import numpy as np

    g1 = ["left_hip_pitch", "left_hip_roll", "left_knee", "right_hip_pitch", "right_knee", "waist_yaw"]
    act = vs_unilab.scripted_actions(g1, 0.02)
    a = np.stack([act(k, 2)[0] for k in range(100)])
    assert not a[:, [1, 5]].any() and np.abs(a[:, [0, 2, 3, 4]]).max() > 0.5
    np.testing.assert_allclose(a[:, 0], -a[:, 3], atol=1e-12)  # left against right
    np.testing.assert_allclose(act(7, 3), act(7 + 100, 3), atol=1e-9)  # 100 steps of 0.02 s: 3 cycles of 1.5 Hz
    go2 = ["FL_thigh", "FR_thigh", "RL_thigh", "RR_thigh"]
    b = vs_unilab.scripted_actions(go2, 0.02)(5, 1)[0]
    np.testing.assert_allclose(b[[0, 3]], -b[[1, 2]], atol=1e-12)  # a trot: FL+RR against FR+RL


def _saved_run(tmp_path, name: str, overrides: list[str]):
    """A run directory holding only the config.yaml appo-train would save with these overrides."""
    from common.config import load_config
    from learner.run_dir import save_config

    run = tmp_path / name
    run.mkdir()
    save_config(load_config(overrides, extra={"task": "g1_walk_flat"}, environ={}), run)
    return run


def test_appo_run_must_be_seed_equals_a_run_directory(tmp_path, capsys):
    """--appo-run without SEED=, for a seed not in --seeds, or naming no run directory: one line naming it."""
    base = ["--train", "--task", "g1_walk_flat", "--env-steps", "8000000", "--seeds", "102,103"]
    assert "expected SEED=RUN" in _error(capsys, [*base, "--appo-run", str(tmp_path)])
    run = _saved_run(tmp_path, "r", ["algo.seed=104"])
    assert "seed 104 is not one of --seeds 102,103" in _error(capsys, [*base, "--appo-run", f"104={run}"])
    assert "has no config.yaml" in _error(capsys, [*base, "--appo-run", f"102={tmp_path}"])
    args = vs_unilab.parse_args([*base, "--appo-run", f"103={run}", "--out", str(tmp_path / "out")])
    assert args.appo_runs == {103: run}


def test_reused_run_is_checked_to_be_the_preset_on_that_seed_and_budget(tmp_path):
    """A run is taken only as the preset with that seed and the budget's iterations; any other field is named."""
    from benchmarks.ablation import iterations_for

    iterations, per = iterations_for(8_000_000, "g1_walk_flat", [])
    assert iterations == 2605 and per == 128 * 24  # the preset's batch, as the milestone runs used it
    ok = _saved_run(tmp_path, "ok", ["algo.seed=102", f"algo.max_iterations={iterations}", "algo.save_interval=300"])
    assert vs_unilab.check_reused_run(ok, "g1_walk_flat", 102, 8_000_000).algo.seed == 102
    with pytest.raises(RuntimeError, match="not g1_walk_flat on seed 103"):
        vs_unilab.check_reused_run(ok, "g1_walk_flat", 103, 8_000_000)
    with pytest.raises(RuntimeError, match="ran algo.max_iterations=2605; the budget of 4,000,000 env steps is 1303"):
        vs_unilab.check_reused_run(ok, "g1_walk_flat", 102, 4_000_000)
    tuned = _saved_run(tmp_path, "tuned", ["algo.seed=102", f"algo.max_iterations={iterations}",
                                           "algo.algorithm.entropy_coef=0.005"])
    with pytest.raises(RuntimeError, match=r"not the g1_walk_flat preset: algo.algorithm.entropy_coef=0.005 "
                                           r"\(preset 0.0\)"):
        vs_unilab.check_reused_run(tuned, "g1_walk_flat", 102, 8_000_000)


def test_unfinished_reused_run_is_refused(tmp_path):
    """A reused run that has not logged the budget's env steps (still running, or stopped early) is refused."""
    from torch.utils.tensorboard import SummaryWriter

    run = _saved_run(tmp_path, "run", ["algo.seed=102", "algo.max_iterations=2605"])
    w = SummaryWriter(str(run))
    for it in (1, 2, 3):
        w.add_scalar("perf/total_env_steps", float(it * 3072), it)
    w.close()
    args = vs_unilab.parse_args(["--train", "--task", "g1_walk_flat", "--env-steps", "8000000", "--seeds", "102",
                                 "--appo-run", f"102={run}", "--out", str(tmp_path / "out")])
    with pytest.raises(RuntimeError, match="logged 9,216 of 8,000,000 env steps"):
        vs_unilab.reuse_ours(args, 102, run)


def _row(steps: int, ret: float, length: float) -> dict:
    return {"env_steps": steps, "return": ret, "episode_length": length}


def test_behind_points_compare_ours_last_point_at_or_before_each_of_the_seeds_past_1m():
    """Only the seed's points past 1 M count; ours at a point is its last at or before it; ours is behind where
    either its return or its episode length is below the seed's, and before its first point it is behind."""
    seed = [_row(900_000, 5.0, 500.0), _row(1_200_000, 1.0, 30.0), _row(2_000_000, 2.0, 40.0),
            _row(3_000_000, 3.0, 50.0), _row(4_000_000, 1.0, 20.0)]
    ours = [_row(1_000_000, 1.0, 30.0), _row(2_100_000, 9.0, 10.0), _row(2_900_000, 2.5, 60.0),
            _row(3_500_000, 4.0, 400.0)]
    count, behind = vs_unilab.behind_points(seed, ours)
    # 900 k is before the bar; at 1.2 M ours (1.0 M row) ties, which is at or above; at 2 M ours is still its 1 M
    # row (2.1 M is later), below in both; at 3 M its 2.9 M row is below in return; at 4 M its 3.5 M row is above.
    assert count == 4
    assert [(b["env_steps"], b["our_return"], b["our_episode_length"]) for b in behind] == [
        (2_000_000, 1.0, 30.0), (3_000_000, 2.5, 60.0)]
    assert vs_unilab.behind_points(seed, [_row(2_000_000, 9.0, 900.0)])[1][0]["our_return"] is None


def test_ahead_summary_says_yes_only_when_no_seed_point_past_1m_is_above_ours():
    """The printed verdict per seed: yes with every point counted, no with the first points where ours is below."""
    seed = [_row(1_500_000, 1.0, 30.0), _row(3_000_000, 2.0, 40.0)]
    runs = [{"learner": "unilab", "seed": 7, "rows": seed},
            {"learner": "appo", "seed": 7, "rows": [_row(1_000_000, 4.0, 100.0)]},
            {"learner": "unilab", "seed": 8, "rows": seed},
            {"learner": "appo", "seed": 8, "rows": [_row(1_000_000, 4.0, 100.0), _row(2_500_000, 1.5, 300.0)]}]
    lines = vs_unilab.ahead_summary(runs)
    assert lines[0] == "  seed 7: yes, 2 of the seed's 2 points past 1,000,000 env steps"
    assert lines[1] == "  seed 8: no, 1 of the seed's 2 points past 1,000,000 env steps; below at 3,000,000"
