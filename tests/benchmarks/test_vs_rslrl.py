"""benchmarks.vs_rslrl: rsl_rl's VecEnv adapter against the env itself, a real run of both learners, bad input."""

import json
import subprocess
import sys

import numpy as np
import pytest
import torch

from benchmarks.vs_rslrl import main, missing_modules
from collector.envs import make_collector_env

TASK_ARGS = ["--task", "inverted_pendulum", "--num-envs", "16", "--env-steps", "1000"]


@pytest.fixture(autouse=True)
def _rslrl_installed():
    """These tests drive the real rsl_rl: without it they fail, saying how to install it, rather than skip."""
    missing = missing_modules()
    if missing:
        pytest.fail(f"{', '.join(missing)} not installed: `make install` (or `make rslrl`) installs rsl-rl-lib "
                    "and the rslrl extra")


@pytest.mark.parametrize(("task", "num_envs", "limit"), [
    ("inverted_pendulum", 256, 8),   # from 256 envs the collector's env is two EnvGroups
    ("go2_joystick_flat", 16, 30),   # a critic observation wider than the policy's; velocity commands
])
def test_adapter_hands_rsl_rl_the_envs_own_observations_rewards_and_time_outs(task, num_envs, limit):
    """From the same seed and actions, the adapter gives what the env gives: obs, critic, raw rewards, dones and
    time-outs (terminations and time limits both occur), and the time-out rate of the finished episodes."""
    from benchmarks.rslrl_env import RslRlEnv

    env = make_collector_env(task, num_envs, 1, seed=5, max_episode_steps=limit)
    adapted = RslRlEnv(make_collector_env(task, num_envs, 1, seed=5, max_episode_steps=limit))
    rng = np.random.default_rng(0)
    try:
        obs, critic = env.reset()
        first = adapted.get_observations()
        np.testing.assert_array_equal(first["policy"].numpy(), obs)
        np.testing.assert_array_equal(first["critic"].numpy(), critic)
        assert adapted.num_actions == env.spec.act_dim and adapted.max_episode_length == limit
        terminated = truncated = 0
        for _ in range(3 * limit):
            actions = rng.uniform(-3, 3, (num_envs, env.spec.act_dim)).astype(np.float32)
            got_obs, rewards, dones, extras = adapted.step(torch.from_numpy(actions))
            res = env.step(actions)
            np.testing.assert_array_equal(got_obs["policy"].numpy(), res.obs)
            np.testing.assert_array_equal(got_obs["critic"].numpy(), res.critic)
            np.testing.assert_array_equal(rewards.numpy(), res.rewards)
            np.testing.assert_array_equal(dones.numpy().astype(bool), res.terminated | res.truncated)
            np.testing.assert_array_equal(extras["time_outs"].numpy(), res.truncated)
            done = res.terminated | res.truncated
            if done.any():
                np.testing.assert_array_equal(extras["log"]["Episode/timeout_rate"].numpy(), res.truncated[done])
            tracked = "Episode/tracking_error_xy" in extras.get("log", {})
            assert tracked == (done.any() and task == "go2_joystick_flat")
            terminated += int(res.terminated.sum())
            truncated += int(res.truncated.sum())
        assert terminated > 0 and truncated > 0
    finally:
        env.close()
        adapted.close()


def test_a_tiny_run_writes_both_curves_the_plot_and_both_evaluations(tmp_path):
    """A real run of rsl_rl (two std contenders) and appo-train writes curves whose env-step axes step by one
    iteration up to the budget, the plot and 20-episode evaluations of every final policy; rsl_rl's saved actor acts
    with the mean action of normalised observations."""
    from benchmarks.rslrl_train import load_policy

    out = tmp_path / "vs"
    cmd = [sys.executable, "-m", "benchmarks.vs_rslrl", *TASK_ARGS, "--seeds", "3", "--std-contenders", "1.0,0.5",
           "--threads", "1", "--out", str(out)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    curves = json.loads((out / "curves.json").read_text())
    runs = {r["label"]: r for r in curves["runs"]}
    assert set(runs) == {"rsl_rl std 1", "rsl_rl std 0.5", "appo"}
    for run in runs.values():
        per_iteration = run["num_envs"] * run["steps_per_env"]
        steps = [row["env_steps"] for row in run["rows"]]
        assert steps == [per_iteration * (i + 1) for i in range(run["iterations"])]
        assert 1000 <= steps[-1] < 1000 + per_iteration and run["env_steps"] == steps[-1]
        assert all({"return", "episode_length", "learning_rate", "policy_std"} <= set(row) for row in run["rows"])
        assert run["eval"]["episodes"] == 20 and {"return_mean", "length_mean", "time_limit_fraction"} <= set(
            run["eval"])
    assert runs["appo"]["steps_per_env"] == 32 and runs["rsl_rl std 1"]["steps_per_env"] == 24
    # The contender's std is the one rsl_rl started from (it moves little in three iterations).
    assert runs["rsl_rl std 0.5"]["rows"][0]["policy_std"] == pytest.approx(0.5, abs=0.02)
    csv_lines = (out / "curves.csv").read_text().splitlines()
    assert len(csv_lines) == 1 + sum(len(r["rows"]) for r in runs.values())
    assert (out / "curves.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    evals = json.loads((out / "eval.json").read_text())["evaluations"]
    assert sorted(e["label"] for e in evals) == sorted(runs) and all(e["seed"] == 3 for e in evals)
    assert "final policies, 20 deterministic episodes" in proc.stdout and "rsl_rl std 0.5" in proc.stdout

    policy = load_policy(out / "rslrl_std0.5" / "seed_3" / "policy.pt")
    obs = torch.randn(64, 4)
    actor = policy.actor
    assert int(actor.obs_normalizer.count) > 0  # the statistics training gathered came with the actor
    expected = actor.mlp(actor.obs_normalizer(obs))
    torch.testing.assert_close(policy.act_deterministic(obs), expected)
    torch.testing.assert_close(policy.act_deterministic(obs), expected)


@pytest.mark.parametrize(("args", "problem"), [
    (["--task", "no_such_task", "--env-steps", "1000"], "no_such_task"),
    (["--task", "inverted_pendulum", "--env-steps", "0"], "--env-steps"),
    ([*TASK_ARGS[:-2], "--env-steps", "lots"], "--env-steps"),
    ([*TASK_ARGS[:2], "--num-envs", "-4", "--env-steps", "1000"], "--num-envs"),
    ([*TASK_ARGS, "--seeds", "1,two"], "--seeds"),
    ([*TASK_ARGS, "--std-contenders", "1.0,-0.5"], "--std-contenders"),
    ([*TASK_ARGS, "algo.no_such_key=3"], "no_such_key"),
    ([*TASK_ARGS, "algo.seed=4"], "algo.seed"),
])
def test_bad_input_is_refused_naming_the_problem(args, problem, tmp_path, capsys):
    """Unknown tasks, bad numbers, unknown or tool-owned override keys: exit 2, the problem named, nothing run."""
    with pytest.raises(SystemExit) as exc:
        main([*args, "--out", str(tmp_path / "out")])
    assert exc.value.code == 2
    assert problem in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("module", ["rsl_rl", "tensordict"])
def test_a_missing_extra_is_named_with_how_to_install_it(module, tmp_path):
    """Without rsl-rl-lib, or a module of the rslrl extra, the tool exits 2 naming it and `make rslrl`."""
    code = (f"import sys; sys.modules[{module!r}] = None; from benchmarks.vs_rslrl import main; "
            f"sys.exit(main({[*TASK_ARGS, '--out', str(tmp_path / 'out')]!r}))")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert module in proc.stderr and "make rslrl" in proc.stderr
    assert not (tmp_path / "out").exists()
