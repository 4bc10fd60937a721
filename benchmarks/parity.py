"""Step-by-step parity of two implementations of one task: same state, same actions, every column compared.

Each side is a driver (`ParityDriver`): it loads a synchronised state (root and joints, command, gait
clock, last action, PD gains), steps with given actions and returns its observations, reward terms and
ends.  `compare()` runs both side by side in two modes:

- resync: before every step the second side is put in the first side's state as it reports it, so
  each step's differences are that step's alone (and the first side's rounding of its report: see
  Nudged);
- free: both start from the same state and run on with the same actions, so differences compound and
  the pelvis trajectories drift apart.

The report holds, per mode, the largest absolute difference of every actor and critic observation
column and of every reward term (x dt, as each side reports them), how often the termination flags
disagree, and the largest horizontal distance between the two pelvises.  `differences()` lists what
exceeds a tolerance, largest first.  `OurDriver` wraps this project's own tasks; the seed's side plugs
in through the same interface.  Noise and randomisation are off on both sides: a driver's gains and
commands are the ones loaded.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol

import numpy as np

SOLVER_NOISE = 1e-4  # differences at or below this are taken as the solvers' own


@dataclass
class SyncState:
    """What both sides are put in: physics state, command, gait clock, last action and PD gains, per env."""

    qpos: np.ndarray        # [N, nq] root position, quaternion (w, x, y, z), joints in the task's order
    qvel: np.ndarray        # [N, nv] root linear velocity (world), angular velocity (root frame), joints
    command: np.ndarray     # [N, 3] vx, vy, yaw rate
    clock: np.ndarray       # [N, k] gait clock: the G1 walker's two phases in radians, the Go2's phase in [0, 1)
    last_action: np.ndarray  # [N, act_dim]
    kp: np.ndarray          # [N, act_dim] PD stiffness of every actuator
    kd: np.ndarray          # [N, act_dim]


@dataclass
class StepOut:
    """One step of one side: observations, weighted reward terms (x dt), ends, and the pelvis position."""

    obs: np.ndarray
    critic: np.ndarray
    terms: dict[str, np.ndarray]
    terminated: np.ndarray
    truncated: np.ndarray
    root_pos: np.ndarray    # [N, 3] after the step (an env that ended shows its next episode's; not compared)


class ParityDriver(Protocol):
    """One implementation of the task, driven step by step."""

    obs_names: list[str]
    critic_names: list[str]

    def state(self) -> SyncState:
        """The current state of every env."""
        ...

    def load(self, state: SyncState) -> None:
        """Put every env in `state`."""
        ...

    def step(self, actions: np.ndarray) -> StepOut:
        """Advance every env by one control step."""
        ...


@dataclass
class ModeReport:
    """The largest differences over a run of one mode."""

    obs: dict[str, float] = field(default_factory=dict)
    critic: dict[str, float] = field(default_factory=dict)
    terms: dict[str, float] = field(default_factory=dict)
    termination_mismatches: int = 0
    steps: int = 0
    drift_xy: float = 0.0

    def add(self, a: StepOut, b: StepOut, live: np.ndarray, names: tuple[list[str], list[str]]) -> None:
        """Fold one step's differences over the envs in `live` into the running maxima."""
        self.steps += 1
        self.termination_mismatches += int(np.sum(a.terminated != b.terminated))
        if not live.any():
            return
        for table, x, y, cols in ((self.obs, a.obs, b.obs, names[0]), (self.critic, a.critic, b.critic, names[1])):
            diff = np.abs(np.asarray(x, np.float64)[live] - np.asarray(y, np.float64)[live]).max(axis=0)
            for name, d in zip(cols, diff, strict=True):
                table[name] = max(table.get(name, 0.0), float(d))
        for name in a.terms:
            d = float(np.abs(np.asarray(a.terms[name], np.float64)[live] - np.asarray(b.terms[name], np.float64)[live])
                      .max())
            self.terms[name] = max(self.terms.get(name, 0.0), d)
        on = live & ~(a.terminated | a.truncated | b.terminated | b.truncated)  # a reset row's pelvis is a new one's
        if on.any():
            drift = np.linalg.norm(a.root_pos[on, :2] - b.root_pos[on, :2], axis=1).max()
            self.drift_xy = max(self.drift_xy, float(drift))


def compare(a: ParityDriver, b: ParityDriver, start: SyncState, actions, steps: int) -> dict[str, ModeReport]:
    """Both modes from `start`; `actions(k, obs)` gives step k's actions [N, act_dim] from side a's observation.

    Envs whose episode ended on either side are left out of a mode from then on (after a reset the two
    sides' fresh episodes are not synchronised)."""
    names = (a.obs_names, a.critic_names)
    reports = {}
    for mode in ("resync", "free"):
        report = ModeReport()
        a.load(start)
        b.load(start)
        live = np.ones(len(start.qpos), bool)
        obs = None
        for k in range(steps):
            if mode == "resync":
                b.load(a.state())
            act = np.asarray(actions(k, obs), np.float64)
            out_a, out_b = a.step(act), b.step(act)
            report.add(out_a, out_b, live, names)
            live &= ~(out_a.terminated | out_a.truncated | out_b.terminated | out_b.truncated)
            obs = out_a.obs
            if not live.any():
                break
        reports[mode] = report
    return reports


def differences(report: ModeReport, tolerance: float = SOLVER_NOISE) -> list[tuple[str, float]]:
    """('obs:<column>' / 'critic:<column>' / 'term:<name>', largest difference) above `tolerance`, largest first."""
    found = [(f"obs:{k}", v) for k, v in report.obs.items() if v > tolerance]
    found += [(f"critic:{k}", v) for k, v in report.critic.items() if v > tolerance]
    found += [(f"term:{k}", v) for k, v in report.terms.items() if v > tolerance]
    return sorted(found, key=lambda kv: -kv[1])


def _largest(report: ModeReport, name: str) -> float:
    kind, column = name.split(":", 1)
    return {"obs": report.obs, "critic": report.critic, "term": report.terms}[kind].get(column, 0.0)


def format_report(reports: dict[str, ModeReport], tolerance: float = SOLVER_NOISE, top: int = 30,
                  floor: dict[str, ModeReport] | None = None) -> str:
    """The report as text: per mode the differences above `tolerance`, the termination mismatches, the drift;
    with `floor` (the same run of two copies of one side, see Nudged), each difference's noise floor too."""
    lines = []
    for mode, r in reports.items():
        found = differences(r, tolerance)
        lines.append(f"{mode}: {r.steps} steps, {len(found)} columns/terms above {tolerance:g}, termination flags "
                     f"differ {r.termination_mismatches} times, pelvis xy drift {r.drift_xy:.4g} m"
                     + (f" (noise floor: {floor[mode].drift_xy:.4g} m)" if floor else ""))
        lines += [f"  {name:<40} {value:.4g}" + (f"   noise floor {_largest(floor[mode], name):.4g}" if floor else "")
                  for name, value in found[:top]]
        if len(found) > top:
            lines.append(f"  ... {len(found) - top} more")
    return "\n".join(lines)


class Nudged:
    """A driver every loaded state of which is nudged by float32 rounding noise: each qpos and qvel value times
    (1 + u), u uniform in +-2^-24 (half a float32 step), drawn from a fixed seed.

    Run against a second copy of the same driver, it measures the noise floor of a comparison with a side
    that reports its state in float32 (the seed's env): re-synchronised, how far one step carries a rounding
    of the state (contacts and joint friction make some steps sensitive to it); running free, how far the
    two trajectories part from starts that differ by that rounding alone (a closed-loop policy amplifies it)."""

    def __init__(self, driver: ParityDriver, seed: int = 0):
        self.driver = driver
        self.obs_names, self.critic_names = driver.obs_names, driver.critic_names
        self._rng = np.random.default_rng(seed)

    def _nudge(self, x: np.ndarray) -> np.ndarray:
        return x * (1.0 + self._rng.uniform(-2.0 ** -24, 2.0 ** -24, x.shape))

    def state(self) -> SyncState:
        return self.driver.state()

    def load(self, state: SyncState) -> None:
        qpos = self._nudge(state.qpos)
        qpos[:, 3:7] /= np.linalg.norm(qpos[:, 3:7], axis=1, keepdims=True)  # the root quaternion stays a unit one
        self.driver.load(SyncState(qpos, self._nudge(state.qvel), state.command, state.clock, state.last_action,
                                   state.kp, state.kd))

    def step(self, actions: np.ndarray) -> StepOut:
        return self.driver.step(actions)


# ---------------------------------------------------------------- this project's side


def column_names(slices: dict[str, slice], joints: list[str], width: int) -> list[str]:
    """'block[i]' per column, a joint's name for the blocks as wide as the joint list, in column order."""
    names = [f"col[{i}]" for i in range(width)]
    for block, s in slices.items():
        cols = range(s.start, s.stop)
        labels = joints if len(cols) == len(joints) else [str(i) for i in range(len(cols))]
        for c, label in zip(cols, labels, strict=True):
            names[c] = f"{block}[{label}]"
    return names


class OurDriver:
    """This project's go2_joystick_flat or g1_walk_flat as a parity driver (noise off, nothing drawn on load)."""

    def __init__(self, task: str, num_envs: int, seed: int = 0):
        from collector.envs import make_env

        if task == "g1_walk_flat":
            from collector.envs.g1 import walk as module
        elif task == "go2_joystick_flat":
            from collector.envs.go2 import task as module
        else:
            raise ValueError(f"parity covers go2_joystick_flat and g1_walk_flat, not {task!r}")
        self.env = make_env(task, num_envs, 1, seed)
        self.env.reset()
        self.task = task
        if hasattr(self.env, "noise"):
            self.env.noise = False
        m = self.env.model
        joints = [m.joint(i).name.removesuffix("_joint") for i in range(1, m.njnt)]
        self.joint_names = joints
        width = self.env.spec.obs_dim
        self.obs_names = column_names(module.OBS_SLICES, joints, width)
        extra = module.CRITIC_LINVEL
        self.critic_names = self.obs_names + [f"critic_linvel[{i}]" for i in range(extra.stop - extra.start)]

    def state_terms(self) -> list[str]:
        """The names of the reward terms a step reports."""
        return list(self.env.evaluate()[0])

    def state(self) -> SyncState:
        e = self.env
        clock = e.phase.copy() if self.task == "g1_walk_flat" else e.gait_clock[:, None].astype(np.float64)
        return SyncState(e.qpos.copy(), e.qvel.copy(), e.commands.copy(), clock, e.last_actions.copy(), e.kp.copy(),
                         e.kd.copy())

    def load(self, s: SyncState) -> None:
        e = self.env
        e.set_state(s.qpos, s.qvel)  # a fresh episode: its draws are overwritten below
        e.set_gains(s.kp, s.kd)
        if self.task == "g1_walk_flat":
            e.phase[:] = s.clock
        else:
            e.gait_clock[:] = s.clock[:, 0]
        e.last_actions[:] = s.last_action
        e._prev_actions[:] = s.last_action  # the action-rate term's previous action (no public setter: parity only)
        e.set_commands(s.command)           # also recomputes the observations

    def step(self, actions: np.ndarray) -> StepOut:
        res = self.env.step(actions)
        return StepOut(res.final_obs.copy(), res.final_critic.copy(), {k: v.copy() for k, v in res.terms.items()},
                       res.terminated.copy(), res.truncated.copy(), self.env.qpos[:, :3].copy())

    def close(self) -> None:
        self.env.close()
