"""The GPUTelemetry writer: summary content, retries with capped backoff, bounded memory."""

from __future__ import annotations

import random
import tracemalloc

import numpy as np

from deviceplugin.backend import EventKind, GPUEvent
from deviceplugin.config import PluginConfig
from deviceplugin.crwriter import FakeTelemetryStore, TelemetryWriter, build_summary
from deviceplugin.fake import FakeBackend
from deviceplugin.resources import ResourceManager
from deviceplugin.sampler import TelemetrySampler
from dsan.api import telemetry as tm


def _parts(n: int = 4) -> tuple[ResourceManager, TelemetrySampler]:
    b = FakeBackend(n, util_curve=lambda t: np.full(n, 40.0))
    devs = b.devices()
    m = ResourceManager(devs, [0] * n, PluginConfig(node_name="n"))
    s = TelemetrySampler(b, n, interval_s=1.0, window_s=10, horizon_s=300)
    for _ in range(3):
        s.sample_once()
    return m, s


def test_summary_carries_identity_health_and_windows() -> None:
    m, s = _parts()
    m.apply_events([GPUEvent(2, EventKind.XID, 48)])
    obj = build_summary("node-7", m, s, available=True)
    assert obj.node_name == "node-7" and len(obj.gpus) == 4
    assert obj.statuses[2].health == tm.UNHEALTHY and obj.statuses[2].last_xid == 48
    assert obj.statuses[0].series("util") == (40.0,)
    # It survives its own wire format.
    assert tm.GPUTelemetry.from_dict(obj.to_dict()).statuses[2].health_reason == "Xid 48"


def test_degraded_summary_has_no_series() -> None:
    obj = build_summary("node-0", None, None, available=False, reason="no driver")
    assert obj.available is False and obj.reason == "no driver" and obj.statuses == ()


def test_failures_back_off_then_recover() -> None:
    m, s = _parts()
    store = FakeTelemetryStore()
    store.fail_next = 3
    w = TelemetryWriter(store, lambda: build_summary("n", m, s, available=True),
                        interval_s=1.0, backoff_max_s=3.0, rng=random.Random(0))
    delays = []
    for _ in range(4):
        w.write_once()
        delays.append(w.next_delay())
    assert [w.writes, w.failures, store.calls] == [1, 0, 4]
    assert "ConnectionError" in w.last_error
    # 1 s, 2 s, 3 s (capped) halved-to-full jitter, then the plain interval again.
    assert 0.5 <= delays[0] <= 1.0 and 1.0 <= delays[1] <= 2.0 and 1.5 <= delays[2] <= 3.0
    assert delays[3] == 1.0
    assert store.get("n") is not None


def test_long_outage_does_not_grow_memory() -> None:
    m, s = _parts(8)
    store = FakeTelemetryStore()
    store.fail_next = 10**9
    w = TelemetryWriter(store, lambda: build_summary("n", m, s, available=True))
    for _ in range(20):  # warm-up: caches, interned strings
        w.write_once()
    tracemalloc.start()
    before = tracemalloc.take_snapshot()
    for _ in range(300):
        w.write_once()
    after = tracemalloc.take_snapshot()
    tracemalloc.stop()
    growth = sum(st.size_diff for st in after.compare_to(before, "filename"))
    assert w.failures == 320 and growth < 64 * 1024, growth
