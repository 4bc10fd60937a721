"""Plays a run's final policy and renders it, as the seed does after training: play.mp4, play.png, TensorBoard.

    python -m tools.play_video --run-dir logs/appo/go2_joystick_flat/2026-01-01_12-00-00

appo-train starts this once a run reaches algo.max_iterations, unless training.no_play (learner/play_after.py).
--num-envs environments (default: the run's training.play_env_num) are stepped --steps control steps
(training.play_steps) with the deterministic policy in the task's play mode (appo-eval's), each env playing on
after its episode ends.  play.mp4 shows the first 16 envs as tiles of one frame (default 320x240 each, in a grid
of up to 4x4), each camera following its env's robot: the envs differ in commands and falls, which one env alone
would not show.  The tiles leave out the floor's mirror image and multisampling and use a small shadow map, what
software GL (a CPU-only machine) spends most of a frame on.  For tasks with velocity commands, play.png plots env
0's commanded and measured velocities over its first episode.  Both also go to the run's TensorBoard events at the
checkpoint's iteration: the plot as the image Play/velocity_tracking and, in place of the video, four of its
frames spread over the play, scaled down, as the image row Play/frames.  (torch's add_video needs moviepy 1.x,
whose GIF loses its frame timing under today's imageio, which reads the frame duration in milliseconds, not
seconds.) Where it cannot render (no GL library, no MuJoCo state), it exits 2 with one line saying why, and leaves
no video behind.
"""

from __future__ import annotations

# First, as the tools package chooses MuJoCo's GL backend before MuJoCo is imported (common/gl.py).
from tools import video  # isort: skip

import argparse
import math
import os
import signal
import sys
from pathlib import Path

import mujoco
import numpy as np

from common.checkpoint_io import find_checkpoint, load_policy
from common.cores import usable_cores
from common.hub import motion_clip
from tools.eval import FirstEpisode, check_dims, run_config, run_episodes, run_reported, use_play_settings
from tools.eval_plot import plot_episode

MAX_TILES = 16
TILE_SHADOW_SIZE = 1024  # texels of the shadow map (the Go2's model asks for 4096)
VIDEO, PLOT = "play.mp4", "play.png"
# Frames of the video logged to TensorBoard, each at most this wide (kept small in the event file).
TB_FRAMES, TB_MAX_WIDTH = 4, 640


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m tools.play_video", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--run-dir", required=True, help="the run directory; its newest checkpoint is played")
    p.add_argument("--checkpoint", type=int, help="play model_N.pt of the run instead")
    p.add_argument("--num-envs", type=int, help="environments (default: the run's training.play_env_num)")
    p.add_argument("--steps", type=int, help="control steps (default: the run's training.play_steps)")
    p.add_argument("--tile-size", default="320x240", metavar="WxH", help="size of one env's tile (default 320x240)")
    p.add_argument("--threads", type=int, help="MuJoCo stepping threads (default: the usable cores)")
    p.add_argument("--seed", type=int, default=0, help="environment seed (default 0)")
    args = p.parse_args(argv)
    for name in ("num_envs", "steps", "threads"):
        value = getattr(args, name)
        if value is not None and value < 1:
            p.error(f"--{name.replace('_', '-')} must be >= 1")
    try:
        args.tile_size = video.parse_size(args.tile_size)
    except ValueError as exc:
        p.error(str(exc))
    return args


def grid_shape(tiles: int) -> tuple[int, int]:
    """(rows, columns) of the most nearly square grid holding `tiles`, wider than tall."""
    cols = math.ceil(math.sqrt(tiles))
    return math.ceil(tiles / cols), cols


class TiledRecorder(FirstEpisode):
    """FirstEpisode's trace of env 0, and before every step one frame of the first MAX_TILES envs as tiles."""

    def __init__(self, env, dt: float, tiles: video.FrameRenderer, mp4: video.Mp4Writer, tile_size: tuple[int, int],
                 keep: set[int]):
        """keep: indices of the frames also kept, scaled down, in `kept` (for TensorBoard)."""
        super().__init__(env, dt, None, None, None)  # the trace only: the frames are drawn here
        self.tiles, self.mp4, self.keep = tiles, mp4, keep
        self.count = min(env.num_envs, MAX_TILES)
        self.rows, self.cols = grid_shape(self.count)
        self.tile_w, self.tile_h = tile_size
        self.stride = math.ceil(self.cols * self.tile_w / TB_MAX_WIDTH)
        self.kept: list[np.ndarray] = []

    def before_step(self, env, tracking) -> None:
        super().before_step(env, tracking)
        w, h = self.tile_w, self.tile_h
        frame = np.zeros((self.rows * h, self.cols * w, 3), np.uint8)
        for i in range(self.count):
            self.tiles.state.load(env.qpos[i], env.qvel[i])  # one renderer draws each env in turn
            row, col = divmod(i, self.cols)
            frame[row * h:(row + 1) * h, col * w:(col + 1) * w] = self.tiles.render()
        if self.mp4.frames in self.keep:
            self.kept.append(frame[::self.stride, ::self.stride].copy())
        self.mp4.append(frame)


def play(args: argparse.Namespace) -> dict:
    """Load the run's checkpoint, play it, write the video (and the plot); what was written, as a dict."""
    from collector.envs import make_env  # after tools.video fixed the GL backend

    run_dir = Path(args.run_dir)
    path = find_checkpoint(str(run_dir), None, checkpoint=args.checkpoint)
    policy = load_policy(path)
    cfg = run_config(policy, [])
    num_envs, steps = args.num_envs or cfg.training.play_env_num, args.steps or cfg.training.play_steps
    env = make_env(policy.task, num_envs, args.threads or usable_cores(), args.seed,
                   motion_file=motion_clip(cfg), sim=cfg.training.sim_backend)
    use_play_settings(env)
    partial = run_dir / ("partial." + VIDEO)  # renamed when complete: a stopped play leaves no broken video
    tiles = recorder = mp4 = None
    try:
        check_dims(policy, env)
        if not video.has_mujoco_state(env):
            raise video.RenderError(f"playing needs a MuJoCo task (env.model, qpos, qvel); {policy.task} has none")
        dt = env.spec.control_dt
        fps = 1.0 / dt if dt > 0 else 30.0
        # Software GL spends most of a frame on a large shadow map, the floor's mirror image and 4x multisampling;
        # a small tile shows none of them much (each off roughly halves a tile's time on 2 CPU cores).
        env.model.vis.quality.shadowsize = min(env.model.vis.quality.shadowsize, TILE_SHADOW_SIZE)
        env.model.vis.quality.offsamples = 0
        # The renderer first: where no GL context can be made, no empty MP4 is left behind.
        tiles = video.FrameRenderer(video.RowState(env.model), *args.tile_size)
        tiles.renderer.scene.flags[mujoco.mjtRndFlag.mjRND_REFLECTION] = False
        mp4 = video.Mp4Writer(str(partial), fps=fps)
        keep = {round(i) for i in np.linspace(0, steps - 1, TB_FRAMES)}
        recorder = TiledRecorder(env, dt, tiles, mp4, args.tile_size, keep)
        run_episodes(env, policy.model, None, recorder, steps=steps)
        mp4.close()
        os.replace(partial, run_dir / VIDEO)
    finally:
        if tiles is not None:
            tiles.close()
        if partial.exists():
            if mp4 is not None:
                mp4.close()
            partial.unlink()
        env.close()
    out = {"task": policy.task, "checkpoint": path, "iteration": policy.iteration, "num_envs": num_envs,
           "video": run_dir / VIDEO, "frames": mp4.frames, "grid": (recorder.rows, recorder.cols), "fps": fps}
    if recorder.trace.commanded:
        out["plot"] = run_dir / PLOT
        plot_episode(recorder.trace, str(out["plot"]), f"{policy.task} - {path.name} - play, env 0")
    log_tensorboard(run_dir, policy.iteration, recorder.kept, out.get("plot"))
    return out


def log_tensorboard(run_dir: Path, iteration: int, frames: list[np.ndarray], plot: Path | None) -> None:
    """The frames as the image row Play/frames and the plot as Play/velocity_tracking, in a new event file."""
    import imageio.v2 as imageio
    from torch.utils.tensorboard import SummaryWriter

    writer = SummaryWriter(log_dir=str(run_dir))
    try:
        writer.add_images("Play/frames", np.stack(frames), iteration, dataformats="NHWC")
        if plot is not None:
            writer.add_image("Play/velocity_tracking", imageio.imread(plot)[..., :3], iteration, dataformats="HWC")
    finally:
        writer.close()


def report(out: dict) -> str:
    rows, cols = out["grid"]
    lines = [f"played {out['task']} {out['checkpoint']} (iteration {out['iteration']}) in {out['num_envs']} envs",
             f"video: {out['video']} ({out['frames']} frames at {out['fps']:.0f} fps, {rows}x{cols} tiles)"]
    if "plot" in out:
        lines.append(f"plot: {out['plot']}")
    tags = "Play/frames, Play/velocity_tracking" if "plot" in out else "Play/frames"
    lines.append(f"tensorboard: {out['video'].parent} ({tags})")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    # A stop (appo-train's timeout, or its own stop) unwinds like Ctrl-C, so the partial video is removed.
    signal.signal(signal.SIGTERM, signal.default_int_handler)
    out = run_reported(play, args)
    if isinstance(out, int):
        return out
    print(report(out), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
