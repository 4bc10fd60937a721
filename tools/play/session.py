"""The simulation behind appo-play: a policy stepping a task's envs in play mode, under a viewer's controls.

The viewer's threads (browser callbacks, key presses) only set fields under `lock`; the loop that calls
`advance()` does all the stepping.  A new policy (another checkpoint, or the weights a running learner
just published) waits in `pending` and takes over when the followed env's episode ends, so an episode is
never played by two policies.  A command override replaces every env's sampled command before each step.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from dataclasses import dataclass, field

import numpy as np
import torch

from common.logging import get_logger
from common.policy import ActorCritic, load_flat_weights
from tools.eval import use_play_settings, velocity_tracking

log = get_logger("play")

HISTORY_STEPS = 500  # the live plots show the last 10 s at 50 Hz
CATCH_UP_S = 0.25  # lateness the pacer makes up (a slow redraw); beyond it, the clock restarts from now


@dataclass
class PolicySource:
    """Which weights act now: a label for the page (checkpoint file or weight version) and when they arrived."""

    label: str
    version: int | None = None     # the learner's policy version, when following a run
    arrived: float = field(default_factory=time.monotonic)


@dataclass
class Followed:
    """The followed env's running episode and its history for the live plots."""

    time: float = 0.0
    ret: float = 0.0
    terms: dict[str, float] = field(default_factory=dict)      # each reward term of the last step
    term_sums: dict[str, float] = field(default_factory=dict)  # and summed over the episode so far
    episodes: int = 0
    last_end: str = ""             # why the last episode ended: "time limit" or the named conditions
    last_return: float = 0.0
    history: deque = field(default_factory=lambda: deque(maxlen=HISTORY_STEPS))  # (t, cmd[3], meas[3])


class PlaySession:
    """`env` stepped by `model` (deterministic unless `stochastic`), with pause, step, reset, speed and commands."""

    def __init__(self, env, model: ActorCritic, source: PolicySource):
        self.env = env
        self.model = model.eval()
        self.source = source
        self.lock = threading.Lock()
        self.paused = False
        self.speed = 1.0
        self.stochastic = False
        self.followed_env = 0
        self.sim_time = 0.0
        self.steps = 0
        self.pending: tuple[PolicySource, np.ndarray | ActorCritic] | None = None
        self.override: np.ndarray | None = None   # (vx, vy, yaw rate) for every env, or None: the sampled ones
        self._step_requests = 0
        self._reset_requested = False
        self._ended: dict[str, bool] | None = None
        self._applied: np.ndarray | None = None  # the override last written into the simulation
        self.followed = Followed()
        use_play_settings(env)
        env.on_episode_end = self._on_episode_end
        self.obs = env.reset()[0]
        self.tracks_velocity = velocity_tracking(env) is not None
        self.command_box = env.command_ranges() if hasattr(env, "command_ranges") else None

    # ------------------------------------------------------------ controls (any thread)

    def set_command(self, command) -> np.ndarray:
        """Override every env's command with (vx, vy, yaw rate), clipped to the task's box; returns what is set."""
        if self.command_box is None:
            raise ValueError(f"task {self.env.spec.name} takes no velocity command")
        value = np.clip(np.asarray(command, np.float64), *self.command_box)
        with self.lock:
            self.override = value
        return value

    def release_command(self) -> None:
        """Back to the commands the task samples itself."""
        with self.lock:
            self.override = None

    def request_step(self) -> None:
        """One control step while paused."""
        with self.lock:
            self._step_requests += 1

    def request_reset(self) -> None:
        """A new episode in every env at the next step (a pending policy takes over there)."""
        with self.lock:
            self._reset_requested = True

    def offer(self, source: PolicySource, weights: np.ndarray | ActorCritic) -> None:
        """A new policy (flat weights of this network, or a loaded model) to take over at the next episode end."""
        with self.lock:
            self.pending = (source, weights)

    # ------------------------------------------------------------ the loop's side

    def due(self) -> bool:
        """Whether the loop should step now: running, or a single step was asked for."""
        with self.lock:
            return not self.paused or self._step_requests > 0 or self._reset_requested

    def advance(self) -> None:
        """One control step of every env (or the requested reset), with the controls as they are now."""
        env = self.env
        with self.lock:
            self._step_requests = max(0, self._step_requests - 1)
            reset, self._reset_requested = self._reset_requested, False
            override = None if self.override is None else self.override.copy()
            stochastic, i = self.stochastic, self.followed_env
        if reset:
            self._take_pending()
            self.obs = env.reset()[0]
            self.followed = Followed(episodes=self.followed.episodes)
            return
        if override is not None:
            env.set_commands(np.broadcast_to(override, env.commands.shape))
            self.obs = env.observe()[0]
            if self._applied is None or not np.array_equal(self._applied, override):
                vx, vy, wz = (float(v) for v in env.commands[i])  # read back from the task itself
                log.info("command in the simulation", env=i, vx=vx, vy=vy, yaw_rate=wz,
                         sim_time=round(self.sim_time, 4))
        self._applied = override
        with torch.no_grad():
            obs = torch.as_tensor(self.obs, dtype=torch.float32)
            actions = self.model.act(obs)[0] if stochastic else self.model.act_deterministic(obs)
        self._ended = None
        res = env.step(actions.numpy())
        self.obs = res.obs
        self.steps += 1
        self.sim_time += env.spec.control_dt
        f = self.followed
        f.time += env.spec.control_dt
        f.ret += float(res.rewards[i])
        for name, value in res.terms.items():
            f.terms[name] = float(value[i])
            f.term_sums[name] = f.term_sums.get(name, 0.0) + f.terms[name]
        tracking = velocity_tracking(env)
        if tracking is not None:
            f.history.append((self.sim_time, tracking[0][i].copy(), tracking[1][i].copy()))
        if res.terminated[i] or res.truncated[i]:
            f.last_end = self._end_reason(i, bool(res.truncated[i]))
            f.last_return, f.episodes = f.ret, f.episodes + 1
            f.time, f.ret, f.term_sums = 0.0, 0.0, {}
            self._take_pending()

    def frame(self) -> int | None:
        """The clip frame the followed env's reference shows (motion tracking), else None."""
        frames = getattr(self.env, "frame", None)
        return None if frames is None else int(frames[self.followed_env])

    # ------------------------------------------------------------ helpers

    def _on_episode_end(self, ids: np.ndarray) -> None:
        # Before the env resets them: the followed env's named conditions, read off its final state.
        if self.followed_env in ids:
            self._ended = {k: bool(v[self.followed_env]) for k, v in self.env.termination_conditions().items()}

    def _end_reason(self, i: int, truncated: bool) -> str:
        if truncated:
            return "time limit"
        named = [name for name, hit in (self._ended or {}).items() if hit]
        return ", ".join(named) if named else "terminated"

    def _take_pending(self) -> None:
        with self.lock:
            pending, self.pending = self.pending, None
        if pending is None:
            return
        source, weights = pending
        if isinstance(weights, ActorCritic):
            self.model = weights.eval()
        else:
            load_flat_weights(self.model, weights)
        self.source = source


class Pacer:
    """Paces a loop at `speed` x real time: each control step takes dt / speed of wall time, or as long as it must."""

    def __init__(self, dt: float):
        self.dt = dt
        self._next = time.monotonic()
        self._window: deque = deque(maxlen=50)  # (wall, sim) samples: the real-time factor reached

    def wait(self, speed: float, stop: threading.Event) -> None:
        """Sleep until the next step is due (at most until `stop`)."""
        now = time.monotonic()
        self._next += self.dt / speed
        if self._next < now - CATCH_UP_S:  # far behind (a pause, a machine too slow): never race to catch up
            self._next = now
        if self._next > now:
            stop.wait(self._next - now)

    def stepped(self, sim_time: float) -> None:
        self._window.append((time.monotonic(), sim_time))

    def realtime_factor(self) -> float:
        """Simulated seconds per wall second over the last steps (0 until two steps)."""
        if len(self._window) < 2:
            return 0.0
        (w0, s0), (w1, s1) = self._window[0], self._window[-1]
        return (s1 - s0) / (w1 - w0) if w1 > w0 else 0.0

    def resync(self) -> None:
        """After a pause: start pacing from now."""
        self._next = time.monotonic()
        self._window.clear()
