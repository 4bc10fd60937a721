"""appo-motion: check and look at G1 reference motion clips (BeyondMimic / mjlab .npz layout).

    appo-motion check walk.npz                    # frames, duration, speed, heading, FK error; exit 2 if refused
    appo-motion show walk.npz --video walk.mp4    # render the clip kinematically, camera following the pelvis

A refused clip prints `error: <reason>` to stderr and exits with status 2.
"""

from __future__ import annotations

# First: sets MUJOCO_GL before anything imports MuJoCo (see tools/video.py).
from tools import video  # isort: skip

import argparse
import math
import sys

import numpy as np

from collector.envs.g1.model import build_model
from collector.envs.g1.motion import ClipError, ClipStats, MotionClip, clip_stats, load_clip

# `show` needs these (the `tools` extra); `check` does not.
TOOLS_MODULES = {"imageio", "imageio_ffmpeg"}


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    """The subcommand and its options."""
    p = argparse.ArgumentParser(prog="appo-motion", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="command", required=True)
    check = sub.add_parser("check", help="check a clip and print its figures")
    check.add_argument("clip", metavar="CLIP.npz")
    show = sub.add_parser("show", help="render a clip kinematically to an MP4")
    show.add_argument("clip", metavar="CLIP.npz")
    show.add_argument("--video", metavar="OUT.mp4", required=True, help="MP4 to write")
    show.add_argument("--fps-scale", type=float, default=1.0, metavar="S",
                      help="playback speed: the video plays S clip seconds per second (default 1)")
    show.add_argument("--video-size", default="640x480", metavar="WxH", help="video frame size (default 640x480)")
    args = p.parse_args(argv)
    if args.command == "show":
        if not args.fps_scale > 0:
            p.error(f"--fps-scale must be positive, got {args.fps_scale}")
        try:
            args.video_size = video.parse_size(args.video_size)
        except ValueError as exc:
            p.error(str(exc))
    return args


def report(path: str, stats: ClipStats) -> str:
    """The figures `check` prints, one per line."""
    return "\n".join([
        f"clip: {path}",
        f"frames: {stats.frames}",
        f"duration: {stats.duration:.2f} s",
        f"fps: {stats.fps:g}",
        f"mean root speed: {stats.mean_root_speed:.3f} m/s",
        f"heading change: {math.degrees(stats.heading_change):.1f} deg ({stats.heading_change:.3f} rad)",
        f"max FK error: {stats.max_fk_error:.2e} m",
    ])


def check(path: str) -> str:
    """Load and check a clip; its report (ClipError if refused)."""
    return report(path, clip_stats(load_clip(path)))


def render(clip: MotionClip, out: str, size: tuple[int, int], fps_scale: float = 1.0) -> int:
    """Write the clip as an MP4, one video frame per clip frame; returns the frame count."""
    state = video.RowState(build_model())  # its own model: the renderer enlarges the offscreen buffer
    renderer = video.FrameRenderer(state, *size)
    writer = video.Mp4Writer(out, fps=clip.fps * fps_scale)
    qvel = np.zeros(state.model.nv)  # kinematic replay: velocities do not change the picture
    try:
        for q in clip.qpos():
            state.load(q, qvel)
            writer.append(renderer.render())
    finally:
        writer.close()
        renderer.close()
    return writer.frames


def show(path: str, out: str, size: tuple[int, int], fps_scale: float) -> str:
    """Load, check and render a clip; a one-line summary."""
    clip = load_clip(path)
    frames = render(clip, out, size, fps_scale)
    return f"video: {out} ({frames} frames at {clip.fps * fps_scale:g} fps)"


def main(argv: list[str] | None = None) -> int:
    """Run one subcommand; 2 and `error: ...` on stderr for a refused clip or a failed render."""
    args = parse_args(argv)
    try:
        if args.command == "check":
            print(check(args.clip))
        else:
            print(show(args.clip, args.video, args.video_size, args.fps_scale))
    except (ClipError, video.RenderError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except ModuleNotFoundError as exc:
        if (exc.name or "").split(".")[0] not in TOOLS_MODULES:
            raise
        print(f"error: {exc.name} is missing; install the tools extra: pip install 'appo[tools]'", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
