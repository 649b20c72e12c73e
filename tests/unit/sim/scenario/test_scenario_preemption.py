"""Preemption: fits the preemptor, evicts only reclaimable lower-priority pods."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st
from scenario_fixtures import drive, train_pod

from dsan.core.snapshot import PodSpec, empty_snapshot
from dsan.sim.scenario import preemption
from dsan.sim.scenario.engine import Engine
from dsan.sim.scenario.workload import BE, TRAIN


def _bound(rows: Sequence[tuple[object, ...]]) -> preemption.Bound:
    a = np.array(rows, dtype=object)
    return preemption.Bound(
        node=a[:, 0].astype(np.int64),
        cpu=a[:, 1].astype(float),
        mem=a[:, 2].astype(float),
        gpu_milli=a[:, 3].astype(np.int64),
        gslot=a[:, 4].astype(np.int64),
        prio=a[:, 5].astype(np.int64),
        start=a[:, 6].astype(float),
        reclaimable=a[:, 7].astype(bool),
        # type "other", nothing lost, not elastic: these tests look only at priorities
        task=np.zeros(len(a), dtype=np.int64),
        lost_s=np.zeros(len(a)),
        elastic=np.zeros(len(a), dtype=bool),
    )


def test_plan_picks_lowest_priority_victims() -> None:
    snap = empty_snapshot(["n0", "n1"], [4000, 4000], [8192, 8192], [0, 0], [-1, -1], [])
    # n0: a prio-50 pod (2 cores) and a prio-0 pod (2 cores); n1: two prio-50 pods.
    rows = [
        (0, 2000, 1024, 0, -1, 50, 1.0, True),
        (0, 2000, 1024, 0, -1, 0, 2.0, True),
        (1, 2000, 1024, 0, -1, 50, 1.0, True),
        (1, 2000, 1024, 0, -1, 50, 2.0, True),
    ]
    for r in rows:
        snap.cpu_used[r[0]] += r[1]
        snap.mem_used[r[0]] += r[2]
    pod = PodSpec("p", 2000, 1024, priority=100)
    # n0 needs only the prio-0 victim; n1 would need a prio-50 one: kube picks n0.
    assert preemption.plan([pod], snap, _bound(rows)) == [1]


def test_plan_refuses_when_only_higher_or_protected_pods() -> None:
    snap = empty_snapshot(["n0"], [4000], [8192], [0], [-1], [])
    snap.cpu_used[0] = 4000
    rows = [(0, 2000, 0, 0, -1, 200, 0.0, True), (0, 2000, 0, 0, -1, 0, 0.0, False)]
    assert preemption.plan([PodSpec("p", 1000, 0, priority=100)], snap, _bound(rows)) is None


def test_a_node_the_quota_refuses_is_neither_taken_nor_a_candidate() -> None:
    """n0 has room but the policy's quota refuses it (kube-scheduler's Filter): the pod does
    not take it without victims, as a plan ignoring the quota would ([]: nothing to evict, so
    the pod waited forever), but preempts on n1; with n1 refused too it waits."""
    snap = empty_snapshot(["n0", "n1", "n2"], [4000] * 3, [8192] * 3, [0] * 3, [-1] * 3, [])
    snap.cpu_used[:] = [0, 4000, 4000]
    rows = [(1, 4000, 0, 0, -1, 0, 0.0, True), (2, 4000, 0, 0, -1, 50, 0.0, True)]
    pod = PodSpec("p", 2000, 1024, priority=100)
    assert preemption.plan([pod], snap, _bound(rows)) == []
    only_full = np.array([False, True, True])
    assert preemption.plan([pod], snap, _bound(rows), allowed=lambda p: only_full) == [0]
    only_n2 = np.array([False, False, True])
    assert preemption.plan([pod], snap, _bound(rows), allowed=lambda p: only_n2) == [1]
    assert preemption.plan([pod], snap, _bound(rows),
                           allowed=lambda p: np.zeros(3, dtype=bool)) is None


def test_gang_plan_is_all_or_nothing() -> None:
    snap = empty_snapshot(["g0"], [64000], [262144], [2], [0], ["A100"])
    snap.gpu_free[0, :2] = 0  # GPU 0: a best-effort pod; GPU 1: a protected training worker
    snap.cpu_used[0] = 2000
    rows = [(0, 1000, 0, 1000, 0, 0, 0.0, True), (0, 1000, 0, 1000, 1, 500, 0.0, False)]
    gang = [train_pod("w0", 2), train_pod("w1", 2)]
    assert preemption.plan(gang, snap, _bound(rows)) is None  # only one GPU can be freed
    assert preemption.plan(gang[:1], snap, _bound(rows)) == [0]


@settings(max_examples=60, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.integers(0, 2),
            st.sampled_from([500, 1000, 1500]),
            st.sampled_from([0, 100, 400, 500, 1000]),
            st.booleans(),
        ),
        min_size=1,
        max_size=12,
    ),
    st.sampled_from([100, 400, 500, 1000]),
    st.sampled_from([500, 1500, 3000]),
)
def test_never_evicts_higher_or_equal_priority(pods, prio, need) -> None:
    snap = empty_snapshot(["a", "b", "c"], [3000] * 3, [8192] * 3, [0] * 3, [-1] * 3, [])
    rows = []
    for node, cpu, p, rec in pods:
        if snap.cpu_used[node] + cpu > snap.cpu_cap[node]:
            continue
        snap.cpu_used[node] += cpu
        rows.append((node, cpu, 0, 0, -1, p, 0.0, rec))
    if not rows:
        return
    b = _bound(rows)
    pod = PodSpec("p", need, 0, priority=prio)
    victims = preemption.plan([pod], snap, b)
    if victims is None:
        return
    assert all(b.prio[v] < prio and b.reclaimable[v] for v in victims)
    freed = np.bincount(b.node[victims], weights=b.cpu[victims], minlength=3)
    assert (snap.cpu_cap - snap.cpu_used + freed >= need).any()


def test_engine_reclaims_best_effort_for_training(cfg, builder) -> None:
    # Eight best-effort pods hold 600 milli on each of the 8 GPUs; a training pod arrives.
    for i in range(8):
        j = builder.job(BE, 0.0, [5000.0], stage_par=[0])
        builder.pod(
            j,
            PodSpec(
                f"be{i}", 1000, 1024, num_gpu=1, gpu_milli=600, priority=0, task_type=BE, image=1
            ),
            0.5,
            0.5,
            True,
        )
    t = builder.job(TRAIN, 20.0, [100.0], stage_par=[0])
    builder.pod(t, train_pod("t"), 0.6, 0.9, False)
    eng = Engine(cfg, 0, workload=builder.build())
    out = drive(eng)
    assert out["preemptions"] == 1
    assert eng.pod_bind[t.pods[0]] == 20.0
    # the evicted notebook waits (every GPU has 400 free) until the training job ends
    assert out["queueing_by_kind"]["besteffort"]["events"] == 0  # its first bind was at 0
    assert out["jct_by_kind_s"]["training"] > 100.0
