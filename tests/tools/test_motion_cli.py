"""appo-motion (tools/motion.py) as users run it: `python -m tools.motion check|show` in a subprocess.

The clips are made here: a pelvis moving forward at a known speed and turning at a
known yaw rate from the home pose, turned into a clip by clip_from_qpos (forward
kinematics, finite differences), then written with write_clip.
"""

from __future__ import annotations

import dataclasses
import math
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from collector.envs.g1.model import default_joint_pos
from collector.envs.g1.motion import clip_from_qpos, write_clip

ROOT = Path(__file__).resolve().parents[2]
FPS = 50.0
SPEED = 0.6  # m/s along the heading
YAW_RATE = 0.4  # rad/s
HEIGHT = 0.76  # m, the home keyframe's pelvis height


def arc_clip(frames: int):
    """A clip whose pelvis moves on a circle arc at SPEED and YAW_RATE, starting at heading 0, joints at home."""
    t = np.arange(frames) / FPS
    heading = YAW_RATE * t
    radius = SPEED / YAW_RATE
    root = np.column_stack([radius * np.sin(heading), radius * (1 - np.cos(heading)), np.full(frames, HEIGHT),
                            np.cos(heading / 2), 0 * t, 0 * t, np.sin(heading / 2)])
    joints = np.tile(default_joint_pos(), (frames, 1))
    return clip_from_qpos(np.concatenate([root, joints], axis=1), fps=FPS)


def motion(*argv: str, timeout: float = 120) -> subprocess.CompletedProcess:
    """Run `python -m tools.motion ARGV` from the repository root."""
    return subprocess.run([sys.executable, "-m", "tools.motion", *argv], capture_output=True, text=True,
                          timeout=timeout, cwd=ROOT)


def figures(stdout: str) -> dict[str, str]:
    """`name: value` lines of the check report."""
    return dict(line.split(": ", 1) for line in stdout.strip().splitlines())


def test_check_prints_the_figures_of_a_good_clip(tmp_path):
    """`check` exits 0 and prints frames, duration, fps, mean root speed, heading change and max FK error."""
    path = tmp_path / "arc.npz"
    write_clip(path, arc_clip(100))
    proc = motion("check", str(path))
    assert proc.returncode == 0, proc.stderr
    out = figures(proc.stdout)
    assert out["clip"] == str(path)
    assert (out["frames"], out["duration"], out["fps"]) == ("100", "2.00 s", "50")
    assert out["mean root speed"] == f"{SPEED:.3f} m/s"
    turned = YAW_RATE * 99 / FPS
    assert out["heading change"] == f"{math.degrees(turned):.1f} deg ({turned:.3f} rad)"
    fk_error = re.fullmatch(r"(\S+) m", out["max FK error"])
    assert fk_error and float(fk_error.group(1)) < 1e-5


@pytest.mark.parametrize("problem, needle", [("fps", "fps is 30, expected 50"),
                                             ("body", "body torso_link at frame 3 is 0.0300 m")])
def test_check_refuses_a_bad_clip_with_status_2(tmp_path, problem, needle):
    """`check` on a bad clip prints `error: <file>: <reason>` to stderr, nothing to stdout, and exits 2."""
    clip = arc_clip(20)
    if problem == "fps":
        clip = dataclasses.replace(clip, fps=30.0)
    else:
        clip.body_pos_w[3, 15, 2] += np.float32(0.03)  # torso_link (body 15) 3 cm above its FK position
    path = tmp_path / "bad.npz"
    write_clip(path, clip)
    proc = motion("check", str(path))
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert proc.stdout == ""
    assert proc.stderr.startswith(f"error: {path}: ") and needle in proc.stderr


def test_check_refuses_a_missing_file_with_status_2(tmp_path):
    """`check` on a path that does not exist exits 2 with an error line naming it."""
    proc = motion("check", str(tmp_path / "absent.npz"))
    assert proc.returncode == 2 and proc.stderr.startswith("error: ") and "absent.npz" in proc.stderr


def test_show_writes_an_mp4_with_one_frame_per_clip_frame(tmp_path):
    """`show` writes a non-empty H.264 MP4 with the clip's frame count, at fps x --fps-scale, of a drawn scene."""
    import imageio.v2 as imageio

    frames, out = 8, tmp_path / "videos" / "arc.mp4"
    out.parent.mkdir()
    clip_path = tmp_path / "arc.npz"
    write_clip(clip_path, arc_clip(frames))
    proc = motion("show", str(clip_path), "--video", str(out), "--video-size", "96x72", "--fps-scale", "0.5")
    if proc.returncode == 2 and "cannot create an offscreen OpenGL context" in proc.stderr:
        pytest.skip(f"no offscreen OpenGL here: {proc.stderr.strip()}")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert f"({frames} frames at 25 fps)" in proc.stdout
    assert out.stat().st_size > 0
    reader = imageio.get_reader(str(out), format="FFMPEG")
    assert reader.count_frames() == frames
    assert reader.get_meta_data()["fps"] == pytest.approx(25.0)
    frame = reader.get_data(frames // 2)
    reader.close()
    assert frame.shape == (72, 96, 3) and frame.std() > 10  # a scene, not a blank buffer


def test_show_refuses_a_bad_clip_before_writing_anything(tmp_path):
    """`show` on a refused clip exits 2 with the reason and writes no video."""
    path, out = tmp_path / "bad.npz", tmp_path / "out.mp4"
    write_clip(path, dataclasses.replace(arc_clip(10), fps=25.0))
    proc = motion("show", str(path), "--video", str(out))
    assert proc.returncode == 2 and "fps is 25" in proc.stderr and not out.exists()
