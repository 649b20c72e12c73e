"""The boot-aware ``anchored`` teacher of the scenario stage."""

from __future__ import annotations

import numpy as np
import pytest

from dsan.api.types import TASK_TYPES
from dsan.core.snapshot import ClusterSnapshot, PodSpec
from dsan.sim.scenario.cluster import build_cluster
from dsan.sim.scenario.config import load as load_scenario
from dsan.train.scenario_train import ScenarioArgs
from dsan.train.teachers import SCENARIO_TEACHERS, Anchored, Composite

CFG = load_scenario("seed-table1")


def _snap() -> ClusterSnapshot:
    return build_cluster(CFG.cluster, CFG.metrics.telemetry_len)


def _pod(kind: str, cpu: float = 4000.0, gpus: int = 0) -> PodSpec:
    return PodSpec("p", cpu, 8192.0, num_gpu=gpus, task_type=TASK_TYPES.index(kind), image=2)


def test_anchored_spreads_web_one_per_large_node_first() -> None:
    snap = _snap()
    assert snap.pod_count is not None
    t = Anchored(None)
    cpu = np.flatnonzero(snap.gpu_count == 0)
    placed = []
    for _ in range(5):  # place five replicas, each on the teacher's best node
        s = t.score(_pod("web", 2000.0), snap, cpu)
        node = int(cpu[np.argmax(s)])
        placed.append(node)
        snap.pod_count[node] += 1
        snap.cpu_used[node] += 2000.0
    assert len(set(placed)) == 5  # one per node, not packed
    assert all(snap.cpu_cap[n] == 64000 for n in placed)  # largest first
    small = cpu[snap.cpu_cap[cpu] == 16000]
    # A small node never wins while a home node (>= 32 cores) is free and cool.
    assert np.max(t.score(_pod("web", 2000.0), snap, small)) < np.max(
        t.score(_pod("web", 2000.0), snap, cpu)
    )


def test_anchored_prefers_powered_then_booting_then_off() -> None:
    snap = _snap()
    assert snap.pod_count is not None and snap.telemetry is not None and snap.images is not None
    big = np.flatnonzero((snap.cpu_cap == 64000) & (snap.gpu_count == 0))
    on, booting, off, hot_home = (int(i) for i in big[:4])
    snap.pod_count[[on, booting, hot_home]] = 1
    snap.cpu_used[[on, booting]] = 8000.0
    snap.telemetry[on, -1, :2] = (0.2, 0.1)  # running pods use CPU
    snap.telemetry[booting, -1, :2] = (0.0, 0.1)  # bound pods, nothing running yet
    snap.images[on] = frozenset({2})
    snap.cpu_used[hot_home] = 50000.0  # 54 of 64 cores after the pod: over 0.8, hosts web
    snap.telemetry[hot_home, -1, :2] = (0.8, 0.5)
    t = Anchored(None)
    cand = np.array([off, booting, on, hot_home], dtype=np.int64)
    s = t.score(_pod("batch"), snap, cand)
    assert cand[np.argmax(s)] == on
    assert s[1] > s[0]  # a booting node (rest of the boot) beats a cold one (the whole boot)
    # Boot avoidance comes first: a powered node that hosts web is filled past the
    # threshold rather than a cold node booted (one replica per node keeps the SLO miss to
    # one replica of a service); but a powered node that stays cool beats it.
    assert s[3] > s[0] and s[2] > s[3]
    # Without telemetry the booting node cannot be told apart: it counts as powered.
    snap.telemetry = None
    s2 = t.score(_pod("batch"), snap, cand)
    assert s2[1] > s[1]


def test_anchored_gpu_pods_score_as_composite_and_names_resolve() -> None:
    snap = _snap()
    cand = np.flatnonzero(snap.gpu_count > 0)
    pod = _pod("train", 11300.0, gpus=1)
    assert np.array_equal(
        Anchored(None).score(pod, snap, cand), Composite(None).score(pod, snap, cand)
    )
    assert SCENARIO_TEACHERS["anchored"] is Anchored
    with pytest.raises(ValueError):
        ScenarioArgs(scenario_teacher="nope")
    with pytest.raises(ValueError):
        Anchored(None, booting=2.0)


def test_anchored_spread_drivers_keeps_an_emptied_node_on() -> None:
    snap = _snap()
    assert snap.pod_count is not None and snap.images is not None
    big = np.flatnonzero((snap.cpu_cap == 64000) & (snap.gpu_count == 0))
    busy, emptied = int(big[0]), int(big[1])
    snap.pod_count[busy] = 6
    snap.cpu_used[busy] = 20000.0
    snap.images[busy] = frozenset({2})
    snap.images[emptied] = frozenset({2})  # no pods left, still powered (grace period)
    driver = PodSpec("d", 1000.0, 4096.0, task_type=TASK_TYPES.index("batch"), priority=400)
    cand = np.array([busy, emptied], dtype=np.int64)
    assert cand[np.argmax(Anchored(None, spread_drivers=True).score(driver, snap, cand))] == emptied
    # Without the option the driver packs like any CPU pod (tau 0 spreads by fill, so use 1).
    assert cand[np.argmax(Anchored(None, tau=1.0).score(driver, snap, cand))] == busy
