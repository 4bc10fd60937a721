"""An rsl_rl run's learning curve against env steps, in the terms appo-train logs (benchmarks/vs_rslrl.py).

Once per rsl_rl iteration (num_envs x steps_per_env env steps) the episodes finished in it, as the
adapter's EpisodeTracker counted them, enter the same window of recent episodes as appo-train's
learner (learner/episode_stats.py), and the row of that iteration is the window's means.  The
learning rate and policy std come from `probe()` at the first step of the next iteration, after
rsl_rl's update, or at `close()` after the last one; the wall seconds count from the first row.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from collector.rollout import EpisodeTracker
from learner.episode_stats import EpisodeStats

# Curve column -> appo-train's TensorBoard tag of the same figure.
CURVE_TAGS = {
    "return": "Train/mean_reward",
    "episode_length": "Train/mean_episode_length",
    "timeout_rate": "Episode/timeout_rate",
    "tracking_error_xy": "Episode/tracking_error_xy",
    "tracking_error_yaw": "Episode/tracking_error_yaw",
    "learning_rate": "Loss/learning_rate",
    "policy_std": "Policy/mean_std",
}
COLUMNS = ("iteration", "env_steps", "wall_s", *CURVE_TAGS)


class TrainingCurve:
    """Rows of one rsl_rl run, one per iteration: env steps, wall seconds, episode means, learning rate, std."""

    def __init__(self, num_envs: int, steps_per_iteration: int, probe: Callable[[], dict] | None = None):
        self.num_envs = num_envs
        self.steps_per_iteration = steps_per_iteration
        self.probe = probe
        self.rows: list[dict] = []
        self._steps = 0
        self._stats = EpisodeStats()
        self._pending: dict | None = None
        self._start: float | None = None

    def before_step(self) -> None:
        self._commit()

    def after_step(self, episodes: EpisodeTracker) -> None:
        self._steps += 1
        if self._steps % self.steps_per_iteration:
            return
        self._stats.add(episodes.summary())
        means = self._stats.means()
        row = {"iteration": self._steps // self.steps_per_iteration, "env_steps": self._steps * self.num_envs}
        row.update({name: means.get(tag) for name, tag in CURVE_TAGS.items() if tag in means})
        self._pending = row

    def close(self) -> list[dict]:
        """Commit the last iteration's row; all rows."""
        self._commit()
        return self.rows

    def _commit(self) -> None:
        if self._pending is None:
            return
        # After the iteration's update: the next rollout's first step, or the end of learn().
        now = time.monotonic()
        # Counted from the first iteration's row, as tools/plot_curve counts appo-train's from its first event.
        self._start = now if self._start is None else self._start
        self._pending["wall_s"] = now - self._start
        if self.probe is not None:
            self._pending.update(self.probe())
        self.rows.append(self._pending)
        self._pending = None
