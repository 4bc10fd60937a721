"""The network-namespace lab as a pytest fixture (the lab itself: benchmarks/netlab.py)."""

from __future__ import annotations

import pytest

from benchmarks.netlab import NetLab, netns_available


@pytest.fixture
def netlab():
    """A fresh set of network namespaces on a private bridge; skipped only where ip netns is not permitted."""
    ok, why = netns_available()
    if not ok:
        pytest.skip(why)
    lab = NetLab()
    yield lab
    lab.close()
