"""appo-motion (tools/motion.py) as users run it: `python -m tools.motion check|show|clean|import` in a subprocess.

The clips are made here: a pelvis moving forward at a known speed and turning at a
known yaw rate from the home pose, turned into a clip by clip_from_qpos (forward
kinematics, finite differences), then written with write_clip; and the walking clip of
tests/g1_clips.py whose right hand reaches into the right hip.
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
from g1_clips import ARM_JOINTS, crossed_legs_qpos, reaching_qpos

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
    if proc.returncode == 2 and any(m in proc.stderr for m in ("cannot create an offscreen OpenGL context",
                                                                 "cannot render:")):
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


# ------------------------------------------------------------------ self-penetration, clean, import


def reaching_clip(frames: int = 40):
    """A walking clip whose right hand goes into the right hip capsule between frames 10 and 30."""
    return clip_from_qpos(reaching_qpos(frames, 10, 30), fps=FPS)


def arrays(path: Path) -> dict[str, np.ndarray]:
    """Every array of a clip file."""
    with np.load(path) as npz:
        return {k: npz[k] for k in npz.files}


def test_check_reports_self_penetration_and_warns_but_exits_0(tmp_path):
    """`check` on a clip with the hand in the hip prints the share, depths and pair, warns on stderr, exits 0."""
    path = tmp_path / "reach.npz"
    write_clip(path, reaching_clip())
    proc = motion("check", str(path))
    assert proc.returncode == 0, proc.stderr
    out = figures(proc.stdout)
    frames = re.fullmatch(r"(\d+) of 40 frames \((\S+)%\)", out["self-penetration"])
    assert frames and 0 < int(frames.group(1)) < 40
    assert float(out["max penetration depth"].split()[0]) > 0.01
    pair = "penetrating pair right_hip_collision (right_hip_roll_link) / right_hand_collision (right_wrist_yaw_link)"
    assert out[pair].startswith(f"{frames.group(1)} frames, max ")
    assert proc.stderr.startswith(f"warning: {path}: self-penetration in {frames.group(2)}% of frames")
    assert "appo-motion clean" in proc.stderr


def test_check_of_a_clip_without_penetration_says_none_and_does_not_warn(tmp_path):
    """`check` on the home-pose arc prints `self-penetration: none` and nothing on stderr."""
    path = tmp_path / "arc.npz"
    write_clip(path, arc_clip(30))
    proc = motion("check", str(path))
    assert proc.returncode == 0 and proc.stderr == ""
    assert figures(proc.stdout)["self-penetration"] == "none (0 of 30 frames)"


def test_clean_writes_a_clip_check_accepts_without_warning(tmp_path):
    """`clean` writes a clip `check` passes without a warning, reports arm-only changes and keeps the input intact."""
    src, out = tmp_path / "reach.npz", tmp_path / "clean" / "reach_clean.npz"
    write_clip(src, reaching_clip())
    original = src.read_bytes()
    proc = motion("clean", str(src), str(out))
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr == "" and src.read_bytes() == original
    lines = proc.stdout.splitlines()
    assert lines[lines.index("after:") + 1] == "self-penetration: none (0 of 40 frames)"
    report = figures("\n".join(line for line in lines if ": " in line))
    assert float(report["max joint change"].split()[0]) > 0.005
    changed = re.findall(r"(\w+_joint) \(max", report["changed joints"])
    assert changed and set(changed) <= set(ARM_JOINTS)
    again = motion("check", str(out))
    assert again.returncode == 0 and again.stderr == ""
    assert figures(again.stdout)["self-penetration"] == "none (0 of 40 frames)"
    assert [p.name for p in out.parent.iterdir()] == [out.name]  # no temporary file left


def test_clean_leaves_a_clean_clip_as_it_is(tmp_path):
    """`clean` of a clip without penetration writes the same arrays and reports no frame touched."""
    src, out = tmp_path / "arc.npz", tmp_path / "arc_clean.npz"
    write_clip(src, arc_clip(30))
    proc = motion("clean", str(src), str(out))
    assert proc.returncode == 0, proc.stderr
    assert "frames touched: 0 of 30 (0.0%)" in proc.stdout
    before, after = arrays(src), arrays(out)
    assert before.keys() == after.keys() and all(np.array_equal(before[k], after[k]) for k in before)


def test_clean_never_overwrites_its_input(tmp_path):
    """`clean IN IN` (also through another spelling of the path) exits 2 with the reason and leaves IN as it was."""
    src = tmp_path / "reach.npz"
    write_clip(src, reaching_clip())
    original = src.read_bytes()
    for out in (src, tmp_path / "." / "reach.npz"):
        proc = motion("clean", str(src), str(out))
        assert proc.returncode == 2 and proc.stderr.startswith("error: ") and "is the input file" in proc.stderr
    assert src.read_bytes() == original


def test_clean_refuses_a_bad_clip_and_writes_nothing(tmp_path):
    """`clean` of a clip `check` refuses exits 2 with the reason and writes no output."""
    src, out = tmp_path / "bad.npz", tmp_path / "out.npz"
    write_clip(src, dataclasses.replace(arc_clip(10), fps=30.0))
    proc = motion("clean", str(src), str(out))
    assert proc.returncode == 2 and proc.stderr.startswith(f"error: {src}: fps is 30") and not out.exists()


def test_import_writes_a_checked_50_fps_clip(tmp_path):
    """`import` of a 30 fps CSV with a header writes a clip of span x 50 + 1 frames that `check` accepts."""
    qpos = arc_clip(31).qpos()  # 31 rows read as 30 fps: 1 s
    rows = np.concatenate([qpos[:, :3], qpos[:, [4, 5, 6, 3]], qpos[:, 7:]], axis=1)  # quaternion x, y, z, w
    src, out = tmp_path / "arc.csv", tmp_path / "arc.npz"
    np.savetxt(src, rows, delimiter=",", fmt="%.9g", header="x,y,z,qx,qy,qz,qw,joints...", comments="")
    proc = motion("import", str(src), str(out), "--fps", "30")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith(f"imported: {src} (31 rows at 30 fps)")
    assert figures(proc.stdout.split("\n", 1)[1])["frames"] == "51"
    again = motion("check", str(out))
    assert again.returncode == 0 and figures(again.stdout)["frames"] == "51"


@pytest.mark.parametrize("argv, needle", [(["--fps", "0"], "--fps must be a positive number"),
                                          (["--fps", "-30"], "--fps must be a positive number"),
                                          (["--fps", "30"], "row 2 has 35 columns, expected 36")])
def test_import_refuses_bad_input_with_status_2(tmp_path, argv, needle):
    """`import` with a non-positive --fps or a malformed CSV exits 2 naming the problem and writes nothing."""
    src, out = tmp_path / "m.csv", tmp_path / "m.npz"
    src.write_text(",".join(["0"] * 6 + ["1"] + ["0"] * 29) + "\n" + ",".join(["0"] * 35) + "\n")
    proc = motion("import", str(src), str(out), *argv)
    assert proc.returncode == 2 and needle in proc.stderr and not out.exists()


def test_clean_warns_about_penetration_it_does_not_move(tmp_path):
    """`clean` of crossed legs exits 0, leaves the legs as they were and warns naming the pairs that remain."""
    src, out = tmp_path / "legs.npz", tmp_path / "legs_clean.npz"
    write_clip(src, clip_from_qpos(crossed_legs_qpos(10), fps=FPS))
    proc = motion("clean", str(src), str(out))
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr.startswith(f"warning: {out}: self-penetration in 100.0% of frames")
    assert "clean moves only the arms" in proc.stderr and "left_thigh_collision / right_thigh_collision" in proc.stderr
    assert np.array_equal(arrays(src)["joint_pos"], arrays(out)["joint_pos"])
