"""Wire format for sockets: a msgpack header frame followed by raw array frames.

    frame 0   msgpack {"v": 1, "kind": "rollout", "meta": {...}, "arrays": [[name, dtype, shape], ...]}
    frame 1.. each array's bytes, C order, in the header's order

msgpack only (no Python object serialisation on any socket).  `decode_rollout` validates every field against the
learner's RolloutSpec (version, kind, sizes, dtypes, shapes, finite values)
before anything touches the ring, and raises `WireError` with a short reason
that the learner counts.
"""

from __future__ import annotations

from dataclasses import dataclass

import msgpack
import numpy as np

from common.rollout_spec import DTYPE, RolloutSpec

PROTOCOL_VERSION = 1
MAX_HEADER_BYTES = 64 * 1024
MAX_CONTROL_BYTES = 64 * 1024


class WireError(ValueError):
    """A refused message; `reason` is a short stable label for counting."""

    def __init__(self, reason: str, detail: str = ""):
        super().__init__(f"{reason}: {detail}" if detail else reason)
        self.reason = reason


@dataclass
class RolloutMessage:
    """A decoded, validated rollout: sender, sequence number, policy version, statistics and array views."""

    collector: str
    seq: int
    policy_version: int
    stats: dict
    arrays: dict[str, np.ndarray]


def encode_rollout(spec: RolloutSpec, collector: str, seq: int, policy_version: int, stats: dict,
                   arrays: dict[str, np.ndarray]) -> list:
    """Frames to send with zero-copy: the header bytes, then each array's buffer."""
    shapes = spec.shapes()
    header = {
        "v": PROTOCOL_VERSION,
        "kind": "rollout",
        "meta": {
            "collector": collector,
            "seq": seq,
            "policy_version": policy_version,
            "task": spec.task,
            "spec_hash": spec.spec_hash(),
            "stats": stats,
        },
        "arrays": [[k, DTYPE.str, list(shapes[k])] for k in shapes],
    }
    frames: list = [msgpack.packb(header, use_bin_type=True)]
    for k in shapes:
        a = arrays[k]
        frames.append(a if a.flags.c_contiguous else np.ascontiguousarray(a))
    return frames


def _unpack_header(frame, limit: int) -> dict:
    raw = memoryview(frame)
    if raw.nbytes > limit:
        raise WireError("oversized_header", f"{raw.nbytes} bytes")
    try:
        header = msgpack.unpackb(raw, raw=False, strict_map_key=True)
    except Exception as exc:  # msgpack raises many types for garbage
        raise WireError("bad_msgpack", type(exc).__name__) from None
    if not isinstance(header, dict):
        raise WireError("bad_header", "not a map")
    if header.get("v") != PROTOCOL_VERSION:
        raise WireError("bad_version", repr(header.get("v")))
    return header


def _field(d: dict, key: str, kind: type | tuple[type, ...]):
    value = d.get(key)
    if not isinstance(value, kind) or isinstance(value, bool) and kind is int:
        raise WireError("bad_field", key)
    return value


def decode_rollout(frames: list, spec: RolloutSpec, check_finite: bool = True) -> RolloutMessage:
    """Validate a multipart rollout against `spec`; arrays are read-only views of the frames."""
    if not frames:
        raise WireError("empty")
    header = _unpack_header(frames[0], MAX_HEADER_BYTES)
    if header.get("kind") != "rollout":
        raise WireError("bad_kind", repr(header.get("kind")))
    meta = _field(header, "meta", dict)
    if _field(meta, "task", str) != spec.task:
        raise WireError("wrong_task", meta["task"][:64])
    if _field(meta, "spec_hash", int) != spec.spec_hash():
        raise WireError("spec_mismatch")
    seq, version = _field(meta, "seq", int), _field(meta, "policy_version", int)
    collector = _field(meta, "collector", str)[:128]
    stats = meta.get("stats", {})
    if not isinstance(stats, dict):
        raise WireError("bad_field", "stats")
    expected = spec.shapes()
    listed = _field(header, "arrays", list)
    if any(not isinstance(a, list) or len(a) != 3 for a in listed):
        raise WireError("bad_arrays", "each array entry must be [name, dtype, shape]")
    if [a[0] for a in listed] != list(expected):
        raise WireError("bad_arrays", "names or order differ from the spec")
    if len(frames) != 1 + len(expected):
        raise WireError("frame_count", f"{len(frames)} frames, expected {1 + len(expected)}")
    arrays = {}
    # Both lengths equal len(expected): the names and the frame count were checked above.
    for (name, dtype, shape), frame in zip(listed, frames[1:], strict=True):
        if dtype != DTYPE.str:
            raise WireError("bad_dtype", f"{name}: {dtype!r}")
        if not isinstance(shape, list) or tuple(shape) != expected[name]:
            raise WireError("bad_shape", f"{name}: {shape!r}, expected {list(expected[name])}")
        buf = memoryview(frame)
        if buf.nbytes != int(np.prod(expected[name])) * DTYPE.itemsize:
            raise WireError("bad_size", f"{name}: {buf.nbytes} bytes")
        a = np.frombuffer(buf, dtype=DTYPE).reshape(expected[name])
        if check_finite and not np.isfinite(a).all():
            raise WireError("non_finite", name)
        arrays[name] = a
    return RolloutMessage(collector, seq, version, stats, arrays)


def encode_control(kind: str, body: dict) -> bytes:
    """Small control messages (hello, heartbeat, snapshot request, stop)."""
    return msgpack.packb({"v": PROTOCOL_VERSION, "kind": kind, **body}, use_bin_type=True)


def decode_control(frame, allowed: set[str]) -> dict:
    header = _unpack_header(frame, MAX_CONTROL_BYTES)
    if header.get("kind") not in allowed:
        raise WireError("bad_kind", repr(header.get("kind"))[:64])
    return header
