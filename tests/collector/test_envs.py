"""Batched MuJoCo tasks against Gymnasium v5 (real MuJoCo, real Gymnasium, no mocks)."""

from __future__ import annotations

import gymnasium
import numpy as np
import pytest

from collector.envs import available_tasks, make_env
from common.task_spec import TASK_SPECS, UnknownTaskError

GYM_IDS = {
    "inverted_pendulum": "InvertedPendulum-v5",
    "half_cheetah": "HalfCheetah-v5",
    "hopper": "Hopper-v5",
    "ant": "Ant-v5",
}
# Our term name -> Gymnasium's info key.
INFO_KEYS = {"alive": "reward_survive", "healthy": "reward_survive", "forward": "reward_forward",
             "ctrl": "reward_ctrl", "contact": "reward_contact"}
N = 4
RTOL, ATOL = 1e-5, 1e-6


def _gym(task: str):
    return gymnasium.make(GYM_IDS[task]).unwrapped


def _actions(rng: np.random.Generator, model, n: int) -> np.ndarray:
    lo, hi = model.actuator_ctrlrange.T
    return rng.uniform(lo, hi, (n, model.nu)).astype(np.float32)


def _visited_states(task: str, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """N states Gymnasium reaches under random actions (contacts, fast joints, near-falls)."""
    env, rng = _gym(task), np.random.default_rng(seed)
    qpos, qvel = [], []
    for i in range(N):
        env.reset(seed=seed * N + i)
        for _ in range(int(rng.integers(0, 25))):
            q, v = env.data.qpos.copy(), env.data.qvel.copy()
            if env.step(_actions(rng, env.model, 1)[0])[2]:
                env.set_state(q, v)  # keep the last healthy state
                break
        qpos.append(env.data.qpos.copy())
        qvel.append(env.data.qvel.copy())
    env.close()
    return np.array(qpos), np.array(qvel)


def _edge_cases(task: str, qpos: np.ndarray, qvel: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Row 0 terminates on its first step; row 1 has a joint faster than Hopper's obs clip (10)."""
    qpos, qvel = qpos.copy(), qvel.copy()
    if task == "ant":
        qpos[0, 2] = 1.08
    elif task == "hopper":
        qpos[0, 2] = 0.3
    elif task == "inverted_pendulum":
        qpos[0, 1] = 0.25
    qvel[1, -1] = 14.0
    return qpos, qvel


def _run_parity(task: str, seed: int, nsteps: int) -> dict[str, int]:
    """Step our env and N Gymnasium envs from the same states with the same actions; compare."""
    rng = np.random.default_rng(100 + seed)
    qpos, qvel = _visited_states(task, seed)
    qpos, qvel = _edge_cases(task, qpos, qvel)
    env = make_env(task, N, 2, seed)
    gyms = [_gym(task) for _ in range(N)]
    env.set_state(qpos, qvel)
    for i, g in enumerate(gyms):
        g.reset(seed=i)  # mj_resetData: a zero warm start, as our set_state gives
        g.set_state(qpos[i], qvel[i])
    obs, _ = env.observe()
    for i, g in enumerate(gyms):
        np.testing.assert_allclose(obs[i], g._get_obs(), rtol=RTOL, atol=ATOL)
    live = np.ones(N, bool)
    seen = {"steps": 0, "terminated": 0, "contact": 0}
    for _ in range(nsteps):
        actions = _actions(rng, env.model, N)
        res = env.step(actions)
        for i in np.flatnonzero(live):
            g_obs, g_rew, g_term, _, info = gyms[i].step(actions[i])
            np.testing.assert_allclose(res.final_obs[i], g_obs, rtol=RTOL, atol=ATOL)
            np.testing.assert_allclose(res.final_critic[i], g_obs, rtol=RTOL, atol=ATOL)
            np.testing.assert_allclose(res.rewards[i], g_rew, rtol=RTOL, atol=1e-5)
            for name in env.spec.reward_terms:
                np.testing.assert_allclose(res.terms[name][i], info[INFO_KEYS[name]], rtol=RTOL, atol=1e-5,
                                           err_msg=f"{task} term {name}")
            assert bool(res.terminated[i]) == bool(g_term)
            assert not res.truncated[i]
            seen["steps"] += 1
            seen["terminated"] += int(g_term)
            seen["contact"] += int(task == "ant" and info["reward_contact"] != 0.0)
            if g_term:
                live[i] = False
        if not live.any():
            break
    env.close()
    return seen


@pytest.mark.parametrize("task", ["inverted_pendulum", "half_cheetah", "hopper"])
def test_step_parity_with_gymnasium(task):
    """Obs, reward, each reward term and terminated equal Gymnasium v5's over consecutive steps."""
    seen = {"steps": 0, "terminated": 0}
    for seed in range(3):
        for k, v in _run_parity(task, seed, nsteps=25).items():
            seen[k] = seen.get(k, 0) + v
    assert seen["steps"] >= 3 * N + 6  # several consecutive steps per row, not just one
    if task != "half_cheetah":
        assert seen["terminated"] >= 3


def test_ant_step_parity_with_gymnasium_including_contact_forces():
    """Ant's obs (cfrc_ext part included), contact cost and lagged-xpos forward reward equal Gymnasium's."""
    seen = {"steps": 0, "terminated": 0, "contact": 0}
    for seed in range(3):
        for k, v in _run_parity("ant", seed, nsteps=30).items():
            seen[k] += v
    assert seen["terminated"] >= 3  # the crafted too-high row of every round
    assert seen["contact"] >= 10  # contacts really occurred, so cfrc_ext was compared nonzero


def _check_reset_noise(dq: np.ndarray, dv: np.ndarray, scale: float, gaussian_qvel: bool) -> None:
    assert np.all(np.abs(dq) <= scale)
    assert np.abs(dq).mean() == pytest.approx(scale / 2, rel=0.15)  # U(-s, s)
    if gaussian_qvel:
        assert dv.std() == pytest.approx(scale, rel=0.15) and np.abs(dv).max() > scale  # s * N(0, 1)
    else:
        assert np.all(np.abs(dv) <= scale) and np.abs(dv).mean() == pytest.approx(scale / 2, rel=0.15)


@pytest.mark.parametrize("task", sorted(GYM_IDS))
def test_reset_distribution_matches_gymnasium_noise(task):
    """Our reset states and Gymnasium's share centre, noise family (uniform / Gaussian) and scale."""
    g = _gym(task)
    scale = g._reset_noise_scale
    gaussian_qvel = task in ("half_cheetah", "ant")
    gym_dq, gym_dv, gym_obs = [], [], []
    for seed in range(200):
        gym_obs.append(g.reset(seed=seed)[0])
        gym_dq.append(g.data.qpos - g.init_qpos)
        gym_dv.append(g.data.qvel - g.init_qvel)
    _check_reset_noise(np.array(gym_dq), np.array(gym_dv), scale, gaussian_qvel)

    env = make_env(task, 512, 1, seed=3)
    obs, critic = env.reset()
    np.testing.assert_array_equal(env.init_qpos, g.init_qpos)
    _check_reset_noise(env.qpos - env.init_qpos, env.qvel - env.init_qvel, scale, gaussian_qvel)
    np.testing.assert_array_equal(obs, critic)
    if task == "ant":
        assert not obs[:, 27:].any() and not np.array(gym_obs)[:, 27:].any()  # cfrc_ext is 0 at reset
    env.close()


def test_auto_reset_after_termination():
    """A terminating env is reset to a near-initial state; final_obs keeps its pre-reset observation."""
    env = make_env("hopper", N, 2, seed=0)
    qpos = np.tile(env.init_qpos, (N, 1))
    qpos[1, 1] = 0.5  # too low: unhealthy
    qvel = np.zeros((N, env.model.nv))
    env.set_state(qpos, qvel)
    g = _gym("hopper")
    g.reset(seed=0)
    g.set_state(qpos[1], qvel[1])
    actions = np.zeros((N, 3), np.float32)
    g_obs, _, g_term, _, _ = g.step(actions[1])
    res = env.step(actions)
    assert g_term
    np.testing.assert_array_equal(res.terminated, [False, True, False, False])
    assert not res.truncated.any()
    np.testing.assert_allclose(res.final_obs[1], g_obs, rtol=RTOL, atol=ATOL)
    assert res.terms["healthy"][1] == 0.0 and res.terms["healthy"][0] == 1.0
    # Row 1 now holds a fresh episode: Gymnasium's reset noise around the initial pose.
    assert np.all(np.abs(env.qpos[1] - env.init_qpos) <= 5e-3)
    assert np.all(np.abs(env.qvel[1]) <= 5e-3)
    np.testing.assert_array_equal(res.obs[1, :5], env.qpos[1, 1:].astype(np.float32))
    np.testing.assert_array_equal(res.obs[1], res.critic[1])
    # The other rows were not reset.
    np.testing.assert_array_equal(res.obs[[0, 2, 3]], res.final_obs[[0, 2, 3]])
    env.close()


def test_truncation_at_exactly_max_episode_steps():
    """truncated fires on step max_episode_steps of each episode (not before), then the env restarts."""
    env = make_env("half_cheetah", N, 2, seed=0, max_episode_steps=3)
    env.reset()
    rng = np.random.default_rng(0)
    flags = []
    for _ in range(7):
        res = env.step(_actions(rng, env.model, N))
        flags.append(res.truncated.copy())
        assert not res.terminated.any()
        if res.truncated.all():
            assert not np.allclose(res.final_obs, res.obs)
            assert np.all(np.abs(env.qpos - env.init_qpos) <= 0.1)
        else:
            np.testing.assert_array_equal(res.final_obs, res.obs)
    np.testing.assert_array_equal(np.array(flags).all(1), [False, False, True, False, False, True, False])
    assert not np.array(flags)[[0, 1, 3, 4, 6]].any()
    env.close()


def test_termination_takes_precedence_over_truncation():
    """An env that terminates on the last allowed step is terminated, not truncated."""
    env = make_env("hopper", N, 1, seed=0, max_episode_steps=1)
    qpos = np.tile(env.init_qpos, (N, 1))
    qpos[2, 1] = 0.5
    env.set_state(qpos, np.zeros((N, env.model.nv)))
    res = env.step(np.zeros((N, 3), np.float32))
    np.testing.assert_array_equal(res.terminated, [False, False, True, False])
    np.testing.assert_array_equal(res.truncated, [True, True, False, True])
    env.close()


def test_actions_are_clipped_to_ctrlrange_before_physics_and_ctrl_cost():
    """Out-of-range actions act (and cost) like their clipped values."""
    rng = np.random.default_rng(1)
    a = make_env("half_cheetah", N, 1, seed=5)
    b = make_env("half_cheetah", N, 1, seed=5)
    a.reset(), b.reset()
    raw = rng.uniform(-3, 3, (N, 6)).astype(np.float32)
    ra = a.step(raw)
    rb = b.step(np.clip(raw, -1, 1))
    np.testing.assert_array_equal(ra.obs, rb.obs)
    np.testing.assert_array_equal(ra.rewards, rb.rewards)
    np.testing.assert_allclose(ra.terms["ctrl"], -0.1 * (np.clip(raw, -1, 1).astype(np.float64) ** 2).sum(1),
                               rtol=1e-6)
    a.close(), b.close()


@pytest.mark.parametrize("task", sorted(GYM_IDS))
def test_shapes_and_dtypes_match_task_spec(task):
    """reset/step outputs have exactly the TaskSpec's dims and dtypes; rewards sum the terms."""
    spec = TASK_SPECS[task]
    env = make_env(task, N, 2, seed=0)
    assert env.spec == spec and env.num_envs == N
    assert env.model.nu == spec.act_dim and env.dt == pytest.approx(spec.control_dt)
    obs, critic = env.reset()
    assert obs.shape == (N, spec.obs_dim) and obs.dtype == np.float32
    assert critic.shape == (N, spec.critic_dim) and critic.dtype == np.float32
    res = env.step(np.zeros((N, spec.act_dim), np.float32))
    for arr, shape, dtype in ((res.obs, (N, spec.obs_dim), np.float32),
                              (res.critic, (N, spec.critic_dim), np.float32),
                              (res.final_obs, (N, spec.obs_dim), np.float32),
                              (res.final_critic, (N, spec.critic_dim), np.float32),
                              (res.rewards, (N,), np.float32),
                              (res.terminated, (N,), np.bool_),
                              (res.truncated, (N,), np.bool_)):
        assert arr.shape == shape and arr.dtype == dtype
    assert tuple(res.terms) == spec.reward_terms
    for term in res.terms.values():
        assert term.shape == (N,) and term.dtype == np.float32
    np.testing.assert_allclose(res.rewards, sum(res.terms.values()), rtol=1e-5, atol=1e-6)
    assert gymnasium.make(GYM_IDS[task]).unwrapped.observation_space.shape == (spec.obs_dim,)
    assert gymnasium.make(GYM_IDS[task]).spec.max_episode_steps == spec.max_episode_steps
    env.close()


@pytest.mark.parametrize("task", ["hopper", "ant"])
def test_same_seed_same_trajectory_at_any_thread_count(task):
    """Same seed and actions give bit-identical trajectories (resets included) with 1 or 2 threads."""
    def run(threads: int, seed: int) -> list[np.ndarray]:
        env = make_env(task, 8, threads, seed, max_episode_steps=20)
        rng = np.random.default_rng(0)
        out = [env.reset()[0]]
        for _ in range(50):
            res = env.step(_actions(rng, env.model, 8))
            out += [res.obs.copy(), res.rewards.copy(), res.terminated.copy(), res.truncated.copy()]
        env.close()
        return out

    a, b, c = run(1, 7), run(2, 7), run(2, 8)
    assert sum(x.sum() for x in a[4::4]) > 0  # truncation resets happened
    if task == "hopper":
        assert sum(x.sum() for x in a[3::4]) > 0  # and partial resets after terminations
    for x, y in zip(a, b, strict=True):
        np.testing.assert_array_equal(x, y)
    assert not np.array_equal(a[0], c[0])


def test_unknown_task_and_registry():
    """Unknown names raise UnknownTaskError; every TaskSpec task has an environment."""
    with pytest.raises(UnknownTaskError):
        make_env("walker2d", 1, 1, 0)
    assert available_tasks() == sorted(TASK_SPECS)


def test_closed_env_refuses_use():
    """After close() the env raises instead of touching freed simulation memory; close is idempotent."""
    env = make_env("inverted_pendulum", N, 1, seed=0)
    env.reset()
    env.close()
    env.close()
    with pytest.raises(RuntimeError, match="closed"):
        env.step(np.zeros((N, 1), np.float32))
    with pytest.raises(RuntimeError, match="closed"):
        env.reset()


def test_episode_tracker_reports_rms_tracking_error():
    """Per-episode RMS command errors are averaged over finished episodes; the post-reset sample is excluded."""
    from collector.rollout import EpisodeTracker

    tr = EpisodeTracker(2, ("r",))
    zeros = {"r": np.zeros(2)}
    no = np.zeros(2, bool)
    tr.step(np.zeros(2), zeros, no, no, np.array([[1.0, 4.0], [0.25, 0.0]]))
    tr.step(np.zeros(2), zeros, no, no, np.array([[9.0, 4.0], [0.25, 0.0]]))
    done = np.array([True, True])
    tr.step(np.zeros(2), zeros, done, no, np.array([[100.0, 100.0], [100.0, 100.0]]))  # next episode's state
    s = tr.summary()
    # env 0: sqrt((1+9)/2) = sqrt(5); env 1: sqrt(4) = 2  -> mean xy; yaw: sqrt(0.25)=0.5 and 0
    assert s["tracking_xy_rms"] == pytest.approx((np.sqrt(5.0) + 2.0) / 2)
    assert s["tracking_yaw_rms"] == pytest.approx(0.25)


# ------------------------------------------------- async step and env groups


@pytest.mark.parametrize("n,groups", [(1, 1), (7, 2), (8, 2), (2048, 2), (10, 3), (5, 5)])
def test_split_rows_covers_every_env_exactly_once(n, groups):
    """The group row ranges are contiguous, cover 0..n-1 exactly once, and differ in size by at most one."""
    from collector.envs.batched import split_rows

    rows = split_rows(n, groups)
    assert len(rows) == groups
    assert np.array_equal(np.concatenate([np.arange(n)[r] for r in rows]), np.arange(n))
    sizes = [r.stop - r.start for r in rows]
    assert min(sizes) >= 1 and max(sizes) - min(sizes) <= 1


def test_split_rows_refuses_empty_groups():
    """More groups than envs, or none, is an error rather than an empty group."""
    from collector.envs.batched import split_rows

    for n, groups in [(3, 4), (3, 0)]:
        with pytest.raises(ValueError):
            split_rows(n, groups)


def _trajectory(env, steps: int, act_dim: int, asynchronous: bool) -> list[np.ndarray]:
    rng = np.random.default_rng(1)
    out = [env.reset()[0]]
    for _ in range(steps):
        actions = rng.uniform(-1, 1, (env.num_envs, act_dim)).astype(np.float32)
        if asynchronous:
            env.step_async(actions)
            actions[:] = np.nan  # consumed by step_async: overwriting it changes nothing
            res = env.step_wait()
        else:
            res = env.step(actions)
        out += [res.obs.copy(), res.critic.copy(), res.rewards.copy(), res.terminated.copy(),
                res.truncated.copy(), res.final_critic.copy()]
    return out


@pytest.mark.parametrize("task", ["hopper", "ant", "go2_joystick_flat"])
def test_step_async_then_wait_equals_step(task):
    """step_async + step_wait gives bit-identical results to step (resets, persistent data, sensors included)."""
    envs = [make_env(task, 8, 2, seed=4, max_episode_steps=6) for _ in range(2)]
    act_dim = envs[0].spec.act_dim
    a = _trajectory(envs[0], 20, act_dim, asynchronous=False)
    b = _trajectory(envs[1], 20, act_dim, asynchronous=True)
    for env in envs:
        env.close()
    assert sum(x.sum() for x in a[5::6]) > 0  # truncation resets happened
    for x, y in zip(a, b, strict=True):
        np.testing.assert_array_equal(x, y)


def test_step_in_flight_blocks_other_calls_and_close_waits():
    """While a step_async runs, a second step or reset raises; step_wait clears it; close() joins the physics."""
    env = make_env("half_cheetah", 4, 1, seed=0)
    env.reset()
    actions = np.zeros((4, 6), np.float32)
    env.step_async(actions)
    with pytest.raises(RuntimeError, match="in flight"):
        env.step(actions)
    with pytest.raises(RuntimeError, match="in flight"):
        env.reset()
    env.step_wait()
    env.step(actions)
    env.step_async(actions)
    env.close()
    with pytest.raises(RuntimeError, match="closed"):
        env.step_wait()


def test_env_groups_step_equals_each_group_stepped_alone():
    """An EnvGroups' rows are its groups' envs, each seeded from the spawned generators, stepped with their rows."""
    from collector.envs import EnvGroups
    from collector.envs.gym_tasks import Hopper

    n, seed = 9, 5
    groups = EnvGroups.build(lambda k, t, s, st: Hopper(k, t, s, max_episode_steps=7, stepper=st), n, 2, 2, seed)
    assert [g.num_envs for g in groups.envs] == [4, 5] and groups.num_envs == n
    alone = [Hopper(k, 1, 0, max_episode_steps=7) for k in (4, 5)]
    for env, rng in zip(alone, np.random.default_rng(seed).spawn(2), strict=True):
        env.rng = rng
    obs, _ = groups.reset()
    np.testing.assert_array_equal(obs, np.concatenate([env.reset()[0] for env in alone]))
    rng = np.random.default_rng(0)
    dones = 0
    for _ in range(25):
        actions = rng.uniform(-1, 1, (n, 3)).astype(np.float32)
        res = groups.step(actions)
        ref = [env.step(actions[rows]) for env, rows in zip(alone, groups.rows, strict=True)]
        for name in ("obs", "critic", "rewards", "terminated", "truncated", "final_obs", "final_critic"):
            np.testing.assert_array_equal(getattr(res, name), np.concatenate([getattr(r, name) for r in ref]))
        for name in res.terms:
            np.testing.assert_array_equal(res.terms[name], np.concatenate([r.terms[name] for r in ref]))
        dones += int((res.terminated | res.truncated).sum())
    assert dones > 0
    groups.close()
    for env in alone:
        env.close()


def test_make_collector_env_splits_large_batches_only():
    """From COLLECTOR_SPLIT_MIN_ENVS envs on the batch is two halves, each on all the threads (overlap needs two)."""
    from collector import envs as E

    n = E.COLLECTOR_SPLIT_MIN_ENVS
    for threads, overlap in [(1, False), (2, True), (5, True)]:
        with E.make_collector_env("half_cheetah", n, threads, seed=0) as env:
            assert isinstance(env, E.EnvGroups)
            assert [e.num_envs for e in env.envs] == [n // 2, n // 2]
            assert [e._sim.nthread for e in env.envs] == [threads] * 2
            assert env.overlap is overlap
    with E.make_collector_env("half_cheetah", n - 1, 2, seed=0) as env:
        assert isinstance(env, E.BatchedEnv)


def test_env_groups_take_turns_on_one_stepper_thread():
    """The groups' background steps run on one thread, one after another, never side by side."""
    import threading
    import time
    from itertools import pairwise

    from collector import envs as E

    spans: list[tuple[int, float, float]] = []
    with E.make_collector_env("half_cheetah", E.COLLECTOR_SPLIT_MIN_ENVS, 2, seed=0) as env:
        for group in env.envs:
            step = group._sim._step

            def recorded(*args, _step=step):
                start = time.perf_counter()
                _step(*args)
                spans.append((threading.get_ident(), start, time.perf_counter()))

            group._sim._step = recorded
        actions = np.zeros((env.num_envs, env.spec.act_dim), np.float32)
        for _ in range(5):
            env.step(actions)
    assert len(spans) == 10
    assert len({name for name, _, _ in spans}) == 1 and spans[0][0] != threading.get_ident()
    ordered = sorted(spans, key=lambda s: s[1])
    assert all(a[2] <= b[1] for a, b in pairwise(ordered))


def test_batched_env_groups_and_gym_vector_env_provide_the_vector_env_interface():
    """BatchedEnv, EnvGroups and GymVectorEnv have every member of VectorEnv, the rollout loop's view of an env."""
    from collector import envs as E

    for env in (make_env("half_cheetah", 2, 1, seed=0), E.make_collector_env("half_cheetah", 256, 1, seed=0),
                make_env("gym:Pendulum-v1", 2, 1, seed=0)):
        with env:
            assert isinstance(env, E.VectorEnv), type(env).__name__
            env.rng = np.random.default_rng(1)  # settable, as deterministic mode needs
