"""Both transports implement their Protocol: every member exists, as a method, with the same parameters."""

import inspect

import pytest

from common.transport.interface import CollectorTransport, LearnerTransport
from common.transport.shm import CollectorShm, LearnerShm
from common.transport.zmq_collector import CollectorZmq
from common.transport.zmq_learner import LearnerZmq


def _members(protocol: type) -> dict[str, inspect.Signature]:
    """The methods a Protocol declares itself (not those of typing.Protocol or object)."""
    return {
        name: inspect.signature(value)
        for name, value in vars(protocol).items()
        if not name.startswith("_") and inspect.isfunction(value)
    }


def _parameters(sig: inspect.Signature) -> list[tuple[str, inspect._ParameterKind]]:
    return [(p.name, p.kind) for p in sig.parameters.values()]


def test_protocols_declare_the_members_the_processes_use():
    """A guard on the check below: it would pass vacuously if no member were found."""
    assert set(_members(LearnerTransport)) == {"poll", "publish_weights", "collectors", "request_stop", "close"}
    assert set(_members(CollectorTransport)) == {
        "acquire", "commit", "read_weights", "stop_requested", "learner_alive", "close",
    }


@pytest.mark.parametrize(
    ("protocol", "implementation"),
    [
        (LearnerTransport, LearnerShm),
        (LearnerTransport, LearnerZmq),
        (CollectorTransport, CollectorShm),
        (CollectorTransport, CollectorZmq),
    ],
    ids=["LearnerShm", "LearnerZmq", "CollectorShm", "CollectorZmq"],
)
def test_implementation_has_every_protocol_member_with_the_same_parameters(protocol, implementation):
    """Each Protocol member is a plain method of the implementation (not a property) with the same parameter names."""
    for name, expected in _members(protocol).items():
        attr = inspect.getattr_static(implementation, name, None)
        assert attr is not None, f"{implementation.__name__} lacks {protocol.__name__}.{name}"
        assert inspect.isfunction(attr), f"{implementation.__name__}.{name} is a {type(attr).__name__}, not a method"
        got = inspect.signature(attr)
        assert _parameters(got) == _parameters(expected), (
            f"{implementation.__name__}.{name}{got} differs from {protocol.__name__}.{name}{expected}"
        )
