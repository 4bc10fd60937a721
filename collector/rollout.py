"""The collector lap (docs/design.md#the-collector-lap): newest weights -> T steps of infer+step -> send.

The loop writes straight into a transport buffer (shared memory on one host),
so a rollout is never copied inside the collector.
"""

from __future__ import annotations

import threading
import time

import numpy as np

from collector.action_noise import ColoredNoise
from collector.envs.batched import EnvGroups, StepResult
from collector.envs.interface import VectorEnv
from collector.inference import make_inference
from common.config import AppoConfig
from common.logging import get_logger
from common.rollout_spec import RolloutSpec
from common.status_server import Heartbeat
from common.transport.interface import CollectorTransport

log = get_logger("collector")


class EpisodeTracker:
    """Running per-env returns/lengths/term sums; finished episodes summarised per rollout."""

    def __init__(self, num_envs: int, terms: tuple[str, ...]):
        self.terms = terms
        self.ret = np.zeros(num_envs, np.float64)
        self.length = np.zeros(num_envs, np.int64)
        self.term_sums = np.zeros((len(terms), num_envs), np.float64)
        # Velocity-command tasks: per-env sums of squared xy and yaw-rate tracking errors, and their count.
        self.track_sq = np.zeros((2, num_envs), np.float64)
        self.track_n = np.zeros(num_envs, np.int64)
        self._reset_window()

    def _reset_window(self) -> None:
        self.done_returns: list[np.ndarray] = []
        self.done_lengths: list[np.ndarray] = []
        self.done_timeouts: list[np.ndarray] = []
        self.done_terms: list[np.ndarray] = []
        self.done_tracking: list[np.ndarray] = []  # [2, k] per-episode RMS errors (xy, yaw)

    def step(self, rewards: np.ndarray, terms: dict[str, np.ndarray], done: np.ndarray, truncated: np.ndarray,
             tracking_sq: np.ndarray | None = None, rows: slice = slice(None)) -> None:
        """One step of the envs `rows` (a slice: the arrays below are theirs).

        tracking_sq: [2, n] squared xy / yaw-rate command errors of the state reached (ignored where done:
        that state is already the next episode's)."""
        ret, length, term_sums = self.ret[rows], self.length[rows], self.term_sums[:, rows]  # views
        ret += rewards
        length += 1
        for i, name in enumerate(self.terms):
            term_sums[i] += terms[name]
        track_sq, track_n = self.track_sq[:, rows], self.track_n[rows]
        if tracking_sq is not None:
            live = ~done
            track_sq[:, live] += tracking_sq[:, live]
            track_n[live] += 1
        if done.any():
            idx = np.flatnonzero(done)
            self.done_returns.append(ret[idx])
            self.done_lengths.append(length[idx])
            self.done_timeouts.append(truncated[idx])
            self.done_terms.append(term_sums[:, idx])
            if tracking_sq is not None:
                self.done_tracking.append(np.sqrt(track_sq[:, idx] / np.maximum(track_n[idx], 1)))
                track_sq[:, idx] = 0
                track_n[idx] = 0
            ret[idx] = 0
            length[idx] = 0
            term_sums[:, idx] = 0

    def summary(self) -> dict:
        """Statistics of the episodes finished since the last call (msgpack-friendly)."""
        if not self.done_returns:
            self._reset_window()
            return {"episodes": 0}
        rets = np.concatenate(self.done_returns)
        terms = np.concatenate(self.done_terms, axis=1)
        out = {
            "episodes": int(rets.size),
            "return_mean": float(rets.mean()),
            "length_mean": float(np.concatenate(self.done_lengths).mean()),
            "timeout_rate": float(np.concatenate(self.done_timeouts).mean()),
            "terms": {name: float(terms[i].mean()) for i, name in enumerate(self.terms)},
        }
        if self.done_tracking:
            tracking = np.concatenate(self.done_tracking, axis=1)
            out["tracking_xy_rms"] = float(tracking[0].mean())
            out["tracking_yaw_rms"] = float(tracking[1].mean())
        self._reset_window()
        return out


class Collector:
    """One collector's loop: steps `env` with the newest weights and streams rollouts through `channel`."""

    def __init__(self, cfg: AppoConfig, env: VectorEnv, channel: CollectorTransport | None,
                 stop_event: threading.Event, seed: int = 0, overlap: bool = True):
        """channel: None for a collector driven by hand (fill_rollout only: benchmarks, tests).

        overlap: step an EnvGroups env double-buffered (see fill_rollout); False steps one group at a time.
        seed: seeds the action noise of the inference backend (training.collector_inference, collector/inference.py)."""
        self.cfg = cfg
        self.env = env
        self.groups = env_groups(env, overlap)
        self._done = np.zeros(env.num_envs, bool)
        self._infer_s = self._step_s = 0.0
        self.channel = channel
        self.stop_event = stop_event
        self.spec = RolloutSpec.for_task(env.spec, env.num_envs, cfg.algo.steps_per_env)
        self.inference = make_inference(cfg, env.spec, seed)
        beta = cfg.algo.policy.action_noise_beta
        self.noise = ColoredNoise(env.num_envs, env.spec.act_dim, beta, seed) if beta > 0 else None
        self.version = -1
        self.seq = 0
        self.gamma = cfg.algo.algorithm.gamma
        self.episodes = EpisodeTracker(env.num_envs, env.spec.reward_terms)
        self.seed = seed
        self.deterministic = cfg.training.deterministic
        self.lockstep = cfg.training.lockstep
        self.heartbeat = Heartbeat(cfg.training.liveness_timeout_s, "collector loop")
        self.last_perf: dict = {}

    def _take_weights(self) -> bool:
        got = self.channel.read_weights(self.version)
        if got is None:
            return False
        first = self.version < 0
        self.version, flat = got
        self.inference.load(flat)
        if first:
            log.info("received weights", version=self.version, inference=self.inference.name)
        return True

    def _should_stop(self) -> bool:
        return self.stop_event.is_set() or self.channel.stop_requested() or not self.channel.learner_alive()

    def learner_lost(self) -> bool:
        """Whether the learner went away without ending the run (it crashed), rather than stopping us."""
        return not self.stop_event.is_set() and not self.channel.stop_requested() and not self.channel.learner_alive()

    def wait_for_weights(self) -> bool:
        """Block until the learner has published weights (False if stopped first)."""
        while not self._take_weights():
            if self._should_stop():
                return False
            self.heartbeat.beat()
            time.sleep(0.01)
        return True

    def run(self, max_rollouts: int | None = None) -> int:
        """Stream rollouts until stopped (or max_rollouts); returns how many were sent."""
        if not self.wait_for_weights():
            return 0
        obs, critic = self.env.reset()
        used_version = -1
        while not self._should_stop() and (max_rollouts is None or self.seq < max_rollouts):
            self.heartbeat.beat()
            buf = self.channel.acquire(timeout=0.2)
            if buf is None:
                continue
            if self.deterministic or self.lockstep:
                if not self._wait_for_newer(used_version):
                    break
                if self.deterministic:
                    obs, critic = self._reset_for(self.version)
            else:
                self._take_weights()
            used_version = self.version
            obs, critic, perf = self.fill_rollout(buf.arrays, obs, critic)
            self.last_perf = perf
            stats = {**self.episodes.summary(), **perf}
            self.channel.commit(buf, self.seq, self.version, stats)
            self.seq += 1
        return self.seq

    def _wait_for_newer(self, version: int) -> bool:
        """Lock-step: block until the learner published a policy newer than `version`."""
        while self.version <= version:
            self.heartbeat.beat()
            if self._should_stop():
                return False
            if not self._take_weights():
                time.sleep(0.001)
        return True

    def _reset_for(self, version: int) -> tuple[np.ndarray, np.ndarray]:
        """Deterministic mode: a rollout's data depends only on (seed, policy version) and the weights,
        so a resumed run reproduces a straight one exactly."""
        self.env.rng = np.random.default_rng([self.seed, version])
        self.inference.seed(self.seed * 1_000_003 + version)
        if self.noise is not None:
            self.noise.seed(self.seed * 1_000_003 + version)
        self.episodes = EpisodeTracker(self.env.num_envs, self.env.spec.reward_terms)
        return self.env.reset()

    def fill_rollout(self, out: dict[str, np.ndarray], obs: np.ndarray, critic: np.ndarray):
        """Step T times from (obs, critic), writing every rollout field into `out`.

        Over EnvGroups the loop is double-buffered: a group's next physics step
        starts as soon as its actions are known, and while it runs on MuJoCo's
        threads the main thread finishes the other group's step and runs its
        inference.  Each group's data is the same as with `overlap=False`, where
        every step is finished before the next group is looked at.
        """
        self._infer_s = self._step_s = 0.0
        groups = self.groups
        for g in groups:
            self._act(g, out, 0, obs[g.rows], critic[g.rows])
        for t in range(self.spec.steps):
            self.heartbeat.beat()
            for g in groups:
                res = self._finish(g, out, t)
                if t + 1 < self.spec.steps:
                    self._act(g, out, t + 1, res.obs, res.critic)
                else:
                    out["last_obs"][g.rows] = res.obs
                    out["last_critic"][g.rows] = res.critic
        # The env reuses its output arrays on the next step: hand back our own copies.
        perf = {"infer_ms": self._infer_s * 1e3, "step_ms": self._step_s * 1e3}
        return out["last_obs"].copy(), out["last_critic"].copy(), perf

    def _act(self, g: EnvGroup, out: dict[str, np.ndarray], t: int, obs: np.ndarray, critic: np.ndarray) -> None:
        """Record group g's (obs, critic) at step t, sample its actions, and start its physics step."""
        t0 = time.perf_counter()
        actions, log_probs = self.inference.sample(obs, None if self.noise is None else self.noise.draw(g.rows))
        out["obs"][g.rows, t] = obs
        out["critic"][g.rows, t] = critic
        out["actions"][g.rows, t] = actions
        out["log_probs"][g.rows, t] = log_probs
        t1 = time.perf_counter()
        g.start(actions)  # consumed before it returns: the next sample may reuse the buffer
        self._infer_s += t1 - t0
        self._step_s += time.perf_counter() - t1

    def _finish(self, g: EnvGroup, out: dict[str, np.ndarray], t: int) -> StepResult:
        """Wait for group g's step t; record its rewards (timeouts bootstrapped), dones and episode stats."""
        t0 = time.perf_counter()
        res = g.finish()
        t1 = time.perf_counter()
        rewards = out["rewards"][g.rows, t]
        rewards[:] = res.rewards
        if res.truncated.any():
            # Time-limit ends are not failures: bootstrap with the value of the final state.
            idx = np.flatnonzero(res.truncated)
            final_v = self.inference.value(res.final_critic[idx])
            rewards[idx] += self.gamma * final_v
        done = np.logical_or(res.terminated, res.truncated, out=self._done[g.rows])
        out["dones"][g.rows, t] = done
        out["truncated"][g.rows, t] = res.truncated
        self.episodes.step(res.rewards, res.terms, done, res.truncated, _tracking_sq(g.env), rows=g.rows)
        self._step_s += t1 - t0
        self._infer_s += time.perf_counter() - t1
        return res


class EnvGroup:
    """One group of the rollout loop: an env, its rows of the rollout, and a step that can run in the background.

    `start(actions)` then `finish()` is one env step: with `overlap` and an env that
    has `step_async` (BatchedEnv), the physics runs between the two calls;
    otherwise `start` steps synchronously and `finish` hands back the result.
    """

    def __init__(self, env: VectorEnv, rows: slice, overlap: bool):
        self.env = env
        self.rows = rows
        self.overlap = overlap and hasattr(env, "step_async")
        self._result: StepResult | None = None

    def start(self, actions: np.ndarray) -> None:
        """Begin one step with `actions` (the group's rows), in the background when overlapped."""
        if self.overlap:
            self.env.step_async(actions)
        else:
            self._result = self.env.step(actions)

    def finish(self) -> StepResult:
        """The result of the step `start` began (waiting for its physics when overlapped)."""
        if self.overlap:
            return self.env.step_wait()
        res, self._result = self._result, None
        return res


def env_groups(env: VectorEnv, overlap: bool) -> list[EnvGroup]:
    """The groups of an EnvGroups (stepped in the background when `overlap` and the env's thread budget
    allow it); any other env is one group."""
    if isinstance(env, EnvGroups):
        overlap = overlap and env.overlap
        return [EnvGroup(e, rows, overlap) for e, rows in zip(env.envs, env.rows, strict=True)]
    return [EnvGroup(env, slice(None), overlap=False)]


def _tracking_sq(env: VectorEnv) -> np.ndarray | None:
    """Squared command-tracking errors [2, n] for tasks with velocity commands (appo-eval's hook)."""
    hook = getattr(env, "velocity_tracking", None)
    if hook is None:
        return None
    commanded, measured = hook()
    err = commanded - measured
    return np.stack([err[:, 0] ** 2 + err[:, 1] ** 2, err[:, 2] ** 2])
