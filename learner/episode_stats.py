"""Aggregates the episode statistics that travel beside rollouts into the logged means."""

from __future__ import annotations

from collections import deque


class EpisodeStats:
    """Episode-count-weighted means over the most recent `window` finished episodes (approximately)."""

    def __init__(self, window: int = 200):
        self.window = window
        self._recent: deque[dict] = deque()
        self._episodes = 0
        self.last: dict[str, float] = {}

    def add(self, stats: dict) -> None:
        n = int(stats.get("episodes", 0))
        if n <= 0:
            return
        self._recent.append(stats)
        self._episodes += n
        while self._recent and self._episodes - int(self._recent[0]["episodes"]) >= self.window:
            self._episodes -= int(self._recent.popleft()["episodes"])

    def state_dict(self) -> dict:
        return {"recent": list(self._recent), "episodes": self._episodes}

    def load_state_dict(self, state: dict) -> None:
        self._recent = deque(state["recent"])
        self._episodes = int(state["episodes"])

    def means(self) -> dict[str, float]:
        if not self._recent:
            return {}
        total = sum(int(s["episodes"]) for s in self._recent)

        def wmean(get) -> float:
            return sum(get(s) * int(s["episodes"]) for s in self._recent) / total

        out = {
            "Train/mean_reward": wmean(lambda s: float(s["return_mean"])),
            "Train/mean_episode_length": wmean(lambda s: float(s["length_mean"])),
            "Episode/timeout_rate": wmean(lambda s: float(s["timeout_rate"])),
        }
        tracked = [s for s in self._recent if "tracking_xy_rms" in s]
        if tracked:
            n = sum(int(s["episodes"]) for s in tracked)
            out["Episode/tracking_error_xy"] = sum(s["tracking_xy_rms"] * int(s["episodes"]) for s in tracked) / n
            out["Episode/tracking_error_yaw"] = sum(s["tracking_yaw_rms"] * int(s["episodes"]) for s in tracked) / n
        for term in self._recent[-1].get("terms", {}):
            out[f"Episode/reward_{term}"] = wmean(lambda s, t=term: float(s.get("terms", {}).get(t, 0.0)))
        self.last = out
        return out
