from __future__ import annotations

from datetime import UTC, datetime, timedelta

import numpy as np
import numpy.typing as npt
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dsan.core.snapshot import ClusterSnapshot, PodSpec
from dsan.policies.base import Scorer
from sidecar.cache import GraphCache
from sidecar.config import SidecarConfig
from sidecar.scoring import BadNodeRows, NodeRows, NoKnownNodes, ScoringEngine, StaleNodeTable
from tests.support import kubeobjects as ko


class CpuFree(Scorer):
    """Scores by free CPU (a deterministic stand-in for any policy); records its calls and
    the pods it was asked to prepare for."""

    def __init__(self, name: str = "cpu-free", reads_telemetry: bool = False) -> None:
        self.name = name
        self.reads_telemetry = reads_telemetry
        self.calls: list[list[int]] = []
        self.prepared: list[str] = []

    def score(self, pod: PodSpec, snap: ClusterSnapshot,
              nodes: npt.NDArray[np.int64]) -> npt.NDArray[np.float64]:
        self.calls.append(nodes.tolist())
        return (snap.cpu_cap - snap.cpu_used)[nodes]

    def prepare(self, pod: PodSpec, snap: ClusterSnapshot) -> None:
        self.prepared.append(pod.name)


def setup(cpus: list[str], **cfg: object) -> tuple[GraphCache, list[str]]:
    cache = GraphCache(SidecarConfig(**cfg))  # type: ignore[arg-type]
    cache.replace_nodes([ko.node(f"n{i}", cpu=c, gpus=2, model="A100")
                         for i, c in enumerate(cpus)])
    return cache, [f"n{i}" for i in range(len(cpus))]


POD = PodSpec(name="p", cpu_milli=1000, mem_mib=100)


def test_scores_follow_request_order_and_span_the_scale() -> None:
    cache, _ = setup(["2", "8", "4"])
    eng = ScoringEngine(cache, CpuFree(), CpuFree("fb"), 60)
    res = eng.score(POD, ["n2", "n0", "n1"], max_score=10)
    assert res.scores.tolist() == [3, 0, 10]  # (4-2)/(8-2)*10 rounds to 3
    assert res.best == 2 and res.unknown == 0 and res.fallback == 0


def test_unknown_and_infeasible_nodes_score_zero_and_are_not_passed_to_the_scorer() -> None:
    cache, _ = setup(["2", "8", "4"])
    scorer = CpuFree()
    eng = ScoringEngine(cache, scorer, CpuFree("fb"), 60)
    big = PodSpec(name="big", cpu_milli=3000, mem_mib=1)
    res = eng.score(big, ["n0", "ghost", "n1", "n2"])
    assert res.scores.tolist() == [0, 0, 100, 0]
    assert res.unknown == 1
    rows = cache.snapshot().index
    assert scorer.calls == [[rows["n1"], rows["n2"]]]


def test_all_unknown_or_strict_is_an_error_naming_the_nodes() -> None:
    cache, _ = setup(["2"])
    with pytest.raises(NoKnownNodes, match="'x'"):
        ScoringEngine(cache, CpuFree(), CpuFree(), 60).score(POD, ["x", "y"])
    strict = ScoringEngine(cache, CpuFree(), CpuFree(), 60, strict_node_names=True)
    with pytest.raises(NoKnownNodes, match="'ghost'"):
        strict.score(POD, ["n0", "ghost"])


def test_stale_telemetry_nodes_go_to_the_fallback_when_the_policy_reads_telemetry() -> None:
    now = datetime.now(UTC)
    cache, names = setup(["2", "8", "4", "6"], telemetry_stale_s=30.0)
    for name in ("n0", "n1"):
        cache.upsert_telemetry(ko.telemetry(name, util=[[10.0], [20.0]], sampled_at=now))
    primary, fallback = CpuFree("dsan", reads_telemetry=True), CpuFree("fgd")
    eng = ScoringEngine(cache, primary, fallback, 30.0)
    res = eng.score(POD, names)
    rows = cache.snapshot().index
    assert primary.calls == [[rows["n0"], rows["n1"]]]
    assert fallback.calls == [[rows["n2"], rows["n3"]]]
    # Each group is normalised on its own scale; the two tops tie, and n1 < n3 keeps it.
    assert res.scores.tolist() == [0, 100, 0, 99] and res.fallback == 2
    # A heuristic reads no telemetry: no fallback at all.
    heuristic = CpuFree("fgd")
    res = ScoringEngine(cache, heuristic, CpuFree("x"), 30.0).score(POD, names)
    assert res.fallback == 0 and len(heuristic.calls[0]) == 4


def test_equal_scores_go_to_the_lowest_name_and_nan_scores_rank_lowest() -> None:
    cache, names = setup(["4", "4", "4"])

    class Nan(CpuFree):
        def score(self, pod: PodSpec, snap: ClusterSnapshot,
                  nodes: npt.NDArray[np.int64]) -> npt.NDArray[np.float64]:
            return np.array([1.0, np.nan, 2.0])

    res = ScoringEngine(cache, CpuFree(), CpuFree(), 60).score(POD, ["n2", "n0", "n1"])
    assert res.scores.tolist() == [99, 100, 99] and res.best == 1
    assert ScoringEngine(cache, Nan(), CpuFree(), 60).score(POD, names).scores.tolist() == \
        [0, 0, 100]


def test_filter_uses_our_view_and_passes_unknown_nodes() -> None:
    cache, _ = setup(["2", "8"])
    eng = ScoringEngine(cache, CpuFree(), CpuFree(), 60)
    passed, failed = eng.filter(PodSpec(name="p", cpu_milli=4000, mem_mib=1), ["n0", "n1", "new"])
    assert passed == ["n1", "new"] and list(failed) == ["n0"]


def test_filter_applies_the_policys_node_quota_after_feasibility() -> None:
    """DSAN's learned quota (``gpu_reserve``) in the filter verb: a CPU pod may not take a
    GPU node whose GPUs are idle unless that keeps their share of its cores free; GPU pods,
    web pods and CPU nodes are not concerned; an infeasible node keeps its own reason."""
    from dsan.policies.dsan_actions import ActionParams, LearnedController

    cache = GraphCache(SidecarConfig())
    cache.replace_nodes([ko.node("gpu", cpu="8", gpus=2, model="A100"),
                         ko.node("cpu", cpu="8"), ko.node("small", cpu="1")])
    scorer = CpuFree()
    scorer.controller = LearnedController(ActionParams(gpu_reserve=1.0))
    eng = ScoringEngine(cache, scorer, CpuFree(), 60)
    pod = PodSpec(name="spark", cpu_milli=2000, mem_mib=1)
    passed, failed = eng.filter(pod, ["gpu", "cpu", "small", "new"])
    assert passed == ["cpu", "new"]
    assert failed["gpu"].startswith("dsan: the node's quota")
    assert failed["small"].startswith("dsan: insufficient")
    gpu_pod = PodSpec(name="train", cpu_milli=2000, mem_mib=1, num_gpu=1, gpu_milli=1000)
    assert eng.filter(gpu_pod, ["gpu", "cpu"])[0] == ["gpu"]
    web = PodSpec(name="web", cpu_milli=2000, mem_mib=1, task_type=3)
    assert eng.filter(web, ["gpu", "cpu"])[0] == ["gpu", "cpu"]
    # The heuristics' controller allows every feasible node.
    assert ScoringEngine(cache, CpuFree(), CpuFree(), 60).filter(pod, ["gpu", "cpu"])[0] == \
        ["gpu", "cpu"]


def test_filter_keeps_latency_sensitive_nodes_headroom_from_other_pods() -> None:
    """DSAN's ``ls_headroom`` in the filter verb: the cache counts the web replicas bound per
    node (``dsan.io/task-type``), and a pod that is not latency-sensitive, elastic
    (``dsan.io/elastic``) or not, may not fill a node that hosts one past the headroom; a web
    replica may; the replica's deletion lifts it."""
    from dsan.api.types import ANNOTATION_ELASTIC, ANNOTATION_TASK_TYPE
    from dsan.policies.dsan_actions import ActionParams, LearnedController
    from sidecar.podspec import podspec_from_pod

    cache = GraphCache(SidecarConfig())
    cache.replace_nodes([ko.node("a", cpu="16"), ko.node("b", cpu="16")])
    web = ko.pod("web-0", cpu="2", node_name="a", phase="Running",
                 annotations={ANNOTATION_TASK_TYPE: "web"})
    cache.upsert_pod(web)
    cache.upsert_pod(ko.pod("exec-0", cpu="8", node_name="a", phase="Running"))
    scorer = CpuFree()
    scorer.controller = LearnedController(ActionParams(ls_headroom=0.8))
    eng = ScoringEngine(cache, scorer, CpuFree(), 60)
    extra = podspec_from_pod(ko.pod("exec-9", cpu="4", annotations={
        ANNOTATION_ELASTIC: "true", ANNOTATION_TASK_TYPE: "batch"}), {})
    assert extra.elastic
    passed, failed = eng.filter(extra, ["a", "b"])  # a: (2 + 8 + 4) / 16 = 0.875
    assert passed == ["b"] and failed["a"].startswith("dsan: the node's quota")
    core = podspec_from_pod(ko.pod("exec-1", cpu="4"), {})
    assert not core.elastic and eng.filter(core, ["a", "b"])[0] == ["b"]
    web1 = podspec_from_pod(ko.pod("web-1", cpu="4", annotations={ANNOTATION_TASK_TYPE: "web"}),
                            {})
    assert eng.filter(web1, ["a", "b"])[0] == ["a", "b"]
    cache.delete_pod(web)
    assert eng.filter(extra, ["a", "b"])[0] == ["a", "b"]


def test_a_failing_policy_degrades_to_the_fallback_and_is_counted() -> None:
    cache, names = setup(["2", "8", "4"])

    class Broken(CpuFree):
        def score(self, pod: PodSpec, snap: ClusterSnapshot,
                  nodes: npt.NDArray[np.int64]) -> npt.NDArray[np.float64]:
            raise RuntimeError("model file corrupt")

    eng = ScoringEngine(cache, Broken("dsan"), CpuFree("fgd"), 60)
    res = eng.score(POD, names)
    assert res.scores.tolist() == [0, 100, 33] and res.fallback == 3
    assert eng.policy_errors == 1


def test_ties_keep_the_top_for_the_lowest_name_and_the_engine_assumes_it() -> None:
    """Every candidate ties (identical nodes): the lowest name keeps 100, the others get
    99, whatever the request order, by name and by node-table rows; the winner is assumed
    after the reply and the scorer asked to prepare for the next pod like it."""
    cache, _ = setup(["4", "4", "4", "4"])
    scorer = CpuFree()
    eng = ScoringEngine(cache, scorer, CpuFree("fb"), 60)
    res = eng.score(POD, ["n3", "n1", "n2", "n1"], assume="ns/p", defer=True)
    assert res.scores.tolist() == [99, 100, 99, 99] and res.best == 1 and res.winner == "n1"
    assert cache.assumed_count == 0 and scorer.prepared == []
    assert eng.settle() and not eng.settle()
    assert cache.assumed_count == 1 and scorer.prepared == ["p"]
    pub = cache.snapshot()
    assert pub.snap.cpu_used[pub.index["n1"]] == 1000.0
    rows = np.array([pub.index[n] for n in ("n3", "n0", "n2")], dtype=np.int64)
    res = eng.score(POD, NodeRows(rows, pub.table_epoch))
    assert res.winner == "n0" and res.scores.tolist() == [99, 100, 99]


def test_a_pending_assumption_is_applied_by_the_next_request_first() -> None:
    cache, names = setup(["4", "8"])
    eng = ScoringEngine(cache, CpuFree(), CpuFree("fb"), 60)
    big = PodSpec(name="big", cpu_milli=6000, mem_mib=1)
    assert eng.score(big, names, assume="a", defer=True).winner == "n1"
    # n1 is full once the first pod is charged: the second sees it
    res = eng.score(big, names, assume="b", defer=True)
    assert res.best == -1 and res.winner == ""


def test_telemetry_goes_stale_as_the_clock_moves_without_a_republish() -> None:
    """The engine caches the oldest GPU telemetry per publish; time alone must still count."""
    now = datetime.now(UTC)
    cache, names = setup(["2", "8"], telemetry_stale_s=30.0, snapshot_max_age_s=1e9)
    cache.upsert_telemetry(ko.telemetry("n0", util=[[10.0], [20.0]], sampled_at=now))
    cache.upsert_telemetry(ko.telemetry("n1", util=[[10.0], [20.0]],
                                        sampled_at=now - timedelta(seconds=20)))
    wall = [now.timestamp()]
    primary, fallback = CpuFree("dsan", reads_telemetry=True), CpuFree("fgd")
    eng = ScoringEngine(cache, primary, fallback, 30.0, wall=lambda: wall[0])
    pub = cache.snapshot()
    assert eng.score(POD, names).fallback == 0
    wall[0] += 15  # n1's telemetry is 35 s old now, n0's 15 s
    assert eng.score(POD, names).fallback == 1 and fallback.calls[-1] == [pub.index["n1"]]
    wall[0] += 20
    assert eng.score(POD, names).fallback == 2
    assert cache.snapshot() is pub  # the same publish all along


def test_cpu_nodes_without_telemetry_are_not_stale() -> None:
    cache = GraphCache(SidecarConfig())
    cache.replace_nodes([ko.node("cpu", cpu="8"), ko.node("gpu", cpu="4", gpus=1, model="T4")])
    primary, fallback = CpuFree("dsan", reads_telemetry=True), CpuFree("fgd")
    res = ScoringEngine(cache, primary, fallback, 30.0).score(POD, ["cpu", "gpu"])
    rows = cache.snapshot().index
    assert primary.calls == [[rows["cpu"]]] and fallback.calls == [[rows["gpu"]]]
    assert res.fallback == 1


@settings(max_examples=60, deadline=None)
@given(policy=st.sampled_from(["fgd", "k8s-default", "cpu-free"]), data=st.data())
def test_node_table_rows_score_and_assume_exactly_as_names(policy: str,
                                                           data: st.DataObject) -> None:
    """Two engines on two equal caches, one asked by name, one by node-table rows."""
    from dsan.policies.registry import make_scorer

    cpus = data.draw(st.lists(st.sampled_from(["2", "4", "8", "16"]), min_size=2, max_size=8))
    caches = [setup(cpus)[0] for _ in range(2)]
    engines = [ScoringEngine(c, CpuFree() if policy == "cpu-free" else make_scorer(policy),
                             CpuFree("fb"), 60) for c in caches]
    for k in range(3):  # assumptions in between change what the next request sees
        names = data.draw(st.lists(st.sampled_from([f"n{i}" for i in range(len(cpus))]),
                                   min_size=1, max_size=12))
        gpu = data.draw(st.sampled_from([(0, 0), (1, 500), (1, 1000), (2, 1000)]))
        pod = PodSpec(name=f"p{k}", cpu_milli=data.draw(st.sampled_from([500, 1500, 3000])),
                      mem_mib=100, num_gpu=gpu[0], gpu_milli=gpu[1])
        pub = caches[1].snapshot()
        rows = np.array([pub.index[n] for n in names], dtype=np.int64)
        by_name = engines[0].score(pod, names, assume=f"p{k}", defer=k % 2 == 1)
        by_row = engines[1].score(pod, NodeRows(rows, pub.table_epoch), assume=f"p{k}",
                                  defer=k % 2 == 1)
        assert by_row.scores.tolist() == by_name.scores.tolist()
        assert by_row.best == by_name.best
        for e in engines:
            e.settle()
        assert caches[0].assumed_count == caches[1].assumed_count
        s0, s1 = caches[0].snapshot().snap, caches[1].snapshot().snap
        assert s0.cpu_used.tolist() == s1.cpu_used.tolist()
        assert s0.gpu_free.tolist() == s1.gpu_free.tolist()


def test_rows_of_another_table_or_out_of_range_are_refused() -> None:
    cache, _ = setup(["2", "8", "4"])
    eng = ScoringEngine(cache, CpuFree(), CpuFree("fb"), 60)
    epoch = cache.snapshot().table_epoch
    assert eng.score(POD, NodeRows(np.array([1, 0]), epoch)).scores.tolist() == [100, 0]
    with pytest.raises(BadNodeRows):
        eng.score(POD, NodeRows(np.array([0, 3]), epoch))
    with pytest.raises(StaleNodeTable):
        eng.score(POD, NodeRows(np.array([0]), epoch + 1))
    cache.replace_nodes([ko.node("n9", cpu="4", gpus=2, model="A100")])  # new node set
    assert cache.snapshot().table_epoch != epoch
    with pytest.raises(StaleNodeTable):
        eng.score(POD, NodeRows(np.array([0]), epoch))


def test_table_epochs_differ_between_caches_with_the_same_nodes() -> None:
    """A client's table from before a sidecar restart must not match the new process's."""
    assert setup(["2"])[0].snapshot().table_epoch != setup(["2"])[0].snapshot().table_epoch


@settings(max_examples=60, deadline=None)
@given(n=st.integers(1, 12), start=st.integers(0, 11), m=st.integers(0, 14),
       swap=st.booleans(), unknown=st.booleans())
def test_name_rows_with_the_table_equal_the_lookup_of_every_name(
        n: int, start: int, m: int, swap: bool, unknown: bool) -> None:
    """The table's run-in-order fast path gives each name's row, as the per-name lookup
    does: runs from any start (wrapping past the end), runs out of order, repeated and
    unknown names."""
    from sidecar.scoring import name_rows

    table = [f"n{i}" for i in range(n)]
    index = {nm: i for i, nm in enumerate(table)}
    names = [table[(start + j) % n] for j in range(m)]
    if swap and m > 2:
        names[1], names[-1] = names[-1], names[1]
    if unknown and m:
        names[m // 2] = "nope"
    want = np.array([index.get(nm, -1) for nm in names], dtype=np.int64)
    for got, missing in (name_rows(index, names, table), name_rows(index, names)):
        np.testing.assert_array_equal(got, want)
        assert missing == int((want < 0).sum())
