"""Stale telemetry (sidecar.staleness): GPU nodes past the cutoff, feasible ones only, CPU
nodes never; the oldest report is cached per publish, yet the clock alone and a new publish
both count. The engine's use of it (the fallback scores the stale) is test_scoring.py's."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import numpy as np

from sidecar import kubeobjects as ko
from sidecar.cache import GraphCache
from sidecar.config import SidecarConfig
from sidecar.staleness import Staleness


def test_stale_gpu_nodes_by_clock_and_publish() -> None:
    now = datetime.now(UTC)
    cache = GraphCache(SidecarConfig(telemetry_stale_s=30.0))
    cache.replace_nodes([ko.node("cpu", cpu="8"), ko.node("g0", cpu="4", gpus=1, model="T4"),
                         ko.node("g1", cpu="4", gpus=1, model="T4")])
    cache.upsert_telemetry(ko.telemetry("g0", util=[[10.0]], sampled_at=now))
    ago = now - timedelta(seconds=20)
    cache.upsert_telemetry(ko.telemetry("g1", util=[[10.0]], sampled_at=ago))
    pub = cache.snapshot()
    rows = np.array([pub.index[n] for n in ("cpu", "g0", "g1")], dtype=np.int64)
    every = np.ones(3, dtype=bool)
    wall = [now.timestamp()]
    s = Staleness(30.0, lambda: wall[0])
    assert s.mask(pub, rows, every) == (None, 0)  # nothing that old: no mask at all
    wall[0] += 15  # g1's report is 35 s old, g0's 15 s; the CPU node has none, and never counts
    stale, n = s.mask(pub, rows, every)
    assert stale is not None and stale.tolist() == [False, False, True] and n == 1
    stale, n = s.mask(pub, rows, np.array([True, True, False]))  # g1 infeasible: not stale
    assert stale is not None and not stale.any() and n == 0
    wall[0] += 20
    stale, n = s.mask(pub, rows, every)
    assert stale is not None and stale.tolist() == [False, True, True] and n == 2
    later = now + timedelta(seconds=35)
    for name in ("g0", "g1"):
        cache.upsert_telemetry(ko.telemetry(name, util=[[10.0]], sampled_at=later))
    fresh = cache.snapshot()
    assert fresh is not pub
    rows = np.array([fresh.index[n] for n in ("cpu", "g0", "g1")], dtype=np.int64)
    assert s.mask(fresh, rows, every) == (None, 0)  # the new publish's oldest report counts
