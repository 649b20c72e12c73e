"""The boot-aware variants of the packing teacher (bench/scenario_teachers.py): ``anchored``
spreads web over the large nodes and prefers powered, then booting nodes; ``anchored-gpufill``
fills the fullest powered GPU node first; ``packing-rescue`` takes an emptied powered node
first and boots the largest."""

from __future__ import annotations

import numpy as np
import pytest

from bench.scenario_teachers import (
    Anchored,
    AnchoredGpuFill,
    PackingRescue,
    gpu_allocated,
    powered,
)
from dsan.api.types import TASK_TYPES
from dsan.core.filtering import allocate
from dsan.core.snapshot import ClusterSnapshot, PodSpec
from dsan.sim.scenario.cluster import build_cluster
from dsan.sim.scenario.config import load as load_scenario
from dsan.train.teachers import Composite

CFG = load_scenario("seed-table1")


def _snap() -> ClusterSnapshot:
    return build_cluster(CFG.cluster, CFG.metrics.telemetry_len)


def _pod(kind: str, cpu: float = 4000.0, gpus: int = 0) -> PodSpec:
    return PodSpec(
        "p",
        cpu,
        8192.0,
        num_gpu=gpus,
        gpu_milli=1000 if gpus else 0,
        task_type=TASK_TYPES.index(kind),
        image=2,
    )


def _train_on(snap: ClusterSnapshot, node: int, slots: tuple[int, ...]) -> None:
    for g in slots:
        allocate(
            snap, PodSpec("w", 11300.0, 48128.0, num_gpu=1, gpu_milli=1000, task_type=1), node, (g,)
        )


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


def test_anchored_gpu_pods_score_as_composite() -> None:
    snap = _snap()
    cand = np.flatnonzero(snap.gpu_count > 0)
    pod = _pod("train", 11300.0, gpus=1)
    assert np.array_equal(
        Anchored(None).score(pod, snap, cand), Composite(None).score(pod, snap, cand)
    )
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


def test_gpu_pods_fill_the_fullest_powered_gpu_node_first() -> None:
    snap = _snap()
    gpu = np.flatnonzero(snap.gpu_count > 0)
    one, two, empty = (int(i) for i in gpu[:3])
    _train_on(snap, one, (0,))
    _train_on(snap, two, (0, 1))
    np.testing.assert_allclose(gpu_allocated(snap, np.array([one, two, empty])), [0.25, 0.5, 0.0])
    assert gpu_allocated(snap, np.flatnonzero(snap.gpu_count == 0)).max() == 0.0
    pod = _pod("train", 11300.0, gpus=1)
    cand = np.array([empty, one, two], dtype=np.int64)
    t = AnchoredGpuFill(None, spread_drivers=True)
    s = t.score(pod, snap, cand)
    assert cand[np.argmax(s)] == two
    assert s[2] > s[1] > s[0]  # fuller first; a partly used node beats an empty (off) one


def test_cpu_pods_score_exactly_as_anchored_drivers() -> None:
    snap = _snap()
    assert snap.pod_count is not None
    cpu = np.flatnonzero(snap.gpu_count == 0)
    snap.pod_count[cpu[:30]] = 1
    snap.cpu_used[cpu[:30]] = np.linspace(0, 30000, 30)
    ref = Anchored(None, spread_drivers=True)
    new = AnchoredGpuFill(None, spread_drivers=True)
    for pod in (_pod("web", 2000.0), _pod("batch"), _pod("batch", 8000.0)):
        assert np.array_equal(new.score(pod, snap, cpu), ref.score(pod, snap, cpu))


def test_packing_rescue_takes_an_emptied_powered_node_first_and_boots_the_largest() -> None:
    snap = _snap()
    assert snap.pod_count is not None and snap.images is not None
    cpu = np.flatnonzero(snap.gpu_count == 0)
    off16 = int(cpu[snap.cpu_cap[cpu] == 16000][0])
    off64 = int(cpu[snap.cpu_cap[cpu] == 64000][0])
    busy, emptied = (int(i) for i in cpu[snap.cpu_cap[cpu] == 32000][:2])
    allocate(snap, _pod("batch", 16000.0), busy, ())
    snap.images[emptied] = frozenset({2})  # in its grace period: no pod, a warm image cache
    assert powered(snap)[[off16, off64, busy, emptied]].tolist() == [False, False, True, True]
    cand = np.array([off16, off64, busy, emptied], dtype=np.int64)
    pack, rescue = Composite(None), PackingRescue(None)
    batch = _pod("batch")
    p, r = pack.score(batch, snap, cand), rescue.score(batch, snap, cand)
    assert cand[np.argsort(-p)].tolist() == [busy, emptied, off16, off64]  # the fullest first
    assert cand[np.argsort(-r)].tolist() == [emptied, busy, off64, off16]
    # on a powered node the two differ by the rescue term alone
    np.testing.assert_allclose((r - p)[2:], [0.0, 50.0])
    for pod in (_pod("web", 2000.0), _pod("train", 11300.0, gpus=1)):  # not theirs to change
        assert np.array_equal(rescue.score(pod, snap, cand), pack.score(pod, snap, cand))
