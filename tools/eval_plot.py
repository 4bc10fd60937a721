"""The PNG appo-eval draws of one episode: commanded vs measured velocity, or root velocity and return."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np


@dataclass
class EpisodeTrace:
    """Per step of one episode: the state before the step (as rendered) and the reward it earned."""

    dt: float  # seconds per step; 0 when the task does not say
    rewards: list[float] = field(default_factory=list)
    root_velocity: list[np.ndarray] = field(default_factory=list)  # world-frame [3], MuJoCo tasks
    commanded: list[np.ndarray] = field(default_factory=list)      # body-frame (vx, vy, yaw rate)
    measured: list[np.ndarray] = field(default_factory=list)

    def times(self) -> tuple[np.ndarray, str]:
        steps = np.arange(len(self.rewards), dtype=float)
        return (steps * self.dt, "time [s]") if self.dt > 0 else (steps, "step")


_TRACKING_PANELS = (("forward velocity vx [m/s]", 0), ("lateral velocity vy [m/s]", 1), ("yaw rate [rad/s]", 2))


def plot_episode(trace: EpisodeTrace, path: str, title: str) -> None:
    # Figure without pyplot: no GUI backend is chosen, so this works headless and in threads.
    from matplotlib.figure import Figure

    t, xlabel = trace.times()
    panels = _panels(trace)
    fig = Figure(figsize=(8, 2.2 * len(panels) + 0.6), layout="constrained")
    axes = fig.subplots(len(panels), 1, sharex=True, squeeze=False)[:, 0]
    for ax, (label, series) in zip(axes, panels, strict=True):
        for name, values, style in series:
            ax.plot(t[: len(values)], values, style, label=name, linewidth=1.2)
        ax.set_ylabel(label)
        ax.grid(alpha=0.3)
        ax.legend(loc="upper right", fontsize=8)
    axes[-1].set_xlabel(xlabel)
    fig.suptitle(title)
    fig.savefig(path, dpi=100)


def _panels(trace: EpisodeTrace) -> list[tuple[str, list]]:
    if trace.commanded:
        cmd, meas = np.asarray(trace.commanded), np.asarray(trace.measured)
        return [(label, [("commanded", cmd[:, k], "--"), ("measured", meas[:, k], "-")])
                for label, k in _TRACKING_PANELS]
    panels = []
    if trace.root_velocity:
        vx = np.asarray(trace.root_velocity)[:, 0]
        panels.append(("root x velocity [m/s]", [("world frame", vx, "-")]))
    panels.append(("return", [("cumulative reward", np.cumsum(trace.rewards), "-")]))
    return panels


def plot_body_errors(errors: dict[str, float], path: str, title: str) -> None:
    """A bar chart of the mean position error per tracked body (metres, drawn in cm); the plotted values also
    travel in the PNG's Description text chunk as JSON {body: metres}."""
    import json

    from matplotlib.figure import Figure

    names, values = list(errors), np.array([errors[name] for name in errors]) * 100.0
    fig = Figure(figsize=(8, 0.3 * len(names) + 1.2), layout="constrained")
    ax = fig.subplots()
    ax.barh(np.arange(len(names)), values, color="tab:green")
    ax.set_yticks(np.arange(len(names)), names, fontsize=8)
    ax.invert_yaxis()  # the first body on top
    ax.set_xlabel("mean position error against the re-anchored reference [cm]")
    ax.grid(axis="x", alpha=0.3)
    fig.suptitle(title)
    fig.savefig(path, dpi=100, metadata={"Description": json.dumps(errors)})
