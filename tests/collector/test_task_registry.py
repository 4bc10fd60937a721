"""Tasks from outside the project: gym:<id>, package.module:factory, appo.tasks entry points."""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

import gymnasium
import numpy as np
import pytest
from gymnasium.spaces import Box

from collector.envs import available_tasks, make_env
from common.task_plugins import resolve_task_spec
from common.task_spec import TASK_SPECS, UnknownTaskError, task_spec

BIN = Path(sys.executable).parent
ROOT = Path(__file__).resolve().parents[2]
USER_MODULE = "appo_user_tasks"

# A user's package: its own spec name around the built-in pendulum, declared next to the factory.
USER_SOURCE = textwrap.dedent('''
    import dataclasses
    from common.task_spec import TASK_SPECS

    spec = dataclasses.replace(TASK_SPECS["inverted_pendulum"], name="my_pendulum")

    class Renamed:
        """The wrapped env under the user's own spec."""

        def __init__(self, env):
            self._env = env
            self.spec = spec

        def __getattr__(self, name):
            return getattr(self._env, name)

    def make(num_envs, num_threads, seed, max_episode_steps=None):
        from collector.envs import make_env  # only when an env is built: the learner never needs it
        return Renamed(make_env("inverted_pendulum", num_envs, num_threads, seed, max_episode_steps))

    def make_hook_spec(num_envs, num_threads, seed, max_episode_steps=None):
        return make(num_envs, num_threads, seed, max_episode_steps)

    def make_wrong(num_envs, num_threads, seed, max_episode_steps=None):
        from collector.envs import make_env
        return make_env("inverted_pendulum", num_envs, num_threads, seed, max_episode_steps)

    def make_unspecified(num_envs, num_threads, seed, max_episode_steps=None):
        raise AssertionError("never called: the spec lookup fails first")
''')
TINY = ["algo.max_iterations=2", "algo.num_envs=8", "algo.steps_per_env=8", "algo.save_interval=2",
        "algo.policy.actor_hidden_dims=[16,16]", "algo.policy.critic_hidden_dims=[16,16]", "training.console=false"]


@pytest.fixture
def user_dir(tmp_path, monkeypatch):
    """A directory on sys.path holding the user module; the module is forgotten afterwards."""
    (tmp_path / f"{USER_MODULE}.py").write_text(USER_SOURCE)
    monkeypatch.syspath_prepend(str(tmp_path))
    yield tmp_path
    sys.modules.pop(USER_MODULE, None)


class _Counter(gymnasium.Env):
    """obs = [step, applied action]; reward = step; ends on action +1 at step 2 or -1 at step 3."""

    observation_space = Box(-np.inf, np.inf, (2,), np.float64)
    action_space = Box(-1.0, 1.0, (1,), np.float32)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        return np.zeros(2), {}

    def step(self, action):
        self.t += 1
        a = float(action[0])
        terminated = (a >= 1.0 and self.t == 2) or (a <= -1.0 and self.t == 3)
        return np.array([self.t, a]), float(self.t), terminated, False, {}


COUNTER_ID = "AppoTestCounter-v0"
if COUNTER_ID not in gymnasium.registry:
    gymnasium.register(COUNTER_ID, entry_point=_Counter, max_episode_steps=3)


def test_builtin_names_resolve_to_their_specs():
    """resolve_task_spec returns the TASK_SPECS entry of a built-in; task_spec keeps working for built-ins."""
    for name, spec in TASK_SPECS.items():
        assert resolve_task_spec(name) is spec
        assert task_spec(name) is spec


@pytest.mark.parametrize("name, phrase", [
    ("walker2d", "unknown task 'walker2d'"),
    ("gym:", "give a Gymnasium id"),
    ("gym:NoSuchEnv-v0", "Gymnasium cannot make"),
    ("gym:CartPole-v1", "flat Box action space"),
    ("no_such_pkg.tasks:make", "cannot import module 'no_such_pkg.tasks'"),
    ("os:no_factory", "has no attribute 'no_factory'"),
    ("os:sep", "not a factory function"),
    ("bad name:make", "not of the form package.module:factory"),
])
def test_bad_task_strings_name_the_problem(name, phrase):
    """Malformed or unresolvable task strings raise UnknownTaskError saying what is wrong."""
    with pytest.raises(UnknownTaskError, match=phrase):
        resolve_task_spec(name)
    with pytest.raises(UnknownTaskError, match=phrase):
        make_env(name, 1, 1, 0)


def test_gym_adapter_maps_auto_reset_to_step_result():
    """gym:<id>: actions clipped to the box; terminated/truncated/final_obs follow StepResult, obs is post-reset."""
    env = make_env(f"gym:{COUNTER_ID}", 3, 1, seed=0)
    assert (env.spec.obs_dim, env.spec.act_dim) == (2, 1)
    assert env.spec.max_episode_steps == 3 and env.spec.reward_terms == ("reward",)
    obs, critic = env.reset()
    assert obs.dtype == np.float32 and np.array_equal(obs, critic)
    actions = np.array([[5.0], [-5.0], [0.0]], np.float32)  # clipped to +1, -1, 0
    r = env.step(actions)
    assert np.array_equal(r.obs, [[1, 1], [1, -1], [1, 0]]) and not (r.terminated | r.truncated).any()
    r = env.step(actions)  # env 0 terminates at step 2
    assert r.terminated.tolist() == [True, False, False] and not r.truncated.any()
    assert np.array_equal(r.final_obs[0], [2, 1]) and np.array_equal(r.obs[0], [0, 0])
    assert np.array_equal(r.rewards, [2, 2, 2]) and np.array_equal(r.terms["reward"], r.rewards)
    r = env.step(actions)  # env 1 terminates exactly at the limit; env 2 only reaches it
    assert r.terminated.tolist() == [False, True, False]
    assert r.truncated.tolist() == [False, False, True]
    assert np.array_equal(r.final_obs[1:], [[3, -1], [3, 0]]) and np.array_equal(r.obs[1:], [[0, 0], [0, 0]])
    assert np.array_equal(r.final_critic, r.final_obs) and np.array_equal(r.obs[0], [1, 1])
    env.close()


@pytest.mark.parametrize("threads", [1, 2])
def test_gym_adapter_on_threads_keeps_auto_reset_and_uses_them(threads):
    """On 2 threads the copies step on two threads (one on 1) and keep the auto-reset contract."""
    env = make_env(f"gym:{COUNTER_ID}", 3, threads, seed=0)
    env.reset()
    actions = np.array([[1.0], [-1.0], [0.0]], np.float32)
    idents = set()
    for inner in env._envs:
        step = inner.unwrapped.step
        inner.unwrapped.step = lambda a, step=step: (idents.add(threading.get_ident()), step(a))[1]
    ended = [env.step(actions).terminated.tolist() for _ in range(3)]
    assert ended == [[False] * 3, [True, False, False], [False, True, False]]
    assert env._result.truncated.tolist() == [False, False, True]
    assert len(idents) == threads
    env.close()


def test_gym_walker_data_is_the_same_on_one_or_two_threads():
    """gym:Walker2d-v5 (real MuJoCo): a seed gives the same observations, rewards and ends on 1 and 2 threads."""
    actions = np.random.default_rng(0).uniform(-1, 1, (60, 8, 6)).astype(np.float32)
    runs = []
    for threads in (1, 2):
        with make_env("gym:Walker2d-v5", 8, threads, seed=11, max_episode_steps=25) as env:
            obs = [env.reset()[0]]
            for a in actions:
                r = env.step(a)
                obs.append(np.concatenate([r.obs, r.final_obs, r.rewards[:, None], r.terminated[:, None],
                                           r.truncated[:, None]], axis=1))
            runs.append(np.stack(obs[1:]))
    assert runs[0][..., -1].any(), "no copy reached the time limit: the test would not see a reset"
    np.testing.assert_array_equal(runs[0], runs[1])


def test_gym_pendulum_spec_and_time_limit_override():
    """gym:Pendulum-v1 has the spec of its spaces, steps in float32, and honours max_episode_steps."""
    spec = resolve_task_spec("gym:Pendulum-v1")
    assert (spec.obs_dim, spec.critic_dim, spec.act_dim, spec.max_episode_steps) == (3, 3, 1, 200)
    assert spec.control_dt == pytest.approx(0.05) and spec.name == "gym:Pendulum-v1"
    env = make_env("gym:Pendulum-v1", 4, 1, seed=3, max_episode_steps=5)
    env.reset()
    for step in range(1, 6):
        r = env.step(np.full((4, 1), 10.0, np.float32))
        assert r.obs.shape == (4, 3) and r.rewards.dtype == np.float32
        assert r.truncated.all() == (step == 5) and not r.terminated.any()
    env.close()


def test_module_factory_task_uses_the_declared_spec(user_dir):
    """package.module:factory builds the factory's env; its spec comes from the module, not from stepping."""
    spec = resolve_task_spec(f"{USER_MODULE}:make")
    assert spec.name == "my_pendulum" and spec.obs_dim == 4
    env = make_env(f"{USER_MODULE}:make", 2, 1, seed=0, max_episode_steps=7)
    assert env.spec == spec
    env.reset()
    r = env.step(np.zeros((2, 1), np.float32))
    assert r.obs.shape == (2, 4)
    env.close()


def test_spec_hook_order_and_refusals(user_dir):
    """factory.spec beats module spec beats task_spec(); a missing spec or a disagreeing env is refused."""
    import appo_user_tasks as user

    own = dataclasses.replace(user.spec, name="hooked")
    user.make_hook_spec.spec = own
    assert resolve_task_spec(f"{USER_MODULE}:make_hook_spec") == own
    del user.make_hook_spec.spec
    del user.spec
    user.task_spec = lambda: own
    assert resolve_task_spec(f"{USER_MODULE}:make") == own
    del user.task_spec
    with pytest.raises(UnknownTaskError, match="declares no spec"):
        make_env(f"{USER_MODULE}:make_unspecified", 1, 1, 0)
    user.spec = own
    with pytest.raises(UnknownTaskError, match="has spec .* but the task declares"):
        make_env(f"{USER_MODULE}:make_wrong", 1, 1, 0)


def test_entry_point_group_registers_task_names(user_dir):
    """A name in the appo.tasks entry-point group of an installed package resolves like its factory."""
    dist = user_dir / "appo_user_tasks-0.1.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: appo-user-tasks\nVersion: 0.1\n")
    (dist / "entry_points.txt").write_text(f"[appo.tasks]\nmy_pendulum = {USER_MODULE}:make\n")
    assert "my_pendulum" in available_tasks()
    assert resolve_task_spec("my_pendulum").name == "my_pendulum"
    env = make_env("my_pendulum", 2, 1, seed=0)
    assert env.reset()[0].shape == (2, 4)
    env.close()


@pytest.mark.parametrize("task", [f"{USER_MODULE}:make", "gym:Pendulum-v1"])
def test_appo_train_runs_a_plugin_task(task, user_dir, tmp_path):
    """The real appo-train (learner + collector processes) trains a module:factory task and a gym: task."""
    run, shm = tmp_path / "run", tmp_path / "shm"
    shm.mkdir()
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(user_dir), str(ROOT), os.environ.get("PYTHONPATH", "")])}
    proc = subprocess.run(
        [str(BIN / "appo-train"), "--task", task, "--log-dir", str(run), *TINY, f"transport.shm_root={shm}"],
        capture_output=True, text=True, timeout=120, env=env,
    )
    logs = "".join(p.read_text()[-2000:] for p in run.glob("collector_*.log"))
    assert proc.returncode == 0, proc.stderr[-3000:] + logs
    summary = json.loads((run / "summary.json").read_text())
    assert summary["status"] == "completed" and summary["completed_iterations"] == 2
    assert summary["total_env_steps"] >= 2 * 8 * 8 and (run / "model_2.pt").is_file()
