"""The project's batched env as rsl_rl's VecEnv (rsl-rl-lib 5.x), for benchmarks/vs_rslrl.py.

    env = RslRlEnv(make_collector_env("go2_joystick_flat", 2048, threads, seed))
    obs = env.get_observations()            # TensorDict: "policy" [N, obs_dim], "critic" [N, critic_dim]
    obs, rewards, dones, extras = env.step(actions)

What rsl_rl gets is what the env reports, unchanged: the raw rewards (the APPO collector adds
gamma * V(final) on a time-out itself; rsl_rl does its own bootstrapping from extras["time_outs"]),
dones = terminated or truncated, extras["time_outs"] = truncated, and the observations after the
env's own auto-reset.  The time limit is the env's: its step counters end the episodes, so rsl_rl's
`init_at_random_ep_len` (which writes episode_length_buf) is refused.  Tensors live on the CPU.

Finished episodes are counted as the APPO collector counts them (its EpisodeTracker): their time-outs
and tracking errors go to extras["log"] as per-episode tensors (rsl_rl's logger averages them over
the iteration), and an optional `recorder` (benchmarks/rslrl_curve.py) turns the tracker's summaries
into the curve against env steps that appo-train would have logged.
"""

from __future__ import annotations

import numpy as np
import torch
from rsl_rl.env import VecEnv
from tensordict import TensorDict

from collector.envs.batched import EnvGroups, StepResult
from collector.rollout import EpisodeTracker


def tracking_sq(env) -> np.ndarray | None:
    """Squared xy-velocity and yaw-rate command errors [2, N] of the current state, or None for a task without
    commands; over every group of an EnvGroups (whose groups carry the hook)."""
    parts = env.envs if isinstance(env, EnvGroups) else [env]
    hooks = [getattr(e, "velocity_tracking", None) for e in parts]
    if any(h is None for h in hooks):
        return None
    commanded, measured = (np.concatenate(x) for x in zip(*(h() for h in hooks), strict=True))
    err = np.asarray(commanded, np.float64) - np.asarray(measured, np.float64)
    return np.stack([err[:, 0] ** 2 + err[:, 1] ** 2, err[:, 2] ** 2])


class RslRlEnv(VecEnv):
    """rsl_rl's VecEnv over a VectorEnv (BatchedEnv, EnvGroups or GymVectorEnv): raw rewards, dones, time-outs."""

    def __init__(self, env, recorder=None):
        self.env = env
        self.recorder = recorder
        spec = env.spec
        self.num_envs = env.num_envs
        self.num_actions = spec.act_dim
        self.max_episode_length = int(getattr(env, "max_episode_steps", spec.max_episode_steps))
        self.device = "cpu"
        self.cfg = {"task": spec.name, "num_envs": env.num_envs, "max_episode_length": self.max_episode_length}
        self._length = np.zeros(env.num_envs, np.int64)
        # Returns, lengths, time-outs and tracking errors of finished episodes, as the APPO collector counts them.
        self.episodes = EpisodeTracker(env.num_envs, tuple(spec.reward_terms))
        self._obs = self._pack(*env.reset())

    @property
    def episode_length_buf(self) -> torch.Tensor:
        """Steps taken in each env's current episode (a copy: the env's own counters end the episodes)."""
        return torch.from_numpy(self._length.copy())

    @episode_length_buf.setter
    def episode_length_buf(self, value) -> None:
        raise AttributeError("the env's own step counters end its episodes; "
                                  "run rsl_rl's learn() with init_at_random_ep_len=False")

    def get_observations(self) -> TensorDict:
        return self._obs

    def step(self, actions: torch.Tensor) -> tuple[TensorDict, torch.Tensor, torch.Tensor, dict]:
        if self.recorder is not None:
            self.recorder.before_step()
        res: StepResult = self.env.step(actions.detach().to("cpu", torch.float32).numpy())
        done = res.terminated | res.truncated
        self._length += 1
        # Copies: the env refills its StepResult in place on the next step, and rsl_rl keeps these.
        rewards = torch.from_numpy(res.rewards.copy())
        self._obs = self._pack(res.obs, res.critic)
        extras = {"time_outs": torch.from_numpy(res.truncated.copy())}
        track = tracking_sq(self.env)
        self.episodes.step(res.rewards, res.terms, done, res.truncated, track)
        if done.any():
            extras["log"] = self._episode_log(track is not None)
        if self.recorder is not None:
            self.recorder.after_step(self.episodes)
        self._length[done] = 0
        return self._obs, rewards, torch.from_numpy(done.astype(np.int64)), extras

    def _episode_log(self, tracked: bool) -> dict[str, torch.Tensor]:
        """Per-episode values of the episodes this step finished, as appo-train's Episode/* scalars define them."""
        out = {"Episode/timeout_rate": torch.from_numpy(self.episodes.done_timeouts[-1].astype(np.float32))}
        if tracked:
            xy, yaw = torch.from_numpy(self.episodes.done_tracking[-1].astype(np.float32))
            out.update({"Episode/tracking_error_xy": xy, "Episode/tracking_error_yaw": yaw})
        return out

    def close(self) -> None:
        self.env.close()

    @staticmethod
    def _pack(obs: np.ndarray, critic: np.ndarray) -> TensorDict:
        return TensorDict({"policy": torch.from_numpy(np.array(obs, np.float32)),
                           "critic": torch.from_numpy(np.array(critic, np.float32))}, batch_size=[len(obs)])
