"""Import a retargeted G1 motion from the common CSV layout into a clip at the control rate.

One row per frame, comma-separated, 36 columns: root position x, y, z (m), root orientation as a
quaternion x, y, z, w, then the 29 joint angles (rad) in the model's joint order
(`collector.envs.g1.model.joint_names()`).  A first row with no number in it is a header and is
skipped; blank lines are skipped.  As BeyondMimic's csv_to_npz converter does, the rows are
resampled to the control rate (positions and joint angles linearly, the root orientation by slerp)
over the motion's span, the bodies come from forward kinematics and the velocities from central
differences (`clip_from_qpos`).
"""

from __future__ import annotations

import csv
from pathlib import Path

import numpy as np

from collector.envs.g1.model import joint_names
from collector.envs.g1.motion import ClipError, MotionClip, clip_from_qpos, control_rate

ROOT_COLUMNS = ("root_x", "root_y", "root_z", "root_qx", "root_qy", "root_qz", "root_qw")
QUAT_MIN_NORM = 1e-6  # a root quaternion shorter than this has no direction to normalise


def column_names() -> list[str]:
    """The 36 CSV columns: root position, root quaternion x, y, z, w, then the joints."""
    return [*ROOT_COLUMNS, *joint_names()]


def _is_number(cell: str) -> bool:
    """Whether the cell parses as a float."""
    try:
        float(cell)
    except ValueError:
        return False
    return True


def read_csv(path: str | Path) -> np.ndarray:
    """[rows, 36] float64 of the CSV; ClipError naming the row and column of a bad cell."""
    names = column_names()
    try:
        with open(path, newline="") as f:
            rows = [(n, row) for n, row in enumerate(csv.reader(f), start=1) if any(c.strip() for c in row)]
    except (OSError, UnicodeDecodeError, csv.Error) as exc:
        raise ClipError(f"cannot read the CSV ({exc})") from None
    if rows and not any(_is_number(c) for c in rows[0][1]):
        rows = rows[1:]  # a header row: names, no numbers
    values = np.array([_parse_row(n, row, names) for n, row in rows], np.float64).reshape(-1, len(names))
    if len(values) < 2:
        raise ClipError(f"the CSV has {len(values)} frame row(s), expected at least 2")
    return values


def _parse_row(line: int, row: list[str], names: list[str]) -> list[float]:
    """One row's numbers; ClipError for a wrong column count, a non-numeric or non-finite cell, a zero quaternion."""
    if len(row) != len(names):
        raise ClipError(f"row {line} has {len(row)} columns, expected {len(names)} (root position x, y, z, "
                        f"root quaternion x, y, z, w, then the {len(names) - 7} joint angles)")
    out = []
    for col, (cell, name) in enumerate(zip(row, names, strict=True), start=1):
        try:
            value = float(cell)
        except ValueError:
            raise ClipError(f"row {line} column {col} ({name}) is {cell.strip()!r}, not a number") from None
        if not np.isfinite(value):
            raise ClipError(f"row {line} column {col} ({name}) is {cell.strip()}, expected a finite number")
        out.append(value)
    norm = float(np.linalg.norm(out[3:7]))
    if norm < QUAT_MIN_NORM:
        raise ClipError(f"row {line}: the root quaternion (columns 4-7, x, y, z, w) has norm {norm:.3g}, "
                        "expected a unit quaternion")
    return out


def root_quat_wxyz(rows: np.ndarray) -> np.ndarray:
    """[T, 4] unit root quaternions w, x, y, z from the CSV's x, y, z, w columns (none of norm 0)."""
    quat = rows[:, [6, 3, 4, 5]]
    return quat / np.linalg.norm(quat, axis=1, keepdims=True)


def slerp(q0: np.ndarray, q1: np.ndarray, alpha: np.ndarray) -> np.ndarray:
    """[T, 4] spherical interpolation between unit quaternions [T, 4] by alpha [T], the short way round."""
    dot = np.sum(q0 * q1, axis=1)
    q1 = np.where(dot[:, None] < 0, -q1, q1)  # q and -q are one rotation
    dot = np.clip(np.abs(dot), -1.0, 1.0)
    theta = np.arccos(dot)
    sin = np.sin(theta)
    near = sin < 1e-6  # nearly equal: linear interpolation is exact to rounding
    safe = np.where(near, 1.0, sin)
    w0 = np.where(near, 1.0 - alpha, np.sin((1.0 - alpha) * theta) / safe)
    w1 = np.where(near, alpha, np.sin(alpha * theta) / safe)
    out = w0[:, None] * q0 + w1[:, None] * q1
    return out / np.linalg.norm(out, axis=1, keepdims=True)


def resample(rows: np.ndarray, fps_in: float, fps_out: float) -> np.ndarray:
    """[T', 36] qpos (root quaternion w, x, y, z) at fps_out over the rows' span, the first frame at row 0."""
    quat = root_quat_wxyz(rows)
    span = (len(rows) - 1) / fps_in
    times = np.arange(int(np.floor(span * fps_out + 1e-9)) + 1) / fps_out
    where = times * fps_in
    index = np.minimum(np.floor(where + 1e-9).astype(int), len(rows) - 2)
    alpha = np.clip(where - index, 0.0, 1.0)
    linear = np.concatenate([rows[:, :3], rows[:, 7:]], axis=1)
    lerped = linear[index] + alpha[:, None] * (linear[index + 1] - linear[index])
    root_quat = slerp(quat[index], quat[index + 1], alpha)
    return np.concatenate([lerped[:, :3], root_quat, lerped[:, 3:]], axis=1)


def import_csv(path: str | Path, fps: float) -> tuple[MotionClip, int]:
    """The clip of a CSV recorded at `fps`, at the control rate, and the CSV's frame count (not yet checked)."""
    if not (np.isfinite(fps) and fps > 0):
        raise ClipError(f"the input fps must be a positive number, got {fps:g}")
    rows = read_csv(path)
    qpos = resample(rows, fps, control_rate())
    if len(qpos) < 2:
        raise ClipError(f"the CSV's {len(rows)} rows at {fps:g} fps span {(len(rows) - 1) / fps:.3f} s, "
                        f"under the two frames a clip needs at {control_rate():g} fps")
    return clip_from_qpos(qpos, control_rate()), len(rows)
