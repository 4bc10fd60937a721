"""Importing retargeted G1 CSV motion (tools/motion_import.py) against trajectories known in closed form.

The CSV rows are samples of a motion written as functions of time: the pelvis moving forward while
bobbing and swaying, turning at a constant rate about one fixed tilted axis (which slerp interpolates
exactly), and every joint swinging about the home pose.  The imported 50 fps clip must be those
functions at 50 fps, up to the error linear interpolation of a sinusoid can have.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from g1_clips import home_joints

from collector.envs.g1.model import build_model
from collector.envs.g1.motion import ClipError, check_clip, hinge_limits
from tools.motion_import import import_csv

SPAN = 2.0  # s of motion in every CSV
AXIS = np.array([0.1, 0.2, 1.0]) / np.linalg.norm([0.1, 0.2, 1.0])  # the fixed axis the pelvis turns about
TURN_RATE, TURN0 = 0.8, 0.3  # rad/s, rad
SWAY, BOB = 0.1, 0.02  # m, amplitudes of y at 0.5 Hz and z at 1 Hz
JOINT_FREQ = 1.0  # Hz


def joint_amplitude() -> np.ndarray:
    """[29] swing amplitudes: 0.1 rad, less where a limit is nearer, so every angle stays inside its limits."""
    limits, home = hinge_limits(build_model()), home_joints()
    return np.minimum(0.1, 0.5 * np.minimum(home - limits[:, 0], limits[:, 1] - home))


def motion(t: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Root position [T, 3], root quaternion w, x, y, z [T, 4] and joint angles [T, 29] at times t."""
    pos = np.column_stack([0.5 * t, SWAY * np.sin(np.pi * t), 0.76 + BOB * np.sin(2 * np.pi * t)])
    angle = TURN0 + TURN_RATE * t
    quat = np.column_stack([np.cos(angle / 2), np.sin(angle / 2)[:, None] * AXIS])
    phase = np.arange(29)
    joints = home_joints() + joint_amplitude() * np.sin(2 * np.pi * JOINT_FREQ * t[:, None] + phase)
    return pos, quat, joints


def csv_rows(fps: float) -> np.ndarray:
    """[rows, 36] the motion sampled at fps over SPAN: position, quaternion x, y, z, w, joints."""
    t = np.arange(round(SPAN * fps) + 1) / fps
    pos, quat, joints = motion(t)
    return np.concatenate([pos, quat[:, [1, 2, 3, 0]], joints], axis=1)


def write_csv(path, rows: np.ndarray, header: bool = False) -> str:
    """Write rows as comma-separated text at full precision, with a header line if asked; the path."""
    names = "root_x,root_y,root_z,qx,qy,qz,qw," + ",".join(f"joint_{i}" for i in range(29))
    np.savetxt(path, rows, delimiter=",", fmt="%.17g", header=names if header else "", comments="")
    return str(path)


def lerp_bound(amplitude: float, freq: float, fps: float) -> float:
    """The largest error of linearly interpolating A sin(2 pi f t) between samples 1/fps apart: A w^2 h^2 / 8."""
    return amplitude * (2 * np.pi * freq) ** 2 / fps**2 / 8


@pytest.mark.parametrize("fps", [30.0, 100.0])
def test_a_csv_is_resampled_to_the_known_50_fps_motion(tmp_path, fps):
    """Joint angles, root position and orientation at 50 fps are the known motion's, within interpolation error."""
    clip, rows = import_csv(write_csv(tmp_path / "m.csv", csv_rows(fps)), fps)
    t = np.arange(round(SPAN * 50) + 1) / 50
    pos, quat, joints = motion(t)
    assert rows == round(SPAN * fps) + 1 and clip.fps == 50.0 and clip.num_frames == len(t)
    err = np.abs(clip.joint_pos - joints)
    assert np.all(err <= joint_amplitude() * lerp_bound(1.0, JOINT_FREQ, fps) * 1.01 + 1e-6)
    assert err.max() > 1e-5 or fps == 100.0  # at 30 fps the samples fall between the 50 fps frames
    root_err = np.abs(clip.body_pos_w[:, 0] - pos)
    assert root_err[:, 0].max() < 1e-6  # x is linear in time: exact
    assert root_err[:, 1].max() <= lerp_bound(SWAY, 0.5, fps) * 1.01 + 1e-6
    assert root_err[:, 2].max() <= lerp_bound(BOB, 1.0, fps) * 1.01 + 1e-6
    sign = np.sign(np.sum(clip.body_quat_w[:, 0] * quat, axis=1))[:, None]  # q and -q are one rotation
    np.testing.assert_allclose(sign * clip.body_quat_w[:, 0], quat, atol=1e-6)  # slerp about a fixed axis is exact
    np.testing.assert_allclose(clip.joint_vel, np.gradient(clip.joint_pos.astype(np.float64), 1 / 50, axis=0),
                               atol=1e-4)
    check_clip(clip)


def test_a_50_fps_csv_keeps_its_rows(tmp_path):
    """At the control rate every row becomes its frame unchanged (to float32)."""
    rows = csv_rows(50.0)
    clip, _ = import_csv(write_csv(tmp_path / "m.csv", rows), 50.0)
    np.testing.assert_allclose(clip.joint_pos, rows[:, 7:], atol=1e-6)
    np.testing.assert_allclose(clip.body_pos_w[:, 0], rows[:, :3], atol=1e-6)
    np.testing.assert_allclose(clip.body_quat_w[:, 0], rows[:, [6, 3, 4, 5]], atol=1e-6)


def test_a_header_row_is_skipped(tmp_path):
    """The same rows with a header line of names import to the same clip."""
    rows = csv_rows(30.0)
    plain, _ = import_csv(write_csv(tmp_path / "a.csv", rows), 30.0)
    headed, count = import_csv(write_csv(tmp_path / "b.csv", rows, header=True), 30.0)
    assert count == len(rows)
    np.testing.assert_array_equal(plain.joint_pos, headed.joint_pos)
    np.testing.assert_array_equal(plain.body_pos_w, headed.body_pos_w)


def broken(rows: np.ndarray, row: int, cells: dict[int, str]) -> str:
    """The rows as CSV text with cells of one row replaced, {column: text} (row and columns 1-based)."""
    lines = [",".join(f"{v:.17g}" for v in r) for r in rows]
    row_cells = lines[row - 1].split(",")
    for col, text in cells.items():
        row_cells[col - 1] = text
    lines[row - 1] = ",".join(row_cells)
    return "\n".join(lines) + "\n"


def short_row(rows: np.ndarray, row: int) -> str:
    """The rows as CSV text with the last cell of one row (1-based) left out."""
    lines = [",".join(f"{v:.17g}" for v in r) for r in rows]
    lines[row - 1] = lines[row - 1].rsplit(",", 1)[0]
    return "\n".join(lines) + "\n"


ROWS = csv_rows(30.0)[:5]
BAD = {
    "a row with 35 columns": (short_row(ROWS, 2), "row 2 has 35 columns, expected 36"),
    "a word in a cell": (broken(ROWS, 3, {8: "abc"}), "row 3 column 8 (left_hip_pitch_joint) is 'abc', not a number"),
    "an empty cell": (broken(ROWS, 4, {1: ""}), "row 4 column 1 (root_x) is '', not a number"),
    "a NaN": (broken(ROWS, 4, {2: "nan"}), "row 4 column 2 (root_y) is nan, expected a finite number"),
    "an infinity": (broken(ROWS, 5, {36: "-inf"}), "row 5 column 36 (right_wrist_yaw_joint) is -inf, expected a"),
    "a zero quaternion": (broken(ROWS, 2, {4: "0", 5: "0", 6: "0", 7: "0"}),
                          "row 2: the root quaternion (columns 4-7, x, y, z, w) has norm 0"),
    "one row": (broken(ROWS[:1], 1, {1: "0"}), "the CSV has 1 frame row(s), expected at least 2"),
    "only a header": ("x,y,z\n", "the CSV has 0 frame row(s), expected at least 2"),
}


@pytest.mark.parametrize("case", list(BAD))
def test_a_bad_csv_is_refused_naming_the_problem(tmp_path, case):
    """Each malformed CSV raises ClipError whose message names the row, column and problem."""
    text, needle = BAD[case]
    path = tmp_path / "bad.csv"
    path.write_text(text)
    with pytest.raises(ClipError) as info:
        import_csv(path, 30.0)
    assert needle in str(info.value)


@pytest.mark.parametrize("fps", [0.0, -30.0, math.nan])
def test_a_non_positive_fps_is_refused(tmp_path, fps):
    """An input rate that is not a positive number is refused before the CSV is read."""
    with pytest.raises(ClipError, match="fps must be a positive number"):
        import_csv(tmp_path / "absent.csv", fps)


def test_a_span_under_two_frames_is_refused(tmp_path):
    """Two rows at 200 fps span 5 ms: less than two 50 fps frames, refused with the span named."""
    path = write_csv(tmp_path / "m.csv", csv_rows(200.0)[:2], header=True)
    with pytest.raises(ClipError, match="span 0.005 s, under the two frames"):
        import_csv(path, 200.0)
