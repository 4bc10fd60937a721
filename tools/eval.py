"""appo-eval: run a trained policy deterministically and report how it does.

    appo-eval --task go2_joystick_flat --load-run -1            # newest run of logs/appo/<task>/
    appo-eval --load-run logs/appo/hopper/2025-01-01_12-00-00 --checkpoint 200
    appo-eval --load-run path/to/model_300.pt --episodes 50 --json eval.json
    appo-eval --task half_cheetah --video cheetah.mp4          # + cheetah.png
    appo-eval --task g1_motion_tracking --json e.json task_options.motion_file=other.npz   # + e_bodies.png
    appo-eval --task go2_joystick_flat --load-run -1 --sim motrix   # sim-to-sim: a MuJoCo policy on MotrixSim

The policy acts with its mean action, its observations normalised with the
statistics saved in the checkpoint.  Figures over the episode set: mean and std
of the return, mean episode length, the fraction of episodes that reached the
time limit without terminating and, for tasks that report commanded and measured
body velocities (`env.velocity_tracking()`), the RMS error of the xy velocity and
of the yaw rate.  --video renders env 0's first episode with a camera following
the robot's root body; --plot draws that episode's velocities.  Where no GL library loads
(common/gl.py), --video fails in one line after the figures are printed and the other files written.
--sim evaluates on another physics engine than the one the policy was trained on (the default):
the sim-to-sim check before a policy goes to a robot.

The G1 tasks run in their play mode: no observation noise and no pushes; for motion
tracking also no initialisation noise, every episode starting at the
clip's first frame and lasting one play of the clip (T - 1 steps; a shorter
--max-episode-steps cuts it).  The clip is the run's `task_options.motion_file`
(its saved config), or the one given as `task_options.motion_file=CLIP.npz`.
Motion tracking adds the mean anchor, body and joint position errors over the
evaluated steps, the mean fraction of the clip played before an episode ended,
and a bar chart of the mean error per tracked body (--body-plot; by default
<stem>_bodies.png beside --video, --json or --plot); --video draws the
reference bodies as translucent green spheres (re-anchored to the robot, as the
body error compares them) and the clip's own anchor as an orange one.
"""

from __future__ import annotations

# First, as the tools package chooses MuJoCo's GL backend before MuJoCo is imported (common/gl.py).
from tools import video  # isort: skip

import argparse
import json
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch

from collector.envs.g1.motion import ClipError
from collector.envs.physics import UnknownSimError
from common.checkpoint_io import (
    CheckpointError,
    LoadedPolicy,
    add_checkpoint_args,
    check_not_old_name,
    find_checkpoint,
    load_policy,
)
from common.config import AppoConfig, ConfigError, load_config
from common.cores import usable_cores
from common.hub import HubError, motion_clip
from common.task_spec import ENGINES, UnknownTaskError
from tools.eval_plot import EpisodeTrace, plot_body_errors, plot_episode
from tools.extras import missing_extra

# The G1 tasks' switches, as their play mode sets them (each task has those it needs).
PLAY_SETTINGS = {"noise": False, "init_noise": False, "pushes": False, "sampling_mode": "start"}
# The motion-tracking hook: per-env errors after each step (collector/envs/g1/tracking.py).
MOTION_ERRORS = ("anchor_pos_error", "body_pos_error", "joint_pos_error")
MOTION_HOOK = (*MOTION_ERRORS, "body_pos_error_per_body", "clip_progress")


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="appo-eval", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    add_checkpoint_args(p)
    p.add_argument("--episodes", type=int, default=20, help="episodes to evaluate (default 20)")
    p.add_argument("--sim", choices=ENGINES, help="physics engine (default: the one the policy was trained on)")
    p.add_argument("--num-envs", type=int, help="environments stepped together (default: --episodes)")
    p.add_argument("--threads", type=int, help="MuJoCo stepping threads (default: the usable cores)")
    p.add_argument("--seed", type=int, default=0, help="environment seed (default 0)")
    p.add_argument("--max-episode-steps", type=int, help="time limit in steps (default: the task's)")
    p.add_argument("--json", metavar="FILE", help="also write the figures to this JSON file")
    p.add_argument("--video", metavar="OUT.mp4", help="render env 0's first episode to this MP4 (and a plot)")
    p.add_argument("--video-size", default="640x480", metavar="WxH", help="video frame size (default 640x480)")
    p.add_argument("--video-steps", type=int, help="render at most this many steps (default: the whole episode)")
    p.add_argument("--plot", metavar="OUT.png", help="plot env 0's first episode (default with --video: OUT.png)")
    p.add_argument("--body-plot", metavar="OUT.png",
                   help="motion tracking: bar chart of the error per body (default: <stem>_bodies.png beside "
                        "--video, --json or --plot)")
    p.add_argument("overrides", nargs="*", metavar="task_options.KEY=VALUE",
                   help="override the run's task options, e.g. task_options.motion_file=clip.npz "
                        "(default: those in the checkpoint's config, as in the run's config.yaml)")
    args = p.parse_args(argv)
    for item in args.overrides:
        if not item.startswith("task_options."):
            p.error(f"override {item!r}: appo-eval takes task_options.KEY=VALUE only (the policy's other "
                    "settings are the checkpoint's)")
    for name in ("episodes", "num_envs", "threads", "max_episode_steps", "video_steps"):
        value = getattr(args, name)
        if value is not None and value < 1:
            p.error(f"--{name.replace('_', '-')} must be >= 1")
    if args.video:
        try:
            args.video_size = video.parse_size(args.video_size)
        except ValueError as exc:
            p.error(str(exc))
        args.plot = args.plot or str(Path(args.video).with_suffix(".png"))
    stem = next((Path(f) for f in (args.video, args.json, args.plot) if f), None)
    args.body_plot = args.body_plot or (str(stem.with_name(stem.stem + "_bodies.png")) if stem else None)
    for out in (args.video, args.plot, args.json, args.body_plot):
        if out:  # as any tool that writes a named file: its folder is made, not a late error after the run
            Path(out).parent.mkdir(parents=True, exist_ok=True)
    return args


# ---------------------------------------------------------------- evaluation


@dataclass
class Results:
    """The evaluated episodes' returns, lengths and timeouts, and the summed tracking errors; `figures()` sums up."""

    returns: list[float] = field(default_factory=list)
    lengths: list[int] = field(default_factory=list)
    timeouts: list[bool] = field(default_factory=list)
    sq_err_xy: float = 0.0   # summed over counted (env, step) samples
    sq_err_yaw: float = 0.0
    sq_cmd_xy: float = 0.0  # commanded and measured xy speeds, squared: does it move as told, or stand?
    sq_meas_xy: float = 0.0
    tracked_samples: int = 0
    # Sums for the least-squares slope of measured on commanded (vx, vy, yaw rate): 0 stands still, 1 follows.
    sum_cmd: np.ndarray = field(default_factory=lambda: np.zeros(3))
    sum_meas: np.ndarray = field(default_factory=lambda: np.zeros(3))
    sum_cmd_sq: np.ndarray = field(default_factory=lambda: np.zeros(3))
    sum_cmd_meas: np.ndarray = field(default_factory=lambda: np.zeros(3))
    # Motion tracking: anchor, body and joint errors and the per-body errors summed over counted samples.
    body_names: list[str] = field(default_factory=list)
    motion_err: np.ndarray = field(default_factory=lambda: np.zeros(len(MOTION_ERRORS)))
    body_err: np.ndarray | None = None
    motion_samples: int = 0
    clip_fractions: list[float] = field(default_factory=list)

    def add_episode(self, ret: float, length: int, timeout: bool, clip_fraction: float | None = None) -> None:
        self.returns.append(float(ret))
        self.lengths.append(int(length))
        self.timeouts.append(bool(timeout))
        if clip_fraction is not None:
            self.clip_fractions.append(float(clip_fraction))

    def add_motion(self, env, rows: np.ndarray) -> None:
        """Sum the tracking errors of the step just taken over the env rows `rows` (bool [N])."""
        self.motion_err += [float(getattr(env, name)[rows].sum()) for name in MOTION_ERRORS]
        per_body = env.body_pos_error_per_body[rows].sum(axis=0)
        self.body_err = per_body if self.body_err is None else self.body_err + per_body
        self.motion_samples += int(rows.sum())

    def add_tracking(self, commanded: np.ndarray, measured: np.ndarray) -> None:
        err = np.asarray(commanded, np.float64) - np.asarray(measured, np.float64)
        self.sq_err_xy += float(np.square(err[:, :2]).sum())
        self.sq_err_yaw += float(np.square(err[:, 2]).sum())
        self.sq_cmd_xy += float(np.square(np.asarray(commanded, np.float64)[:, :2]).sum())
        self.sq_meas_xy += float(np.square(np.asarray(measured, np.float64)[:, :2]).sum())
        self.tracked_samples += len(err)
        cmd, meas = np.asarray(commanded, np.float64), np.asarray(measured, np.float64)
        self.sum_cmd += cmd.sum(axis=0)
        self.sum_meas += meas.sum(axis=0)
        self.sum_cmd_sq += np.square(cmd).sum(axis=0)
        self.sum_cmd_meas += (cmd * meas).sum(axis=0)

    def figures(self) -> dict:
        out = {
            "episodes": len(self.returns),
            "return_mean": float(np.mean(self.returns)),
            "return_std": float(np.std(self.returns)),
            "length_mean": float(np.mean(self.lengths)),
            "time_limit_fraction": float(np.mean(self.timeouts)),
        }
        if self.tracked_samples:
            out["velocity_xy_rms_error"] = float(np.sqrt(self.sq_err_xy / self.tracked_samples))
            out["yaw_rate_rms_error"] = float(np.sqrt(self.sq_err_yaw / self.tracked_samples))
            out["commanded_xy_speed_rms"] = float(np.sqrt(self.sq_cmd_xy / self.tracked_samples))
            out["measured_xy_speed_rms"] = float(np.sqrt(self.sq_meas_xy / self.tracked_samples))
            n = self.tracked_samples
            spread = n * self.sum_cmd_sq - np.square(self.sum_cmd)
            covar = n * self.sum_cmd_meas - self.sum_cmd * self.sum_meas
            for k, name in enumerate(("vx", "vy", "yaw_rate")):
                out[f"slope_{name}"] = float(covar[k] / spread[k]) if spread[k] > 1e-12 * n * n else None
        if self.motion_samples:
            for name, total in zip(MOTION_ERRORS, self.motion_err, strict=True):
                out[f"{name}_mean"] = float(total / self.motion_samples)
            out["clip_fraction_mean"] = float(np.mean(self.clip_fractions))
            out["body_pos_error_per_body"] = {name: float(total / self.motion_samples)
                                              for name, total in zip(self.body_names, self.body_err, strict=True)}
        return out


class FirstEpisode:
    """Records env 0's first episode: the plotted trace and, optionally, the video frames."""

    def __init__(self, env, dt: float, renderer: video.FrameRenderer | None, writer, max_frames: int | None):
        """renderer: draws `renderer.state` (None: no video); without one, a RowState of env's model is made."""
        self.trace = EpisodeTrace(dt)
        self.active = True
        if renderer is not None:
            self.state = renderer.state
        else:
            self.state = video.RowState(env.model) if video.has_mujoco_state(env) else None
        self.renderer = renderer
        self.writer = writer
        self.max_frames = max_frames
        self.reference = tracks_motion(env)

    def before_step(self, env, tracking: tuple[np.ndarray, np.ndarray] | None) -> None:
        if not self.active:
            return
        if tracking is not None:
            self.trace.commanded.append(np.array(tracking[0][0], np.float64))
            self.trace.measured.append(np.array(tracking[1][0], np.float64))
        if self.state is not None:
            self.state.load(env.qpos[0], env.qvel[0])
            self.trace.root_velocity.append(self.state.root_velocity())
            if self.renderer is not None and (self.max_frames is None or self.writer.frames < self.max_frames):
                markers = reference_markers(env, self.state) if self.reference else ()
                self.writer.append(self.renderer.render(markers))

    def after_step(self, reward: float, done: bool) -> None:
        if self.active:
            self.trace.rewards.append(float(reward))
            self.active = not done

    def close(self) -> None:
        if self.renderer is not None:
            self.renderer.close()


def velocity_tracking(env) -> tuple[np.ndarray, np.ndarray] | None:
    """The task hook: (commanded, measured) [N, 3] body-frame (vx, vy, yaw rate), or None without one."""
    hook = getattr(env, "velocity_tracking", None)
    return hook() if callable(hook) else None


def tracks_motion(env) -> bool:
    """Whether the task reports motion-tracking errors (the MOTION_HOOK attributes of g1_motion_tracking)."""
    return all(hasattr(env, name) for name in MOTION_HOOK)


def reference_markers(env, state: video.RowState) -> tuple[video.Markers, ...]:
    """Env 0's reference as drawn with the state in `state`: its tracked bodies re-anchored to the robot's
    anchor (translucent green, `reference_bodies`) and the clip's anchor where the clip has it (orange)."""
    f, a = max(int(env.frame[0]) - 1, 0), env.anchor
    return (video.Markers(reference_bodies(env, 0, state.data)),
            video.Markers(env.ref_pos[f, a][None], radius=0.06, rgba=(1.0, 0.5, 0.0, 0.6)))


def reference_bodies(env, i: int, data) -> np.ndarray:
    """Motion tracking: env i's reference bodies [b, 3] at the clip frame its state is compared with (frame - 1;
    a (re)start places the robot at frame s and shows s + 1), re-anchored to the robot's anchor in `data`
    (an MjData holding env i's state), as the body error compares them."""
    from collector.envs.g1.tracking import reanchor

    f, a = max(int(env.frame[i]) - 1, 0), env.anchor
    body = int(env.body_ids[a])
    pos, _ = reanchor(env.ref_pos[f][None], env.ref_quat[f][None], a, data.xpos[body][None], data.xquat[body][None])
    return pos[0]


def use_play_settings(env, max_episode_steps: int | None = None) -> None:
    """The G1 tasks' play mode: PLAY_SETTINGS, those of the switches the task has (the other tasks have none).

    Motion tracking episodes last one play of the clip from its start (T - 1 steps), or `max_episode_steps`
    if that is shorter."""
    for name, value in PLAY_SETTINGS.items():
        if hasattr(env, name):
            setattr(env, name, value)
    if tracks_motion(env):
        env.max_episode_steps = min(max_episode_steps or env.num_frames, env.num_frames - 1)


def quotas(episodes: int, num_envs: int) -> np.ndarray:
    """Episodes each env contributes: fixed in advance, so short episodes are not over-counted."""
    quota = np.full(num_envs, episodes // num_envs, np.int64)
    quota[: episodes % num_envs] += 1
    return quota


@torch.no_grad()
def run_episodes(env, model, episodes: int | None, recorder: FirstEpisode | None = None,
                 steps: int | None = None) -> Results:
    """Step every env with the deterministic policy until each has finished its share of `episodes`.

    steps: stop after this many steps even so; with episodes None, a play of exactly `steps` steps in which
    every finished episode is counted and its env plays on."""
    n = env.num_envs
    # No share to finish: only `steps` ends the loop.
    quota = quotas(episodes, n) if episodes is not None else np.full(n, np.iinfo(np.int64).max)
    results = Results()
    motion = tracks_motion(env)
    if motion:
        results.body_names = [env.model.body(int(i)).name for i in env.body_ids]
    ret, length = np.zeros(n), np.zeros(n, np.int64)
    obs, _ = env.reset()
    step = 0
    while (quota > 0).any() and (steps is None or step < steps):
        step += 1
        counted = quota > 0
        tracking = velocity_tracking(env)
        if tracking is not None:
            # The state before the step: each episode contributes its states s_0 .. s_{T-1}.
            results.add_tracking(tracking[0][counted], tracking[1][counted])
        if recorder is not None:
            recorder.before_step(env, tracking)
        actions = model.act_deterministic(torch.as_tensor(obs, dtype=torch.float32)).numpy()
        res = env.step(actions)
        if motion:  # the comparison the step made: for a reset env, that of its episode's last step
            results.add_motion(env, counted)
        ret += res.rewards
        length += 1
        done = res.terminated | res.truncated
        if recorder is not None:
            recorder.after_step(res.rewards[0], bool(done[0]))
        for i in np.flatnonzero(done & counted):
            results.add_episode(ret[i], length[i], res.truncated[i], env.clip_progress[i] if motion else None)
            quota[i] -= 1
        ret[done] = 0.0
        length[done] = 0
        obs = res.obs
    return results


# ---------------------------------------------------------------- the command


def check_dims(policy: LoadedPolicy, env) -> None:
    spec = env.spec
    if (spec.obs_dim, spec.act_dim) != (policy.obs_dim, policy.act_dim):
        raise CheckpointError(
            f"the {policy.task} policy in {policy.path} maps {policy.obs_dim} observations to {policy.act_dim} "
            f"actions, but task {spec.name!r} has {spec.obs_dim} and {spec.act_dim}"
        )


def run_config(policy: LoadedPolicy, overrides: list[str]) -> AppoConfig:
    """The run's config as its checkpoint saved it, under the command line's task_options overrides (and APPO_*
    variables), as appo-train resolves a resumed run's."""
    return load_config(overrides, base=policy.config.to_dict())


def evaluate(args: argparse.Namespace) -> dict:
    """Load, run, record; the figures (and the files written) as a dict."""
    from collector.envs import make_env  # after tools.video fixed the GL backend

    path = find_checkpoint(args.load_run, args.task, args.log_root, args.checkpoint)
    policy = load_policy(path)
    check_not_old_name(args.task, policy.task, path)
    task = args.task or policy.task
    cfg = run_config(policy, args.overrides)
    motion_file = motion_clip(cfg)
    trained_on, sim = cfg.training.sim_backend, args.sim or cfg.training.sim_backend
    num_envs = args.num_envs or args.episodes
    threads = args.threads or usable_cores()
    env = make_env(task, num_envs, threads, args.seed, max_episode_steps=args.max_episode_steps,
                   motion_file=motion_file, sim=sim)
    use_play_settings(env, args.max_episode_steps)
    writer = recorder = renderer = None
    video_error = None
    try:
        check_dims(policy, env)
        dt = env.spec.control_dt
        if args.video and not video.has_mujoco_state(env):
            raise video.RenderError(f"--video needs a MuJoCo task (env.model, qpos, qvel); {task} has none")
        if args.video:
            try:
                # The renderer first: where no GL context can be made, no empty MP4 is left behind.
                renderer = video.FrameRenderer(video.RowState(env.model), *args.video_size)
                writer = video.Mp4Writer(args.video, fps=1.0 / dt if dt > 0 else 30.0)
            except video.RenderError as exc:
                video_error = str(exc)  # the figures and other files are still made; main() reports this after them
        if args.plot or writer is not None:
            recorder = FirstEpisode(env, dt, renderer, writer, args.video_steps)
        results = run_episodes(env, policy.model, args.episodes, recorder)
    finally:
        if recorder is not None:
            recorder.close()
        if writer is not None:
            writer.close()
        env.close()
    out = {"task": task, "checkpoint": str(path), "iteration": policy.iteration, "num_envs": num_envs,
           "seed": args.seed, "sim": sim, "trained_on": trained_on, **results.figures(), "returns": results.returns,
           "lengths": results.lengths}
    if results.motion_samples:
        out.update(motion_file=motion_file, clip_fractions=results.clip_fractions)
        if args.body_plot:
            plot_body_errors(out["body_pos_error_per_body"], args.body_plot,
                             f"{task} - {path.name} - mean body position error over {out['episodes']} episodes")
            out["body_plot"] = args.body_plot
    if writer is not None:
        out.update(video=args.video, video_frames=writer.frames)
    if video_error:
        out["video_error"] = video_error
    if args.plot:
        plot_episode(recorder.trace, args.plot, f"{task} - {path.name} - env 0, first episode")
        out["plot"] = args.plot
    return out


def report(out: dict) -> str:
    lines = [
        f"task {out['task']}  checkpoint {out['checkpoint']} (iteration {out['iteration']})  "
        f"physics {out['sim']} (trained on {out['trained_on']})",
        f"episodes {out['episodes']}  return {out['return_mean']:.3f} +- {out['return_std']:.3f}  "
        f"length {out['length_mean']:.1f}  reached time limit {out['time_limit_fraction']:.2f}",
    ]
    if "velocity_xy_rms_error" in out:
        lines.append(f"velocity tracking RMS error: xy {out['velocity_xy_rms_error']:.4f} m/s  "
                     f"yaw rate {out['yaw_rate_rms_error']:.4f} rad/s")
        lines.append(f"xy speed RMS: commanded {out['commanded_xy_speed_rms']:.4f} m/s  "
                     f"measured {out['measured_xy_speed_rms']:.4f} m/s")
        slopes = "  ".join(f"{k} {'-' if out[f'slope_{k}'] is None else format(out[f'slope_{k}'], '.3f')}"
                           for k in ("vx", "vy", "yaw_rate"))
        lines.append(f"slope of measured on commanded (1 follows, 0 stands still): {slopes}")
    if "clip_fraction_mean" in out:
        lines.append(f"motion tracking mean error: anchor position {out['anchor_pos_error_mean']:.4f} m  "
                     f"body position {out['body_pos_error_mean']:.4f} m  joint position "
                     f"{out['joint_pos_error_mean']:.4f} rad  clip completed {out['clip_fraction_mean']:.3f}")
    for key in ("video", "plot", "body_plot"):
        if key in out:
            frames = f" ({out['video_frames']} frames)" if key == "video" else ""
            lines.append(f"{key.replace('_', ' ')}: {out[key]}{frames}")
    return "\n".join(lines)


def run_reported(work: Callable[[argparse.Namespace], dict], args: argparse.Namespace) -> dict | int:
    """work(args) (appo-eval's, the play's) with torch on one thread: its result, or the exit status after one
    line naming a user's error (a checkpoint, task, clip, config or renderer problem, a missing tools extra)."""
    torch.set_num_threads(1)  # one small MLP forward per step; MuJoCo threads get the cores
    try:
        return work(args)
    except (CheckpointError, UnknownTaskError, UnknownSimError, video.RenderError, ClipError, ConfigError,
            HubError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except ModuleNotFoundError as exc:
        return missing_extra(exc)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    out = run_reported(evaluate, args)
    if isinstance(out, int):
        return out
    print(report(out))
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=2))
    if "video_error" in out:
        print(f"error: --video {args.video}: {out['video_error']}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
