"""Wire format: a rollout round-trips exactly; every kind of malformed message is refused with its reason."""

import msgpack
import numpy as np
import pytest

from common.rollout_spec import RolloutSpec, allocate
from common.transport.wire import WireError, decode_control, decode_rollout, encode_control, encode_rollout

SPEC = RolloutSpec("half_cheetah", num_envs=4, steps=3, obs_dim=17, critic_dim=17, act_dim=6)


def _arrays(seed=0):
    rng = np.random.default_rng(seed)
    out = allocate(SPEC)
    for a in out.values():
        a[...] = rng.normal(size=a.shape)
    return out


def _frames(**changes):
    frames = encode_rollout(SPEC, "c1", 7, 3, {"episodes": 1}, _arrays())
    header = msgpack.unpackb(frames[0])
    for k, v in changes.items():
        if k in header:
            header[k] = v
        else:
            header["meta"][k] = v
    return [msgpack.packb(header)] + [bytes(memoryview(f)) for f in frames[1:]]


def test_round_trip_is_exact():
    """Decoded arrays and metadata equal what was encoded."""
    arrays = _arrays(1)
    frames = encode_rollout(SPEC, "c1", 7, 3, {"episodes": 2}, arrays)
    msg = decode_rollout([bytes(memoryview(f)) for f in frames], SPEC)
    assert (msg.collector, msg.seq, msg.policy_version, msg.stats) == ("c1", 7, 3, {"episodes": 2})
    for k, a in arrays.items():
        np.testing.assert_array_equal(msg.arrays[k], a)


@pytest.mark.parametrize(
    "frames, reason",
    [
        ([], "empty"),
        ([b"\xc1\xff\x00garbage"], "bad_msgpack"),
        ([msgpack.packb([1, 2, 3])], "bad_header"),
        (_frames(v=2), "bad_version"),
        (_frames(kind="weights"), "bad_kind"),
        (_frames(task="hopper"), "wrong_task"),
        (_frames(spec_hash=12345), "spec_mismatch"),
        (_frames(seq="7"), "bad_field"),
        (_frames(policy_version=True), "bad_field"),
        (_frames(stats=[1]), "bad_field"),
    ],
)
def test_bad_headers_are_refused(frames, reason):
    """Garbage, wrong version/kind/task/spec and mistyped fields each raise WireError with their reason."""
    with pytest.raises(WireError) as exc:
        decode_rollout(frames, SPEC)
    assert exc.value.reason == reason


def test_missing_frame_is_refused():
    """A valid header with a frame missing is refused before any array is read."""
    frames = _frames()
    with pytest.raises(WireError) as exc:
        decode_rollout(frames[:-1], SPEC)
    assert exc.value.reason == "frame_count"


def test_truncated_frame_is_refused():
    """An array frame shorter than its shape needs is refused."""
    frames = _frames()
    frames[3] = frames[3][:-4]
    with pytest.raises(WireError) as exc:
        decode_rollout(frames, SPEC)
    assert exc.value.reason == "bad_size"


def test_wrong_shape_and_dtype_are_refused():
    """Declared shapes and dtypes must equal the spec's."""
    frames = _frames()
    header = msgpack.unpackb(frames[0])
    header["arrays"][0][2] = [4, 3, 18]
    with pytest.raises(WireError) as exc:
        decode_rollout([msgpack.packb(header)] + frames[1:], SPEC)
    assert exc.value.reason == "bad_shape"
    header = msgpack.unpackb(frames[0])
    header["arrays"][1][1] = "<f8"
    with pytest.raises(WireError) as exc:
        decode_rollout([msgpack.packb(header)] + frames[1:], SPEC)
    assert exc.value.reason == "bad_dtype"


def test_non_finite_values_are_refused():
    """A NaN or Inf anywhere in the arrays refuses the rollout."""
    arrays = _arrays()
    arrays["rewards"][1, 2] = np.inf
    frames = [bytes(memoryview(f)) for f in encode_rollout(SPEC, "c", 0, 0, {}, arrays)]
    with pytest.raises(WireError) as exc:
        decode_rollout(frames, SPEC)
    assert exc.value.reason == "non_finite"


def test_oversized_header_is_refused():
    """A header larger than the limit is refused without being parsed."""
    with pytest.raises(WireError) as exc:
        decode_rollout([b"\x00" * (70 * 1024)], SPEC)
    assert exc.value.reason == "oversized_header"


def test_control_messages_round_trip_and_unknown_kinds_are_refused():
    """Control frames decode to their body; a kind outside the allowed set is refused."""
    frame = encode_control("heartbeat", {"t": 1.5})
    assert decode_control(frame, {"heartbeat"})["t"] == 1.5
    with pytest.raises(WireError) as exc:
        decode_control(frame, {"hello"})
    assert exc.value.reason == "bad_kind"


def test_malformed_array_list_is_refused():
    """Array entries that are not [name, dtype, shape] are refused, not a crash."""
    frames = _frames()
    header = msgpack.unpackb(frames[0])
    header["arrays"][2] = ["actions", "<f4"]
    with pytest.raises(WireError) as exc:
        decode_rollout([msgpack.packb(header)] + frames[1:], SPEC)
    assert exc.value.reason == "bad_arrays"
