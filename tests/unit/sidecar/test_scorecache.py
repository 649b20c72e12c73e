"""The per-pod-class score cache must give exactly the uncached scorer's answer.

A hypothesis state machine of sorts: a random sequence of scoring requests (each assuming
its winner, as the sidecar does), bindings, deletions, telemetry, node additions, capacity
changes and node removals; after every step the cached engine's scores and winner are
compared with a fresh scorer on a copy of the same snapshot.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import numpy as np
import numpy.typing as npt
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dsan.filtering import feasible
from dsan.policies.base import normalize
from dsan.policies.fgd import FGDScorer
from dsan.policies.k8s_default import K8sDefaultScorer
from dsan.snapshot import ClusterSnapshot, PodSpec
from sidecar import kubeobjects as ko
from sidecar.cache import GraphCache
from sidecar.config import SidecarConfig
from sidecar.podspec import podspec_from_pod
from sidecar.scoring import ScoringEngine
from sidecar.tiebreak import NameRank, lowest_name_wins

SCORERS = {"fgd": FGDScorer, "k8s-default": K8sDefaultScorer}

PODS = [  # (cpu, memory, gpus, gpu-milli annotation)
    ("4", "16Gi", 1, "500"),
    ("2", "4Gi", 1, "250"),
    ("8", "32Gi", 2, None),
    ("1", "1Gi", 0, None),
    ("16", "64Gi", 1, None),
]


def pod_obj(i: int, shape: int, node: str | None = None) -> dict[str, Any]:
    cpu, mem, gpus, milli = PODS[shape]
    ann = {"dsan.io/gpu-milli": milli} if milli else {}
    return ko.pod(f"p{i}", cpu=cpu, memory=mem, gpus=gpus, uid=f"uid-{i}", node_name=node,
                  annotations=ann, phase="Running" if node else "Pending")


def reference(policy: str, pod: PodSpec, cache: GraphCache,
              rows: npt.NDArray[np.int64]) -> tuple[list[int], int]:
    """A fresh scorer on a copy of the cache's *live* columns (not the published snapshot,
    which the engine patches in place): what the uncached path computes on a fresh publish."""
    snap = cache.snapshot().snap.copy()
    for col, live in cache._live_columns(len(cache)).items():
        np.copyto(getattr(snap, col), live)
    ok = feasible(pod, snap)[rows]
    out = np.zeros(len(rows), dtype=np.int64)
    if not ok.any():
        return out.tolist(), -1
    out[ok] = normalize(SCORERS[policy]().score(pod, snap, rows[ok]), 100)
    best = int(np.argmax(np.where(ok, out, -1)))
    # One top score: ties go to the lowest node name (sidecar.tiebreak).
    out, best = lowest_name_wins(out, best, rows, NameRank().of(snap.names))
    return out.tolist(), best


SCORE = st.tuples(st.just("score"), st.integers(0, len(PODS) - 1), st.integers(0, 2**16))
op = st.one_of(  # scoring weighted up: back-to-back requests exercise the patched snapshot
    SCORE, SCORE, SCORE,
    st.tuples(st.just("bind"), st.integers(0, len(PODS) - 1), st.integers(0, 2**16)),
    st.tuples(st.just("delete_pod"), st.integers(0, 40), st.integers(0, 0)),
    st.tuples(st.just("telemetry"), st.integers(0, 40), st.integers(0, 100)),
    st.tuples(st.just("add_node"), st.integers(0, 8), st.integers(0, 1)),
    st.tuples(st.just("resize_node"), st.integers(0, 40), st.integers(8, 64)),
    st.tuples(st.just("delete_node"), st.integers(0, 40), st.integers(0, 0)),
)


@pytest.mark.parametrize("policy", sorted(SCORERS))
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(ops=st.lists(op, min_size=1, max_size=30), n=st.integers(2, 12))
def test_cached_scores_equal_a_fresh_scorer_after_any_change(
        policy: str, ops: list[tuple[str, int, int]], n: int) -> None:
    cache = GraphCache(SidecarConfig())
    cache.replace_nodes([ko.node(f"n{i}", cpu=str(8 + 4 * (i % 5)), memory="64Gi",
                                 gpus=(i % 3) * 4, model="A100" if i % 3 else None)
                         for i in range(n)])
    eng = ScoringEngine(cache, SCORERS[policy](), FGDScorer(), 60)
    assert eng._cached
    pods: dict[int, dict[str, Any]] = {}
    extra = 0
    for step, (kind, a, b) in enumerate(ops):
        names = list(cache.snapshot().index)
        if kind == "score" and names:
            obj = pod_obj(1000 + step, a)
            spec = podspec_from_pod(obj, cache.models)
            # Candidates: a rotation of the nodes with one repeated, as a list may come.
            cand = names[b % len(names):] + names[:b % len(names)] + names[:1]
            with cache.scoring_lock:
                pub = cache.snapshot()
                rows = np.array([pub.index[c] for c in cand], dtype=np.int64)
                want, best = reference(policy, spec, cache, rows)
            try:
                res = eng.score(spec, cand, 100, assume=f"uid-{1000 + step}")
            except LookupError:
                continue
            assert res.scores.tolist() == want, (step, kind)
            assert res.best == best
        elif kind == "bind" and names:
            pods[step] = pod_obj(step, a, names[b % len(names)])
            cache.upsert_pod(pods[step])
        elif kind == "delete_pod" and pods:
            key = sorted(pods)[a % len(pods)]
            cache.delete_pod(pods.pop(key))
        elif kind == "telemetry" and names:
            cache.upsert_telemetry(ko.telemetry(names[a % len(names)], util=[[float(b)]],
                                                sampled_at=datetime.now(UTC)))
        elif kind == "add_node":
            extra += 1
            cache.upsert_node(ko.node(f"x{extra}", cpu="16", gpus=a % 9, model="A100"))
        elif kind == "resize_node" and names:
            cache.upsert_node(ko.node(names[a % len(names)], cpu=str(b), gpus=4, model="A100"))
        elif kind == "delete_node" and len(names) > 1:
            cache.delete_node(names[a % len(names)])


def test_only_changed_rows_are_recomputed_and_the_snapshot_stays_current() -> None:
    cache = GraphCache(SidecarConfig())
    cache.replace_nodes([ko.node(f"n{i}", cpu="32", gpus=8, model="A100") for i in range(50)])
    eng = ScoringEngine(cache, FGDScorer(), FGDScorer(), 60)
    names = [f"n{i}" for i in range(50)]
    spec = podspec_from_pod(pod_obj(0, 0), cache.models)
    eng.score(spec, names, 100, assume="a")
    assert eng.classes.rebuilds == 1
    pub = cache.snapshot()
    publishes = cache.stats.publishes
    eng.score(spec, names, 100, assume="b")
    # The assumption was patched into the published snapshot: no republish, one row redone.
    assert cache.snapshot() is not pub and cache.stats.publishes == publishes
    assert eng.classes.rebuilds == 1 and eng.classes.rows_recomputed == 1
    live = cache._live_columns(len(cache))
    snap = cache.snapshot().snap
    for col in ("cpu_used", "mem_used", "gpu_free", "pod_count"):
        assert np.array_equal(getattr(snap, col), live[col]), col


def test_a_scorer_without_cache_key_is_scored_in_full_every_time() -> None:
    class NoKey:
        name = "nokey"

        def __init__(self) -> None:
            self.calls = 0

        def score(self, pod: PodSpec, snap: ClusterSnapshot,
                  nodes: npt.NDArray[np.int64]) -> npt.NDArray[np.float64]:
            self.calls += 1
            return np.asarray(snap.cpu_cap[nodes] - snap.cpu_used[nodes], dtype=np.float64)

        def select_gpus(self, pod: PodSpec, snap: ClusterSnapshot, node: int) -> tuple[int, ...]:
            return ()

    cache = GraphCache(SidecarConfig())
    cache.replace_nodes([ko.node(f"n{i}", cpu="32") for i in range(5)])
    scorer = NoKey()
    eng = ScoringEngine(cache, scorer, FGDScorer(), 60)
    spec = PodSpec("p", 1000, 100)
    for k in range(3):
        eng.score(spec, [f"n{i}" for i in range(5)], 100, assume=f"k{k}")
    assert scorer.calls == 3 and not eng._cached


def test_change_log_trimming_forces_a_rebuild_not_a_wrong_answer() -> None:
    cache = GraphCache(SidecarConfig())
    cache.replace_nodes([ko.node(f"n{i}", cpu="64") for i in range(3)])
    eng = ScoringEngine(cache, K8sDefaultScorer(), FGDScorer(), 60)
    names = ["n0", "n1", "n2"]
    spec = PodSpec("p", 100, 10)
    eng.score(spec, names, 100)
    for i in range(5000):  # far more row writes than the log keeps for 3 nodes
        cache.upsert_pod(ko.pod(f"q{i % 7}", cpu="1", node_name=f"n{i % 3}", phase="Running"))
        cache.delete_pod(ko.pod(f"q{i % 7}"))
    cache.upsert_pod(ko.pod("big", cpu="30", node_name="n1", phase="Running"))
    res = eng.score(spec, names, 100)
    with cache.scoring_lock:
        want, best = reference("k8s-default", spec, cache, np.arange(3, dtype=np.int64))
    assert res.scores.tolist() == want and res.best == best
    assert eng.classes.rebuilds == 2


def test_a_cacheable_scorer_that_fails_degrades_to_the_fallback_then_recovers() -> None:
    class Flaky(K8sDefaultScorer):
        fail = True

        def score_rows(self, pod: PodSpec, snap: ClusterSnapshot,
                       nodes: npt.NDArray[np.int64]) -> npt.NDArray[np.float64]:
            if self.fail:
                raise RuntimeError("boom")
            return super().score_rows(pod, snap, nodes)

        def score(self, pod: PodSpec, snap: ClusterSnapshot,
                  nodes: npt.NDArray[np.int64]) -> npt.NDArray[np.float64]:
            if self.fail:
                raise RuntimeError("boom")
            return super().score(pod, snap, nodes)

    cache = GraphCache(SidecarConfig())
    cache.replace_nodes([ko.node(f"n{i}", cpu=str(4 + 4 * i)) for i in range(3)])
    scorer = Flaky()
    eng = ScoringEngine(cache, scorer, K8sDefaultScorer(), 60)
    spec = PodSpec("p", 1000, 100)
    res = eng.score(spec, ["n0", "n1", "n2"])
    assert res.fallback == 3 and eng.policy_errors == 1 and eng.cache_misses == 1
    scorer.fail = False
    again = eng.score(spec, ["n0", "n1", "n2"])
    assert again.fallback == 0 and again.scores.tolist() == res.scores.tolist()
    assert eng.classes.rebuilds == 1  # the failed build left nothing behind


@pytest.mark.parametrize("policy", sorted(SCORERS))
@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(ops=st.lists(op, min_size=1, max_size=30), n=st.integers(2, 12))
def test_deferred_assumptions_give_the_inline_answers(
        policy: str, ops: list[tuple[str, int, int]], n: int) -> None:
    """Two twin caches see the same events; one engine assumes inline, the other defers
    (as both APIs do) and settles after some replies only: the next request must settle
    it first, so every answer is the inline one. Informer events settle first in the twin:
    they arrive milliseconds after a reply, and charges on one node do not commute (best-fit
    GPU slots), so interleaving them inside that microsecond window is a race either way."""
    nodes = [ko.node(f"n{i}", cpu=str(8 + 4 * (i % 5)), memory="64Gi", gpus=(i % 3) * 4,
                     model="A100" if i % 3 else None) for i in range(n)]
    caches = (GraphCache(SidecarConfig()), GraphCache(SidecarConfig()))
    for c in caches:
        c.replace_nodes(nodes)
    inline, deferred = (ScoringEngine(c, SCORERS[policy](), FGDScorer(), 60) for c in caches)
    pods: dict[int, dict[str, Any]] = {}
    extra = 0
    for step, (kind, a, b) in enumerate(ops):
        names = list(caches[0].snapshot().index)
        if kind == "score" and names:
            obj = pod_obj(1000 + step, a)
            spec = podspec_from_pod(obj, caches[0].models)
            cand = names[b % len(names):] + names[:b % len(names)]
            try:
                want = inline.score(spec, cand, 100, assume=f"uid-{1000 + step}")
            except LookupError:
                continue
            got = deferred.score(spec, cand, 100, assume=f"uid-{1000 + step}", defer=True)
            assert got.scores.tolist() == want.scores.tolist() and got.best == want.best
            if b % 3 == 0:
                deferred.settle()  # the server's post-reply call (else the next request's)
            continue
        deferred.settle()
        for c in caches:
            if kind == "bind" and names:
                pods[step] = pod_obj(step, a, names[b % len(names)])
                c.upsert_pod(pods[step])
            elif kind == "delete_pod" and pods:
                c.delete_pod(pods[sorted(pods)[a % len(pods)]])
            elif kind == "add_node":
                c.upsert_node(ko.node(f"x{extra + 1}", cpu="16", gpus=a % 9, model="A100"))
            elif kind == "resize_node" and names:
                c.upsert_node(ko.node(names[a % len(names)], cpu=str(b), gpus=4, model="A100"))
            elif kind == "delete_node" and len(names) > 1:
                c.delete_node(names[a % len(names)])
        if kind == "delete_pod" and pods:
            pods.pop(sorted(pods)[a % len(pods)])
        extra += kind == "add_node"
    deferred.settle()
    assert caches[1].assumed_count == caches[0].assumed_count


class _Table:
    """A row-separable scorer reading a fixed score per node (NaN, inf, ties allowed)."""

    name = "table"

    def __init__(self, values: list[float]) -> None:
        self.values = np.array(values)

    def cache_key(self, pod: PodSpec) -> object:
        return "t"

    def score(self, pod: PodSpec, snap: ClusterSnapshot,
              nodes: npt.NDArray[np.int64]) -> npt.NDArray[np.float64]:
        return self.values[nodes]

    def select_gpus(self, pod: PodSpec, snap: ClusterSnapshot, node: int) -> tuple[int, ...]:
        return ()


class _TableUncached(_Table):
    cache_key = None  # type: ignore[assignment]  # no key: the engine's general path


@settings(max_examples=150, deadline=None)
@given(data=st.data(), n=st.integers(1, 8), max_score=st.sampled_from([10, 100]))
def test_the_class_fast_path_equals_the_general_path(data: st.DataObject, n: int,
                                                      max_score: int) -> None:
    """Unknown and infeasible candidates, repeats, ties, NaN, +-inf and spans past float64:
    the cached engine's masked-free path answers exactly as the general one."""
    values = data.draw(st.lists(st.sampled_from(
        [0.0, 1.0, 2.0, -3.5, 7.25, np.nan, np.inf, -np.inf, 1e308, -1e308]),
        min_size=n, max_size=n))
    cpus = data.draw(st.lists(st.sampled_from(["2", "8"]), min_size=n, max_size=n))
    names = [f"n{i}" for i in range(n)]
    cand = data.draw(st.lists(st.sampled_from([*names, "ghost"]), min_size=1, max_size=12))
    cache = GraphCache(SidecarConfig())
    cache.replace_nodes([ko.node(nm, cpu=c) for nm, c in zip(names, cpus, strict=True)])
    pod = PodSpec("p", 4000, 100)  # fits only the 8-CPU nodes
    fast = ScoringEngine(cache, _Table(values), FGDScorer(), 60)
    slow = ScoringEngine(cache, _TableUncached(values), FGDScorer(), 60)
    assert fast._cached and not slow._cached
    for _ in range(2):  # built, then served from the entry
        try:
            want = slow.score(pod, cand, max_score)
        except LookupError:
            with pytest.raises(LookupError):
                fast.score(pod, cand, max_score)
            return
        got = fast.score(pod, cand, max_score)
        assert got.scores.tolist() == want.scores.tolist()
        assert (got.best, got.unknown, got.infeasible) == (want.best, want.unknown,
                                                           want.infeasible)


class FreeCpuUncached:
    """A policy scored in full on every request, as DSAN is (no cache key; telemetry left
    out so no node goes to the fallback): the engine's general path, with feasibility from
    its FeasibleCache."""

    name = "free-cpu"
    uses_telemetry = False

    def score(self, pod: PodSpec, snap: ClusterSnapshot,
              nodes: npt.NDArray[np.int64]) -> npt.NDArray[np.float64]:
        return (snap.cpu_cap - snap.cpu_used)[nodes] + 0.001 * snap.gpu_free[nodes].sum(1)

    def select_gpus(self, pod: PodSpec, snap: ClusterSnapshot, node: int) -> tuple[int, ...]:
        return ()


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(ops=st.lists(op, min_size=1, max_size=30), n=st.integers(2, 12),
       defer=st.booleans())
def test_cached_feasibility_equals_a_fresh_check_after_any_change(
        ops: list[tuple[str, int, int]], n: int, defer: bool) -> None:
    cache = GraphCache(SidecarConfig(telemetry_stale_s=1e9))
    cache.replace_nodes([ko.node(f"n{i}", cpu=str(8 + 4 * (i % 5)), memory="64Gi",
                                 gpus=(i % 3) * 4, model="A100" if i % 3 else None)
                         for i in range(n)])
    scorer = FreeCpuUncached()
    eng = ScoringEngine(cache, scorer, FGDScorer(), 1e9)
    assert not eng._cached
    pods: dict[int, dict[str, Any]] = {}
    extra = 0
    for step, (kind, a, b) in enumerate(ops):
        eng.settle()
        names = list(cache.snapshot().index)
        if kind == "score" and names:
            obj = pod_obj(1000 + step, a)
            spec = podspec_from_pod(obj, cache.models)
            cand = names[b % len(names):] + names[:b % len(names)] + names[:1]
            with cache.scoring_lock:
                pub = cache.snapshot()
                rows = np.array([pub.index[c] for c in cand], dtype=np.int64)
                snap = pub.snap.copy()
                for col, live in cache._live_columns(len(cache)).items():
                    np.copyto(getattr(snap, col), live)
                ok = feasible(spec, snap)[rows]
            try:
                res = eng.score(spec, cand, 100, assume=f"uid-{1000 + step}", defer=defer)
            except LookupError:
                continue
            want = np.zeros(len(rows), dtype=np.int64)
            if ok.any():
                want[ok] = normalize(scorer.score(spec, snap, rows[ok]), 100)
                want, _ = lowest_name_wins(want, int(np.argmax(np.where(ok, want, -1))), rows,
                                           NameRank().of(snap.names))
            assert res.scores.tolist() == want.tolist(), (step, kind)
            assert res.infeasible == int((~ok).sum())
        elif kind == "bind" and names:
            pods[step] = pod_obj(step, a, names[b % len(names)])
            cache.upsert_pod(pods[step])
        elif kind == "delete_pod" and pods:
            key = sorted(pods)[a % len(pods)]
            cache.delete_pod(pods.pop(key))
        elif kind == "telemetry" and names:
            cache.upsert_telemetry(ko.telemetry(names[a % len(names)], util=[[float(b)]],
                                                sampled_at=datetime.now(UTC)))
        elif kind == "add_node":
            extra += 1
            cache.upsert_node(ko.node(f"x{extra}", cpu="16", gpus=a % 9, model="A100"))
        elif kind == "resize_node" and names:
            cache.upsert_node(ko.node(names[a % len(names)], cpu=str(b), gpus=4, model="A100"))
        elif kind == "delete_node" and len(names) > 1:
            cache.delete_node(names[a % len(names)])
