from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import numpy as np
import numpy.typing as npt
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dsan.filtering import feasible
from dsan.policies import rowscale
from dsan.policies.base import normalize
from dsan.snapshot import ClusterSnapshot, PodSpec
from sidecar import classpaths
from sidecar import kubeobjects as ko
from sidecar.cache import GraphCache
from sidecar.candidates import BadNodeRows, NodeRows, NoKnownNodes, StaleNodeTable
from sidecar.config import SidecarConfig
from sidecar.scoring import ScoringEngine


class CpuFree:
    """Scores by free CPU (a deterministic stand-in for any policy); records its calls."""

    def __init__(self, name: str = "cpu-free", uses_telemetry: bool = False) -> None:
        self.name = name
        self.uses_telemetry = uses_telemetry
        self.calls: list[list[int]] = []

    def score(self, pod: PodSpec, snap: ClusterSnapshot,
              nodes: npt.NDArray[np.int64]) -> npt.NDArray[np.float64]:
        self.calls.append(nodes.tolist())
        return (snap.cpu_cap - snap.cpu_used)[nodes]

    def select_gpus(self, pod: PodSpec, snap: ClusterSnapshot, node: int) -> tuple[int, ...]:
        return ()


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
    assert (res.unknown, res.infeasible) == (1, 1)
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
    primary, fallback = CpuFree("dsan", uses_telemetry=True), CpuFree("fgd")
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


class Scaled(CpuFree):
    """CpuFree with the one-pass ``score_scaled`` (as DSAN has); ``broken`` raises there."""

    def __init__(self, name: str = "cpu-free", broken: bool = False) -> None:
        super().__init__(name)
        self.broken = broken
        self.scaled: list[list[int]] = []

    def score_scaled(self, pod: PodSpec, snap: ClusterSnapshot, nodes: npt.NDArray[np.int64],
                     max_score: int) -> tuple[npt.NDArray[np.int64], int]:
        self.scaled.append(nodes.tolist())
        if self.broken:
            raise RuntimeError("model file corrupt")
        out = normalize(self.score(pod, snap, nodes), max_score)
        return out, int(out.argmax())


def test_one_pass_scaling_unless_candidates_go_to_the_fallback() -> None:
    cache, names = setup(["2", "8", "4"])
    scorer = Scaled()
    eng = ScoringEngine(cache, scorer, CpuFree("fgd"), 60)
    res = eng.score(POD, names)
    assert scorer.scaled == [[0, 1, 2]] and res.scores.tolist() == [0, 100, 33] and res.best == 1
    big = PodSpec(name="p", cpu_milli=3000, mem_mib=100)  # n0 cannot host it
    res = eng.score(POD, ["n2", "ghost", "n0"])  # scaled over the known ones, scattered back
    assert scorer.scaled[-1] == [2, 0] and res.scores.tolist() == [100, 0, 0] and res.best == 0
    res = eng.score(big, names)
    assert scorer.scaled[-1] == [1, 2] and res.scores.tolist() == [0, 100, 0] and res.best == 1
    # A negative scale could rank an infeasible node's -1 first: the general path decides.
    res = eng.score(big, ["n0", "n2", "n1"], max_score=-10)
    assert len(scorer.scaled) == 3 and res.scores.tolist() == [0, 0, -10] and res.best == 1
    broken = Scaled("dsan", broken=True)
    eng = ScoringEngine(cache, broken, CpuFree("fgd"), 60)
    res = eng.score(POD, names)
    assert res.scores.tolist() == [0, 100, 33] and res.best == 1 and res.fallback == 3
    assert eng.policy_errors == 1


def test_settle_brings_the_served_classs_feasibility_up_to_date() -> None:
    """The deferred assumption's settle re-checks the winner's row for the pod's feasibility
    class, so the next reply of that class finds nothing to update."""
    cache, names = setup(["2", "8", "4"])
    eng = ScoringEngine(cache, CpuFree(), CpuFree("fb"), 60)
    before = cache.snapshot().changes
    eng.score(POD, names, assume="default/p", defer=True)
    assert eng.settle()
    pub = cache.snapshot()
    (mask,) = eng.feasibility._masks.values()
    assert pub.changes != before and mask.changes == pub.changes
    assert mask.ok.tolist() == feasible(POD, pub.snap).tolist()


def test_telemetry_goes_stale_as_the_clock_moves_without_a_republish() -> None:
    """The engine caches the oldest GPU telemetry per publish; time alone must still count."""
    now = datetime.now(UTC)
    cache, names = setup(["2", "8"], telemetry_stale_s=30.0, snapshot_max_age_s=1e9)
    cache.upsert_telemetry(ko.telemetry("n0", util=[[10.0], [20.0]], sampled_at=now))
    cache.upsert_telemetry(ko.telemetry("n1", util=[[10.0], [20.0]],
                                        sampled_at=now - timedelta(seconds=20)))
    wall = [now.timestamp()]
    primary, fallback = CpuFree("dsan", uses_telemetry=True), CpuFree("fgd")
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
    primary, fallback = CpuFree("dsan", uses_telemetry=True), CpuFree("fgd")
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
        assert by_row.best == by_name.best and by_row.infeasible == by_name.infeasible
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


@pytest.mark.skipif(not rowscale.compiled, reason="dsan._rowscale not built (no C compiler)")
@pytest.mark.parametrize("policy", ["fgd", "k8s-default"])
def test_the_class_path_reply_stays_in_the_c_twin(policy: str,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """The C twin hands arrays of another dtype or layout to numpy without a word (session 9
    found a settle served by numpy that way for two sessions): the class path's requests,
    by name and by node-table rows, with unknown and infeasible candidates, must not."""
    from dsan.policies.registry import make_scorer

    fell_back: list[int] = []
    served: list[int] = []
    monkeypatch.setattr(rowscale, "scale_rows_py", _recording(rowscale.scale_rows_py, fell_back))
    monkeypatch.setattr(classpaths, "scale_rows", _recording(classpaths.scale_rows, served))
    cache, names = setup(["2", "8", "4", "16", "1"])
    eng = ScoringEngine(cache, make_scorer(policy), CpuFree("fb"), 60)
    big = PodSpec(name="big", cpu_milli=3000, mem_mib=1)
    for k, pod in enumerate((POD, big, POD, big)):
        pub = cache.snapshot()
        rows = np.array([pub.index[n] for n in names[::-1]], dtype=np.int64)
        for req in ([*names, "gone"], NodeRows(rows, pub.table_epoch), names[1:3]):
            res = eng.score(pod, req, assume=f"p{k}", defer=True)
            assert res.best >= 0
            eng.settle()
    assert eng.cache_misses == 0
    assert len(served) == 12  # every request took the class path
    assert fell_back == []


def _recording(fn: Any, calls: list[int]) -> Any:
    """``fn``, noting each call in ``calls``."""
    def wrapper(*a: object) -> object:
        calls.append(1)
        return fn(*a)
    return wrapper

