"""appo-motion: check, look at, clean, import and record G1 reference motion clips (BeyondMimic / mjlab .npz layout).

    appo-motion check walk.npz                    # frames, duration, speed, heading, FK error, self-penetration
    appo-motion clean walk.npz walk_clean.npz     # move the arms out of the body, smoothly, nothing else changed
    appo-motion import walk.csv walk.npz --fps 30 # a retargeted CSV (root pos, quat xyzw, 29 joints) at 50 fps
    appo-motion show walk.npz --video walk.mp4    # render the clip kinematically, camera following the pelvis
    appo-motion record --task g1_velocity_flat --load-run RUN [--checkpoint N] --seconds 4 --command 0.5 0 0.2 \
        --out walk.npz                            # a g1_velocity_flat policy's walk as a clip

`check` also reports self-penetration, the robot's contacts with itself that the tracking task
penalises (floor left out): share of frames, depth, the geom pairs; a clip with any prints a warning
to stderr and still exits 0.  `clean` moves only the shoulder, elbow and wrist joints, by the smallest
damped least-squares steps that part every arm contact by 5 mm (at least 2.5 mm once smoothed in time),
and recomputes the arm bodies and velocities (tools/motion_clean.py); it never overwrites its input and
writes atomically.  `import` reads the 36-column CSV of retargeted G1 motion (a header row is skipped),
resamples it to 50 fps (slerp for the root orientation) and checks it as `check` does
(tools/motion_import.py).

`record` rolls a g1_velocity_flat policy out deterministically in one env (its mean action, no observation
noise, no pushes, the command held fixed) for round(seconds x 50) frames, the first the reset state, and
writes the qpos trajectory as a clip (bodies by forward kinematics, velocities by finite differences,
joint angles clipped to the hard limits the simulation may overshoot by a little); it is checked as
`check` does before it is written.  A fall (termination) before the end writes nothing and exits 1.

A refused clip or input prints `error: <reason>` to stderr and exits with status 2; a clip `clean`
cannot clear exits 1 and writes nothing.
"""

from __future__ import annotations

# First, as the tools package chooses MuJoCo's GL backend before MuJoCo is imported (common/gl.py).
from tools import video  # isort: skip

import argparse
import math
import os
import secrets
import sys
import time
from pathlib import Path

import numpy as np

from collector.envs.g1.model import build_model, joint_names
from collector.envs.g1.motion import (
    ClipError,
    ClipStats,
    MotionClip,
    check_clip,
    clip_from_qpos,
    clip_stats,
    control_rate,
    hinge_limits,
    load_clip,
    write_clip,
)
from common.cli import duration
from tools.extras import missing_extra
from tools.motion_clean import SMOOTH_SIGMA, CleanError, CleanResult, clean_clip
from tools.motion_contacts import SelfPenetration, report_lines, self_penetration
from tools.motion_import import import_csv

RECORD_TASK = "g1_velocity_flat"  # the one task whose policy `record` rolls out


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    """The subcommand and its options."""
    p = argparse.ArgumentParser(prog="appo-motion", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="subcommand", required=True)
    check = sub.add_parser("check", help="check a clip and print its figures")
    check.add_argument("clip", metavar="CLIP.npz")
    show = sub.add_parser("show", help="render a clip kinematically to an MP4")
    show.add_argument("clip", metavar="CLIP.npz")
    show.add_argument("--video", metavar="OUT.mp4", required=True, help="MP4 to write")
    show.add_argument("--fps-scale", type=float, default=1.0, metavar="S",
                      help="playback speed: the video plays S clip seconds per second (default 1)")
    show.add_argument("--video-size", default="640x480", metavar="WxH", help="video frame size (default 640x480)")
    clean = sub.add_parser("clean", help="move the arms out of the body: a clip without self-penetration")
    clean.add_argument("clip", metavar="IN.npz")
    clean.add_argument("out", metavar="OUT.npz", help="clip to write (never the input)")
    clean.add_argument("--smooth", type=float, default=SMOOTH_SIGMA, metavar="S",
                       help=f"seconds: sigma of the Gaussian that spreads corrections in time (default {SMOOTH_SIGMA})")
    imp = sub.add_parser("import", help="a retargeted G1 CSV (root pos, quat x y z w, 29 joints) as a 50 fps clip")
    imp.add_argument("csv", metavar="CLIP.csv")
    imp.add_argument("out", metavar="OUT.npz", help="clip to write")
    imp.add_argument("--fps", type=float, required=True, metavar="F", help="frame rate of the CSV's rows")
    record = sub.add_parser("record", help=f"roll out a {RECORD_TASK} policy and write its motion as a clip")
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["record"]:  # checkpoint_io imports torch: `check` and `show` start without it
        from common.checkpoint_io import add_checkpoint_args, renamed_note

        add_checkpoint_args(record)
    record.add_argument("--seconds", type=duration(), required=True, metavar="S", help="length of the clip")
    record.add_argument("--command", type=float, nargs=3, required=True, metavar=("VX", "VY", "WZ"),
                        help="the velocity command held throughout: m/s forward, m/s left, rad/s yaw rate")
    record.add_argument("--out", required=True, metavar="CLIP.npz", help="clip to write")
    record.add_argument("--seed", type=int, default=0, help="environment seed: start pose, randomisation")
    args = p.parse_args(argv)
    if args.subcommand == "record":
        args.task = args.task or RECORD_TASK
        if args.task != RECORD_TASK:
            record.error(f"--task {args.task}: record rolls out {RECORD_TASK} policies only{renamed_note(args.task)}")
        if not np.isfinite(args.command).all():
            record.error(f"--command {args.command}: give three finite numbers VX VY WZ")
        if round(args.seconds * control_rate()) < 2:
            record.error(f"--seconds {args.seconds:g} is under two frames at {control_rate():g} fps")
    if args.subcommand == "clean" and not (math.isfinite(args.smooth) and args.smooth >= 0):
        clean.error(f"--smooth must be a number of seconds >= 0, got {args.smooth}")
    if args.subcommand == "import" and not (math.isfinite(args.fps) and args.fps > 0):
        imp.error(f"--fps must be a positive number of frames per second, got {args.fps}")
    if args.subcommand == "show":
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


def penetration_warning(path: str, pen: SelfPenetration, advice: str | None = None) -> str | None:
    """The stderr line for a clip with self-penetration, or None; `advice` ends it (by default: run clean)."""
    if not pen.frames.any():
        return None
    advice = advice or f"`appo-motion clean {path} OUT.npz` moves the arms out"
    return (f"warning: {path}: self-penetration in {100 * pen.share:.1f}% of frames (max {pen.max_depth:.4f} m); "
            f"the tracking task penalises self-collisions: {advice}")


def check(path: str) -> tuple[str, str | None]:
    """Load and check a clip; its report and a self-penetration warning (ClipError if refused)."""
    model = build_model()
    clip = load_clip(path, model)
    pen = self_penetration(clip.qpos(), model)
    return "\n".join([report(path, clip_stats(clip, model)), *report_lines(pen)]), penetration_warning(path, pen)


def write_atomically(path: str, clip: MotionClip) -> None:
    """Write the clip to a temporary file beside `path`, then rename it over `path`."""
    out = Path(path)
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ClipError(f"cannot create the folder of {out} ({exc})") from None
    # Named by hand, not mkstemp: the file gets the umask's permissions, as a plain write would.
    tmp = out.parent / f".{out.name}.{os.getpid()}.{secrets.token_hex(4)}.tmp"
    try:
        write_clip(tmp, clip)
        os.replace(tmp, out)
    except OSError as exc:
        tmp.unlink(missing_ok=True)
        raise ClipError(f"cannot write {out} ({exc})") from None
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def refuse_same_file(src: str, out: str) -> None:
    """ClipError when `out` names the input file: a command never overwrites its input."""
    same = Path(out).resolve() == Path(src).resolve()
    if not same and Path(out).exists() and Path(src).exists():
        same = os.path.samefile(src, out)  # a link or another spelling of the same file
    if same:
        raise ClipError(f"{out} is the input file; give another output path (the input is never overwritten)")


def clean_report(src: str, out: str, result: CleanResult, seconds: float) -> str:
    """What `clean` prints: penetration before and after, frames and joints changed, time taken."""
    names = joint_names()
    change = np.abs(result.change)
    touched = result.frames_touched
    joints = np.flatnonzero(change.max(axis=0) > 0)
    lines = [f"clip: {src}", f"out: {out}", "before:", *report_lines(result.before), "after:",
             *report_lines(result.after),
             f"frames touched: {int(touched.sum())} of {len(touched)} ({100 * touched.mean():.1f}%)"]
    if joints.size:
        frame, joint = np.unravel_index(int(np.argmax(change)), change.shape)
        lines += [f"max joint change: {change[frame, joint]:.4f} rad ({names[joint]}, frame {frame})",
                  f"mean joint change: {change[np.ix_(touched, joints)].mean():.4f} rad "
                  "(over the touched frames and the changed joints)",
                  "changed joints: " + ", ".join(f"{names[j]} (max {change[:, j].max():.4f} rad)" for j in joints),
                  f"smoothing rounds: {result.rounds}"]
    lines.append(f"time: {seconds:.2f} s")
    return "\n".join(lines)


def clean(src: str, out: str, sigma: float) -> tuple[str, str | None]:
    """Clean a clip and write it; the report and a warning if penetration the arms cannot fix remains."""
    refuse_same_file(src, out)
    model = build_model()
    clip = load_clip(src, model)
    start = time.perf_counter()
    result = clean_clip(clip, model, sigma=sigma)
    check_clip(result.clip, model)
    write_atomically(out, result.clip)
    text = clean_report(src, out, result, time.perf_counter() - start)
    pairs = ", ".join(f"{a} / {b}" for a, b in result.after.pairs)  # the arms are clear: these are other parts
    return text, penetration_warning(out, result.after, f"clean moves only the arms, and these pairs are not: {pairs}")


def import_clip(src: str, out: str, fps: float) -> tuple[str, str | None]:
    """Import a CSV as a clip, check it and write it; its check report and a self-penetration warning."""
    refuse_same_file(src, out)
    model = build_model()
    try:
        clip, rows = import_csv(src, fps)
        check_clip(clip, model)
    except ClipError as exc:
        raise ClipError(f"{src}: {exc}") from None
    write_atomically(out, clip)
    pen = self_penetration(clip.qpos(), model)
    text = "\n".join([f"imported: {src} ({rows} rows at {fps:g} fps)", report(out, clip_stats(clip, model)),
                      *report_lines(pen)])
    return text, penetration_warning(out, pen)


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


class RecordError(RuntimeError):
    """`record` cannot start: the run or checkpoint is missing, unreadable or not a g1_velocity_flat policy."""


class FellError(RuntimeError):
    """The recorded policy fell (its episode terminated) before the clip was complete."""


def rollout(policy, frames: int, command: np.ndarray, seed: int) -> np.ndarray:
    """[frames, nq] qpos of one g1_velocity_flat env under the policy's mean action, from its reset state, with
    no observation noise, no pushes and `command` held; FellError if it terminates first."""
    import torch

    from collector.envs import make_env
    from tools.eval import check_dims

    env = make_env(RECORD_TASK, 1, 1, seed, max_episode_steps=frames)
    try:
        check_dims(policy, env)
        env.noise = False
        env.pushes = False
        env.reset()
        env.set_commands(np.asarray(command, np.float64)[None])
        qpos = [env.qpos[0].copy()]
        while len(qpos) < frames:
            env.command_time_left[:] = np.inf  # never resampled: the command stays the one given
            obs, _ = env.observe()
            with torch.no_grad():
                action = policy.model.act_deterministic(torch.as_tensor(obs, dtype=torch.float32)).numpy()
            res = env.step(action)
            if res.terminated[0]:
                raise FellError(f"the policy fell (its episode terminated) after {len(qpos) / control_rate():.2f} s "
                                f"of {frames / control_rate():.2f} s; no clip written")
            qpos.append(env.qpos[0].copy())
    finally:
        env.close()
    return np.array(qpos)


def record(args: argparse.Namespace) -> str:
    """Roll out the run's policy, write the clip; its check report."""
    from common.checkpoint_io import CheckpointError, policy_from_args

    try:
        policy = policy_from_args(args)
    except CheckpointError as exc:
        raise RecordError(str(exc)) from None
    if policy.task != RECORD_TASK:
        raise RecordError(f"checkpoint {policy.path} is a {policy.task} policy; record needs {RECORD_TASK}")
    qpos = rollout(policy, round(args.seconds * control_rate()), np.array(args.command), args.seed)
    model = build_model()
    limits = hinge_limits(model)
    qpos[:, 7:] = np.clip(qpos[:, 7:], limits[:, 0], limits[:, 1])
    clip = clip_from_qpos(qpos, control_rate(), model)
    check_clip(clip, model)
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    write_clip(args.out, clip)
    return report(args.out, clip_stats(clip, model))


def run_clip_command(args: argparse.Namespace) -> tuple[str, str | None]:
    """`check`, `clean` or `import`: the report for stdout and a warning for stderr, or None."""
    if args.subcommand == "check":
        return check(args.clip)
    if args.subcommand == "clean":
        return clean(args.clip, args.out, args.smooth)
    return import_clip(args.csv, args.out, args.fps)


def main(argv: list[str] | None = None) -> int:
    """Run one subcommand; 2 and `error: ...` on stderr for a refused clip or input or a failed render."""
    args = parse_args(argv)
    try:
        if args.subcommand in ("check", "clean", "import"):
            text, warning = run_clip_command(args)
            print(text)
            if warning:
                print(warning, file=sys.stderr)
        elif args.subcommand == "show":
            print(show(args.clip, args.video, args.video_size, args.fps_scale))
        else:
            import torch

            torch.set_num_threads(1)  # one small MLP forward per step
            print(record(args))
    except (ClipError, RecordError, video.RenderError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except (FellError, CleanError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    except ModuleNotFoundError as exc:
        return missing_extra(exc)
    return 0


if __name__ == "__main__":
    sys.exit(main())
