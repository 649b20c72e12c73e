"""Cluster-autoscaler over-provisioning (scenario option ``overprovisioning``): placeholders
keep warm capacity powered, a pod that fits no Ready node evicts them instead of waiting for
a boot, and the evicted placeholders take the boot."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from scenario_fixtures import drive, tiny_config, train_pod

from dsan.core.filtering import allocate
from dsan.core.snapshot import PodSpec
from dsan.sim.scenario.config import load
from dsan.sim.scenario.engine import Decision, Engine
from dsan.sim.scenario.overprovision import PlaceholderPool
from dsan.sim.scenario.workload import TRAIN, WorkloadBuilder

#: Three 16-core CPU nodes.
CPU3 = {"racks": 1, "zones": 1,
        "node_groups": [{"count": 3, "cpu_milli": 16000, "mem_mib": 65536, "hourly_cost": 1.0}]}
PH = {"pods": 1, "cpu_milli": 8000, "mem_mib": 30000}


def _day(placeholders: int) -> tuple[Engine, dict[str, Any], dict[str, list[int]]]:
    """a (12 cores) at 0 takes node 0, the placeholder node 1 (LeastAllocated: a tie, the
    lowest index); node 2 is empty, so off from 600 s. b (8 cores) at 700 fits node 1 beside
    the placeholder; c (8 cores) at 710 fits no Ready node."""
    cfg = tiny_config(cluster=CPU3, scale_up={"ready_nodes_first": True},
                      overprovisioning={**PH, "pods": placeholders})
    b = WorkloadBuilder(cfg)
    for name, submit, cpu in (("a", 0.0, 12000), ("b", 700.0, 8000), ("c", 710.0, 8000)):
        job = b.job(TRAIN, submit, [1e6], stage_par=[0])
        b.pod(job, PodSpec(name, cpu, 4096, priority=500, task_type=TRAIN, image=0), 0.5, 0.0,
              False)
    seen: list[Decision] = []
    engine = Engine(cfg, 0, workload=b.build())
    out = drive(engine, seen=seen)
    return engine, out, {d.pod.name: [int(n) for n in d.nodes] for d in seen}


def test_a_pod_that_fits_no_ready_node_evicts_a_placeholder_and_starts_without_a_boot() -> None:
    engine, out, offers = _day(1)
    assert offers["a"] == [0, 1, 2]
    assert offers["b"] == [1]  # the placeholder kept node 1 up past the 600 s grace
    assert offers["c"] == [1]  # DefaultPreemption's node: the placeholder's
    c = 2
    assert engine.pod_start[c] - engine.pod_submit[c] == pytest.approx(2.0)  # b pulled the image
    # The evicted placeholder booted node 2 and waits for it there.
    assert out["overprovisioning"] == {"placeholders": 1, "bound": 1, "evictions": 1, "boots": 1}
    assert engine.ph.node.tolist() == [2] and bool(engine.on[2])
    assert engine.boot_done[2] == pytest.approx(710.0 + 90.0)


def test_without_placeholders_the_same_pod_waits_for_the_boot() -> None:
    engine, out, offers = _day(0)
    assert offers["b"] == [1, 2]  # node 1 powered off at 600 s: b boots it
    assert offers["c"] == [1]  # and c waits for that boot (Ready at 790), then b's pull
    assert engine.pod_start[2] - engine.pod_submit[2] == pytest.approx(790.0 + 1.0 + 2.0 - 710.0)
    assert "overprovisioning" not in out


def test_placeholders_are_not_utilisation_and_not_telemetry() -> None:
    """An idle cluster but for the placeholder: billed, yet nothing used."""
    cfg = tiny_config(cluster=CPU3, scale_up={"ready_nodes_first": True}, overprovisioning=PH)
    engine = Engine(cfg, 0, workload=WorkloadBuilder(cfg).build())
    out = drive(engine)
    node = int(engine.ph.node[0])
    assert engine.snap.cpu_used[node] == 8000  # allocated, as the scheduler sees it
    assert out["cpu_util_pct"] == 0.0 and out["mem_util_pct"] == 0.0
    assert out["cost"] > 0
    assert engine.on.tolist() == [i == node for i in range(3)]  # only its node stays up
    assert engine.snap.telemetry is not None
    assert float(engine.snap.telemetry[node, -1, 1]) == 0.0  # memory: a pause pod's


def test_room_picks_the_fewest_evictions_and_respects_the_other_filters() -> None:
    cfg = tiny_config(overprovisioning={"pods": 3, "cpu_milli": 4000, "mem_mib": 1000},
                      scale_up={"ready_nodes_first": True})
    snap = Engine(cfg, 0, workload=WorkloadBuilder(cfg).build()).snap  # nodes 0-1 GPU, 2 CPU
    pool = PlaceholderPool(cfg.overprovisioning, snap)
    ready = np.ones(len(snap), dtype=bool)
    for i in range(3):  # the pool's own rule puts them on the CPU node
        node = pool.target(snap, ready, np.zeros(len(snap)), 0.0)
        assert node == 2
        allocate(snap, pool.spec, node, ())
        pool.bind(i, node, False)
    assert pool.room(PodSpec("x", 8000, 1000), snap, ready) == (2, 1)  # 4 free, +4
    assert pool.room(PodSpec("x", 16000, 1000), snap, ready) == (2, 3)
    assert pool.room(PodSpec("x", 17000, 1000), snap, ready) == (-1, 0)  # never fits
    assert pool.room(train_pod("g"), snap, ready) == (-1, 0)  # needs a GPU: not node 2
    assert pool.room(PodSpec("x", 8000, 1000), snap, ready & (np.arange(3) != 2)) == (-1, 0)
    assert pool.evict(2, 2) == [0, 1] and pool.pending() == [0, 1]
    with pytest.raises(ValueError, match="holds 1 placeholders"):
        pool.evict(2, 2)


@pytest.mark.parametrize(("over", "match"), [
    ({"overprovisioning": PH}, "ready_nodes_first"),
    ({"overprovisioning": {**PH, "pods": -1}}, "pods >= 0"),
    ({"overprovisioning": {**PH, "cpu_milli": 0}}, "cpu_milli"),
    ({"overprovisioning": {**PH, "cpu_milli": 32000},
      "scale_up": {"ready_nodes_first": True}}, "no CPU node group fits"),
    ({"overprovisioning": {**PH, "size": 3}}, "unknown keys"),
])
def test_bad_settings_are_refused_by_name(over: dict[str, Any], match: str) -> None:
    with pytest.raises(ValueError, match=match):
        tiny_config(**over)


def test_the_shipped_scenario_has_no_placeholders() -> None:
    assert load("seed-table1").overprovisioning.pods == 0
