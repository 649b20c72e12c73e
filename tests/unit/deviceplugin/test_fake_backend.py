"""The fake's scripting: what a test can make a GPU do."""

from __future__ import annotations

import numpy as np
import pytest

from deviceplugin.backend import COL, N_FIELDS, BackendUnavailable, EventKind
from deviceplugin.fake import FakeBackend, topology_peers


def test_events_wake_waiters_only_once_watching() -> None:
    b = FakeBackend(4)
    b.inject_xid(1, 79)  # before watch_events: like NVML, nobody registered, nothing queued
    assert b.watch_events()
    assert b.wait_events(0.01) == []
    b.inject_xid(1, 79)
    b.inject_ecc_dbe(2)
    got = b.wait_events(0.5)
    assert [(e.index, e.kind, e.xid) for e in got] == [(1, EventKind.XID, 79),
                                                       (2, EventKind.ECC_DBE, 48)]
    with pytest.raises(IndexError):
        b.inject_xid(9, 79)


def test_ecc_counter_and_removal_show_in_samples() -> None:
    b = FakeBackend(3, topology="nvswitch")
    b.inject_ecc_dbe(0)
    b.inject_ecc_dbe(0)
    out = np.zeros((3, N_FIELDS))
    b.sample(out)
    assert out[:, COL["eccDbeVolatile"]].tolist() == [2, 0, 0]
    b.watch_events()
    b.remove(1)
    assert b.wait_events(0.5)[0].kind is EventKind.LOST
    b.sample(out)
    assert np.isnan(out[1]).all() and not np.isnan(out[0]).any()
    assert [b.check(i) for i in range(3)] == [True, False, True]
    b.restore(1)
    b.sample(out)
    assert not np.isnan(out[1, COL["util"]]) and b.check(1)


def test_unavailable_and_unsupported_events() -> None:
    with pytest.raises(BackendUnavailable):
        FakeBackend(2, unavailable=True).init()
    assert FakeBackend(2, events_supported=False).watch_events() is False


def test_topologies() -> None:
    assert topology_peers("two-quads", 8)[5] == (4, 6, 7)
    assert topology_peers("nvswitch", 3)[0] == (1, 2)
    assert topology_peers("none", 2) == {0: (), 1: ()}
    with pytest.raises(ValueError, match="dgx1"):
        topology_peers("dgx1", 4)
    with pytest.raises(ValueError, match="unknown fake topology"):
        topology_peers("torus", 8)
    explicit = FakeBackend(3, topology={0: [2], 2: [0]}).devices()
    assert [d.nvlink_domain for d in explicit] == [0, None, 0]
