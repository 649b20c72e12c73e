"""``score_rows`` (the sidecar's re-scoring of a few changed nodes) equals ``score``.

FGD's goes through a memo of node states and one joint node_frag call; k8s-default's does up
to 8 rows in Python scalars. Both must give the vectorised path's exact floats, on any node
state, including over-committed nodes, CPU-only nodes, empty pods and unusual GPU models.
"""

from __future__ import annotations

from collections import Counter

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from dsan.policies.fgd import FGDScorer
from dsan.policies.k8s_default import K8sDefaultScorer
from dsan.policies.target import TargetWorkload
from dsan.snapshot import MAX_GPUS, ClusterSnapshot, PodSpec, empty_snapshot

SHARES = st.sampled_from([0, 100, 250, 500, 750, 1000])
#: A target whose shapes ask for GPU models, so a node's model changes its fragment.
MODEL_TARGET = TargetWorkload.from_counts(Counter({(4000, 500, 1, ("A100",)): 5,
                                                   (8000, 1000, 1, ()): 3,
                                                   (2000, 250, 1, ("V100", "T4")): 2}))


@st.composite
def snapshots(draw: st.DrawFn) -> ClusterSnapshot:
    n = draw(st.integers(1, 12))
    # Few distinct values, so nodes in equal states but with other models meet in the memo.
    counts = draw(st.lists(st.sampled_from([0, 1, 2, MAX_GPUS]), min_size=n, max_size=n))
    count = np.array(counts)
    free = np.zeros((n, MAX_GPUS), dtype=np.int32)
    for i in range(n):
        free[i, : counts[i]] = draw(st.lists(SHARES, min_size=counts[i], max_size=counts[i]))
    cpu_cap = np.array(draw(st.lists(st.sampled_from([1000.0, 8000.0, 32000.0, 96000.0]),
                                     min_size=n, max_size=n)))
    mem_cap = np.array(draw(st.lists(st.sampled_from([1024.0, 65536.0, 262144.0, 1536.5]),
                                     min_size=n, max_size=n)))
    frac = st.one_of(st.sampled_from([0.0, 0.5, 1.25]),  # > 1: over-committed (stale view)
                     st.floats(0, 1.3, allow_nan=False))
    cpu_used = cpu_cap * np.array(draw(st.lists(frac, min_size=n, max_size=n)))
    mem_used = mem_cap * np.array(draw(st.lists(frac, min_size=n, max_size=n)))
    models = ["A100", "V100", "T4"]
    model = np.where(count > 0, np.array(draw(st.lists(st.integers(0, 2), min_size=n,
                                                        max_size=n))), -1).astype(np.int32)
    return ClusterSnapshot(
        names=[f"n{i}" for i in range(n)], cpu_cap=cpu_cap, cpu_used=np.floor(cpu_used),
        mem_cap=mem_cap, mem_used=mem_used, gpu_count=count.astype(np.int32),
        gpu_model=model, gpu_free=free, gpu_models=models)


pods = st.builds(
    lambda cpu, mem, k, milli: PodSpec("p", cpu, mem, k if milli else 0, milli if k else 0),
    st.sampled_from([0.0, 100.0, 4000.0, 16000.0]), st.sampled_from([0.0, 200.0, 16384.0]),
    st.integers(0, 2), SHARES)


@settings(max_examples=60, deadline=None)
@given(snap=snapshots(), pod=pods, data=st.data())
def test_score_rows_equals_score(snap: ClusterSnapshot, pod: PodSpec, data: st.DataObject) -> None:
    rows = np.array(data.draw(st.lists(st.integers(0, len(snap) - 1), min_size=1,
                                       max_size=10)), dtype=np.int64)
    for make in (FGDScorer, K8sDefaultScorer, lambda: FGDScorer(MODEL_TARGET)):
        scorer = make()
        want = make().score(pod, snap, rows)
        got = scorer.score_rows(pod, snap, rows)
        assert got.tolist() == want.tolist(), make
        assert scorer.score_rows(pod, snap, rows).tolist() == want.tolist()  # memo hits


def test_fgd_memo_tells_equal_nodes_with_other_gpu_models_apart() -> None:
    snap = empty_snapshot(["a", "b", "c"], [32000] * 3, [65536] * 3, [2, 2, 2], [0, 1, 2],
                          ["A100", "V100", "T4"])
    snap.gpu_free[:, :2] = [500, 250]  # same state everywhere, only the model differs
    for milli in (250, 500):
        pod = PodSpec("p", 1000, 10, 1, milli)
        want = FGDScorer(MODEL_TARGET).score(pod, snap, np.arange(3))
        assert len(set(want.tolist())) > 1  # the model matters for this target
        scorer = FGDScorer(MODEL_TARGET)
        for row in (0, 1, 2):
            assert scorer.score_rows(pod, snap, np.array([row])).tolist() == [want[row]]
