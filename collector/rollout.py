"""The collector lap (DESIGN.md section 2): newest weights -> T steps of infer+step -> send.

The loop writes straight into a transport buffer (shared memory on one host),
so a rollout is never copied inside the collector.
"""

from __future__ import annotations

import threading
import time

import numpy as np
import torch

from common.config import AppoConfig
from common.logging import get_logger
from common.policy import ActorCritic, load_flat_weights
from common.rollout_spec import RolloutSpec
from common.status_server import Heartbeat

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
             tracking_sq: np.ndarray | None = None) -> None:
        """tracking_sq: [2, N] squared xy / yaw-rate command errors of the state reached (ignored where done:
        that state is already the next episode's)."""
        self.ret += rewards
        self.length += 1
        for i, name in enumerate(self.terms):
            self.term_sums[i] += terms[name]
        if tracking_sq is not None:
            live = ~done
            self.track_sq[:, live] += tracking_sq[:, live]
            self.track_n[live] += 1
        if done.any():
            idx = np.flatnonzero(done)
            self.done_returns.append(self.ret[idx].copy())
            self.done_lengths.append(self.length[idx].copy())
            self.done_timeouts.append(truncated[idx].copy())
            self.done_terms.append(self.term_sums[:, idx].copy())
            if tracking_sq is not None:
                self.done_tracking.append(np.sqrt(self.track_sq[:, idx] / np.maximum(self.track_n[idx], 1)))
                self.track_sq[:, idx] = 0
                self.track_n[idx] = 0
            self.ret[idx] = 0
            self.length[idx] = 0
            self.term_sums[:, idx] = 0

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
    def __init__(self, cfg: AppoConfig, env, channel, stop_event: threading.Event, seed: int = 0):
        self.cfg = cfg
        self.env = env
        self.channel = channel
        self.stop_event = stop_event
        self.spec = RolloutSpec.for_task(env.spec, env.num_envs, cfg.algo.steps_per_env)
        self.device = torch.device(cfg.training.collector_device)
        self.policy = ActorCritic.from_config(cfg, env.spec).to(self.device).eval()
        self.version = -1
        self.seq = 0
        self.gamma = cfg.algo.algorithm.gamma
        self.episodes = EpisodeTracker(env.num_envs, env.spec.reward_terms)
        self.seed = seed
        self.deterministic = cfg.training.deterministic
        self.heartbeat = Heartbeat(cfg.training.liveness_timeout_s, "collector loop")
        self.last_perf: dict = {}

    def _take_weights(self) -> bool:
        got = self.channel.read_weights(self.version)
        if got is None:
            return False
        first = self.version < 0
        self.version, flat = got
        load_flat_weights(self.policy, flat)
        if first:
            log.info("received weights", version=self.version)
        return True

    def _should_stop(self) -> bool:
        return self.stop_event.is_set() or self.channel.stop_requested() or not self.channel.learner_alive()

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
            if self.deterministic:
                if not self._wait_for_newer(used_version):
                    break
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

    def _tracking_sq(self) -> np.ndarray | None:
        """Squared command-tracking errors [2, N] for tasks with velocity commands (appo-eval's hook)."""
        hook = getattr(self.env, "velocity_tracking", None)
        if hook is None:
            return None
        commanded, measured = hook()
        err = commanded - measured
        return np.stack([err[:, 0] ** 2 + err[:, 1] ** 2, err[:, 2] ** 2])

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
        torch.manual_seed(self.seed * 1_000_003 + version)
        self.episodes = EpisodeTracker(self.env.num_envs, self.env.spec.reward_terms)
        return self.env.reset()

    @torch.no_grad()
    def fill_rollout(self, out: dict[str, np.ndarray], obs: np.ndarray, critic: np.ndarray):
        """Step T times from (obs, critic), writing every rollout field into `out`."""
        infer_s = step_s = 0.0
        for t in range(self.spec.steps):
            self.heartbeat.beat()
            t0 = time.perf_counter()
            actions, log_probs = self.policy.act(torch.from_numpy(obs).to(self.device))
            actions_np = actions.cpu().numpy()
            out["obs"][:, t] = obs
            out["critic"][:, t] = critic
            out["actions"][:, t] = actions_np
            out["log_probs"][:, t] = log_probs.cpu().numpy()
            t1 = time.perf_counter()
            res = self.env.step(actions_np)
            t2 = time.perf_counter()
            rewards = out["rewards"][:, t]
            rewards[:] = res.rewards
            if res.truncated.any():
                # Time-limit ends are not failures: bootstrap with the value of the final state.
                idx = np.flatnonzero(res.truncated)
                final_v = self.policy.value(torch.from_numpy(res.final_critic[idx]).to(self.device)).cpu().numpy()
                rewards[idx] += self.gamma * final_v
            done = res.terminated | res.truncated
            out["dones"][:, t] = done
            out["truncated"][:, t] = res.truncated
            self.episodes.step(res.rewards, res.terms, done, res.truncated, self._tracking_sq())
            obs, critic = res.obs, res.critic
            infer_s += t1 - t0 + (time.perf_counter() - t2)
            step_s += t2 - t1
        out["last_obs"][:] = obs
        out["last_critic"][:] = critic
        # The env may reuse its output arrays on the next step: keep our own copies.
        return obs.copy(), critic.copy(), {"infer_ms": infer_s * 1e3, "step_ms": step_s * 1e3}
