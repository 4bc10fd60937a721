"""appo-eval: run a trained policy deterministically and report how it does.

    appo-eval --task go2_joystick_flat --load-run -1            # newest run of logs/appo/<task>/
    appo-eval --load-run logs/appo/hopper/2025-01-01_12-00-00 --checkpoint 200
    appo-eval --load-run path/to/model_300.pt --episodes 50 --json eval.json
    appo-eval --task half_cheetah --video cheetah.mp4          # + cheetah.png

The policy acts with its mean action, its observations normalised with the
statistics saved in the checkpoint.  Figures over the episode set: mean and std
of the return, mean episode length, the fraction of episodes that reached the
time limit without terminating and, for tasks that report commanded and measured
body velocities (`env.velocity_tracking()`), the RMS error of the xy velocity and
of the yaw rate.  --video renders env 0's first episode with a camera following
the robot's root body; --plot draws that episode's velocities.
"""

from __future__ import annotations

# First: sets MUJOCO_GL before anything imports MuJoCo (see tools/video.py).
from tools import video  # isort: skip

import argparse
import json
import sys
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch

from common.checkpoint_io import CheckpointError, LoadedPolicy, add_checkpoint_args, find_checkpoint, load_policy
from common.cores import usable_cores
from common.task_spec import UnknownTaskError
from tools.eval_plot import EpisodeTrace, plot_episode

# --video and --plot need these (the `tools` extra); plain evaluation does not.
TOOLS_MODULES = {"matplotlib", "imageio", "imageio_ffmpeg"}


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="appo-eval", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    add_checkpoint_args(p)
    p.add_argument("--episodes", type=int, default=20, help="episodes to evaluate (default 20)")
    p.add_argument("--num-envs", type=int, help="environments stepped together (default: --episodes)")
    p.add_argument("--threads", type=int, help="MuJoCo stepping threads (default: the usable cores)")
    p.add_argument("--seed", type=int, default=0, help="environment seed (default 0)")
    p.add_argument("--max-episode-steps", type=int, help="time limit in steps (default: the task's)")
    p.add_argument("--json", metavar="FILE", help="also write the figures to this JSON file")
    p.add_argument("--video", metavar="OUT.mp4", help="render env 0's first episode to this MP4 (and a plot)")
    p.add_argument("--video-size", default="640x480", metavar="WxH", help="video frame size (default 640x480)")
    p.add_argument("--video-steps", type=int, help="render at most this many steps (default: the whole episode)")
    p.add_argument("--plot", metavar="OUT.png", help="plot env 0's first episode (default with --video: OUT.png)")
    args = p.parse_args(argv)
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
    for out in (args.video, args.plot, args.json):
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
    tracked_samples: int = 0

    def add_episode(self, ret: float, length: int, timeout: bool) -> None:
        self.returns.append(float(ret))
        self.lengths.append(int(length))
        self.timeouts.append(bool(timeout))

    def add_tracking(self, commanded: np.ndarray, measured: np.ndarray) -> None:
        err = np.asarray(commanded, np.float64) - np.asarray(measured, np.float64)
        self.sq_err_xy += float(np.square(err[:, :2]).sum())
        self.sq_err_yaw += float(np.square(err[:, 2]).sum())
        self.tracked_samples += len(err)

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
        return out


class FirstEpisode:
    """Records env 0's first episode: the plotted trace and, optionally, the video frames."""

    def __init__(self, env, dt: float, renderer_size: tuple[int, int] | None, writer, max_frames: int | None):
        self.trace = EpisodeTrace(dt)
        self.active = True
        self.state = video.RowState(env.model) if video.has_mujoco_state(env) else None
        self.renderer = video.FrameRenderer(self.state, *renderer_size) if writer is not None else None
        self.writer = writer
        self.max_frames = max_frames

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
                self.writer.append(self.renderer.render())

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


def quotas(episodes: int, num_envs: int) -> np.ndarray:
    """Episodes each env contributes: fixed in advance, so short episodes are not over-counted."""
    quota = np.full(num_envs, episodes // num_envs, np.int64)
    quota[: episodes % num_envs] += 1
    return quota


@torch.no_grad()
def run_episodes(env, model, episodes: int, recorder: FirstEpisode | None = None) -> Results:
    """Step every env with the deterministic policy until each has finished its share of `episodes`."""
    n = env.num_envs
    quota = quotas(episodes, n)
    results = Results()
    ret, length = np.zeros(n), np.zeros(n, np.int64)
    obs, _ = env.reset()
    while (quota > 0).any():
        counted = quota > 0
        tracking = velocity_tracking(env)
        if tracking is not None:
            # The state before the step: each episode contributes its states s_0 .. s_{T-1}.
            results.add_tracking(tracking[0][counted], tracking[1][counted])
        if recorder is not None:
            recorder.before_step(env, tracking)
        actions = model.act_deterministic(torch.as_tensor(obs, dtype=torch.float32)).numpy()
        res = env.step(actions)
        ret += res.rewards
        length += 1
        done = res.terminated | res.truncated
        if recorder is not None:
            recorder.after_step(res.rewards[0], bool(done[0]))
        for i in np.flatnonzero(done & counted):
            results.add_episode(ret[i], length[i], res.truncated[i])
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
            f"the policy in {policy.path} maps {policy.obs_dim} observations to {policy.act_dim} actions, "
            f"but task {spec.name!r} has {spec.obs_dim} and {spec.act_dim}"
        )


def evaluate(args: argparse.Namespace) -> dict:
    """Load, run, record; the figures (and the files written) as a dict."""
    from collector.envs import make_env  # after tools.video fixed the GL backend

    path = find_checkpoint(args.load_run, args.task, args.log_root, args.checkpoint)
    policy = load_policy(path)
    task = args.task or policy.task
    num_envs = args.num_envs or args.episodes
    threads = args.threads or usable_cores()
    env = make_env(task, num_envs, threads, args.seed, max_episode_steps=args.max_episode_steps)
    writer = recorder = None
    try:
        check_dims(policy, env)
        dt = env.spec.control_dt
        if args.video and not video.has_mujoco_state(env):
            raise video.RenderError(f"--video needs a MuJoCo task (env.model, qpos, qvel); {task} has none")
        if args.video:
            writer = video.Mp4Writer(args.video, fps=1.0 / dt if dt > 0 else 30.0)
        if args.plot or writer is not None:
            recorder = FirstEpisode(env, dt, args.video_size if writer else None, writer, args.video_steps)
        results = run_episodes(env, policy.model, args.episodes, recorder)
    finally:
        if recorder is not None:
            recorder.close()
        if writer is not None:
            writer.close()
        env.close()
    out = {"task": task, "checkpoint": str(path), "iteration": policy.iteration, "num_envs": num_envs,
           "seed": args.seed, **results.figures(), "returns": results.returns, "lengths": results.lengths}
    if writer is not None:
        out.update(video=args.video, video_frames=writer.frames)
    if args.plot:
        plot_episode(recorder.trace, args.plot, f"{task} - {path.name} - env 0, first episode")
        out["plot"] = args.plot
    return out


def report(out: dict) -> str:
    lines = [
        f"task {out['task']}  checkpoint {out['checkpoint']} (iteration {out['iteration']})",
        f"episodes {out['episodes']}  return {out['return_mean']:.3f} +- {out['return_std']:.3f}  "
        f"length {out['length_mean']:.1f}  reached time limit {out['time_limit_fraction']:.2f}",
    ]
    if "velocity_xy_rms_error" in out:
        lines.append(f"velocity tracking RMS error: xy {out['velocity_xy_rms_error']:.4f} m/s  "
                     f"yaw rate {out['yaw_rate_rms_error']:.4f} rad/s")
    for key in ("video", "plot"):
        if key in out:
            lines.append(f"{key}: {out[key]}" + (f" ({out['video_frames']} frames)" if key == "video" else ""))
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    torch.set_num_threads(1)  # one small MLP forward per step; MuJoCo threads get the cores
    try:
        out = evaluate(args)
    except (CheckpointError, UnknownTaskError, video.RenderError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except ModuleNotFoundError as exc:
        if (exc.name or "").split(".")[0] not in TOOLS_MODULES:
            raise
        print(f"error: {exc.name} is missing; install the tools extra: pip install 'appo[tools]'", file=sys.stderr)
        return 2
    print(report(out))
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
