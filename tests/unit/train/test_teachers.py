"""The scenario stage's GPU-filling and boot-rescuing teachers (``anchored-gpufill``,
``packing-rescue``) and the registry the scenario trainer reads."""

from __future__ import annotations

import numpy as np

from dsan.api.types import TASK_TYPES
from dsan.core.filtering import allocate
from dsan.core.snapshot import ClusterSnapshot, PodSpec
from dsan.sim.scenario.cluster import build_cluster
from dsan.sim.scenario.config import load as load_scenario
from dsan.train.scenario_train import ScenarioArgs
from dsan.train.teachers import (
    SCENARIO_TEACHERS,
    Anchored,
    AnchoredGpuFill,
    Composite,
    PackingRescue,
    gpu_allocated,
    powered,
)

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


def test_the_trainer_accepts_every_registered_teacher() -> None:
    for name, make in SCENARIO_TEACHERS.items():
        assert ScenarioArgs(scenario_teacher=name).scenario_teacher == name
        assert isinstance(make(None), Composite)
    assert isinstance(SCENARIO_TEACHERS["anchored-gpufill"](None), AnchoredGpuFill)


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
    t = SCENARIO_TEACHERS["anchored-gpufill"](None)
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
    new = SCENARIO_TEACHERS["anchored-gpufill"](None)
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
    pack, rescue = Composite(None), SCENARIO_TEACHERS["packing-rescue"](None)
    assert isinstance(rescue, PackingRescue)
    batch = _pod("batch")
    p, r = pack.score(batch, snap, cand), rescue.score(batch, snap, cand)
    assert cand[np.argsort(-p)].tolist() == [busy, emptied, off16, off64]  # the fullest first
    assert cand[np.argsort(-r)].tolist() == [emptied, busy, off64, off16]
    # on a powered node the two differ by the rescue term alone
    np.testing.assert_allclose((r - p)[2:], [0.0, 50.0])
    for pod in (_pod("web", 2000.0), _pod("train", 11300.0, gpus=1)):  # not theirs to change
        assert np.array_equal(rescue.score(pod, snap, cand), pack.score(pod, snap, cand))
