"""DSAN through the scoring engine: the engine lets DSAN trust the published snapshot's
version (``trust_snapshot_versions``: GraphCache bumps it with every in-place write), and
that must never change an answer. Twin engines on twin caches fed the same informer events,
one DSAN trusting, one not, give the same scores and winners request after request."""

from __future__ import annotations

import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import numpy as np
import numpy.typing as npt
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dsan import rowkernel
from dsan.features import default_workload
from dsan.model import headscan, heldreply
from dsan.model.export import DEFAULT_DIR, load
from dsan.model.serving import ServingModel
from dsan.policies import dsan as dsan_policy
from dsan.policies import logitscale
from dsan.policies.dsan import DSANScorer
from dsan.snapshot import ClusterSnapshot, PodSpec
from sidecar import kubeobjects as ko
from sidecar.cache import GraphCache
from sidecar.config import SidecarConfig
from sidecar.podspec import podspec_from_pod
from sidecar.scoring import ScoringEngine

MODEL, _ = load(DEFAULT_DIR)
NODES = ko.cluster(10, seed=3)
NAMES = [n["metadata"]["name"] for n in NODES]


class Untrusting:
    """A DSAN scorer without ``trust_snapshot_versions``: its row tracker diffs every call."""

    name = "dsan"
    uses_telemetry = True

    def __init__(self) -> None:
        self.inner = DSANScorer(ServingModel(MODEL, default_workload()))

    def score(self, pod: PodSpec, snap: ClusterSnapshot,
              nodes: npt.NDArray[np.int64]) -> npt.NDArray[np.float64]:
        return self.inner.score(pod, snap, nodes)

    def after_assume(self, pod: PodSpec, snap: ClusterSnapshot, node: int,
                     feasible: npt.NDArray[np.bool_] | None = None) -> None:
        self.inner.after_assume(pod, snap, node, feasible)

    def select_gpus(self, pod: PodSpec, snap: ClusterSnapshot, node: int) -> tuple[int, ...]:
        return self.inner.select_gpus(pod, snap, node)


NOW = datetime.now(UTC)


def _cache(clock: Callable[[], float] = time.monotonic) -> GraphCache:
    # A fixed wall clock: telemetry ages (and so DSAN's answers) stay put while the test
    # runs, so hypothesis replays the same example.
    cache = GraphCache(SidecarConfig(telemetry_stale_s=1e9), clock=clock,
                       wall=lambda: NOW.timestamp() + 5)
    cache.replace_nodes(NODES)
    now = NOW
    for i, node in enumerate(NODES):
        if node["status"]["allocatable"].get("nvidia.com/gpu"):
            cache.upsert_telemetry(ko.telemetry(node["metadata"]["name"], sampled_at=now,
                                                util=[[float((i * 7 + g) % 100)] * 4
                                                      for g in range(8)]))
    return cache


POD_SHAPES = [
    {"cpu": "4", "memory": "16Gi", "gpus": 1, "annotations": {"dsan.io/gpu-milli": "500"}},
    {"cpu": "2", "memory": "4Gi", "gpus": 1},
    {"cpu": "8", "memory": "32Gi"},
]


@settings(max_examples=12, deadline=None)
@given(data=st.data())
def test_trusting_dsan_answers_as_an_untrusting_one(data: st.DataObject) -> None:
    caches = [_cache(), _cache()]
    trusting = DSANScorer(ServingModel(MODEL, default_workload()))
    engines = [ScoringEngine(caches[0], trusting, Untrusting(), 1e9),
               ScoringEngine(caches[1], Untrusting(), Untrusting(), 1e9)]
    assert trusting.serving.head is not None and trusting.serving.head.trust_versions
    bound: list[dict[str, Any]] = []
    for k in range(10):
        shape = POD_SHAPES[data.draw(st.integers(0, len(POD_SHAPES) - 1))]
        obj = ko.pod(f"p{k}", uid=f"u{k}", **shape)  # type: ignore[arg-type]
        spec = podspec_from_pod(obj, caches[0].models)
        start = data.draw(st.integers(0, len(NAMES) - 1))
        names = (NAMES[start:] + NAMES[:start])[: data.draw(st.integers(1, len(NAMES)))]
        defer, settle = data.draw(st.booleans()), data.draw(st.booleans())
        event = data.draw(st.sampled_from(["none", "bind", "delete", "node"]))
        where = NAMES[data.draw(st.integers(0, len(NAMES) - 1))]
        got = [e.score(spec, names, assume=f"default/p{k}", defer=defer) for e in engines]
        assert got[0].scores.tolist() == got[1].scores.tolist()
        assert got[0].best == got[1].best
        if settle:  # the reply left: settle now (else the next request does)
            for e in engines:
                e.settle()
        if event == "bind":  # the pod shows up bound, wherever it landed
            obj = ko.pod(f"p{k}", uid=f"u{k}", node_name=where, phase="Running",
                         **shape)  # type: ignore[arg-type]
            bound.append(obj)
            for c in caches:
                c.upsert_pod(obj)
        elif event == "delete" and bound:
            gone = bound.pop(0)
            for c in caches:
                c.delete_pod(gone)
        elif event == "node":  # a capacity change under a live row
            node = dict(NODES[NAMES.index(where)])
            node["status"] = {"allocatable": {**node["status"]["allocatable"], "cpu": "48"}}
            for c in caches:
                c.upsert_node(node)


class Unscaled:
    """DSAN without ``score_scaled``: the engine normalises its quantized logits and takes
    the argmax itself (the general path's reference)."""

    name = "dsan"
    uses_telemetry = True

    def __init__(self) -> None:
        self.inner = DSANScorer(ServingModel(MODEL, default_workload()))
        self.trust_snapshot_versions = self.inner.trust_snapshot_versions
        self.note_changes = self.inner.note_changes
        self.after_assume = self.inner.after_assume
        self.select_gpus = self.inner.select_gpus

    def score(self, pod: PodSpec, snap: ClusterSnapshot,
              nodes: npt.NDArray[np.int64]) -> npt.NDArray[np.float64]:
        return self.inner.score(pod, snap, nodes)


def _aged_cache(old: list[int]) -> GraphCache:
    """_cache()'s nodes, the GPU nodes at ``old`` with telemetry 100 s older than the rest."""
    cache = GraphCache(SidecarConfig(telemetry_stale_s=1e9), wall=lambda: NOW.timestamp() + 5)
    cache.replace_nodes(NODES)
    for i, node in enumerate(NODES):
        if node["status"]["allocatable"].get("nvidia.com/gpu"):
            at = NOW - timedelta(seconds=100 if i in old else 0)
            cache.upsert_telemetry(ko.telemetry(node["metadata"]["name"], sampled_at=at,
                                                util=[[float((i * 7 + g) % 100)] * 4
                                                      for g in range(8)]))
    return cache


@settings(max_examples=15, deadline=None)
@given(data=st.data())
def test_one_pass_scaling_answers_as_the_general_path(data: st.DataObject) -> None:
    """DSANScorer.score_scaled (taken when every candidate is known, feasible and fresh)
    gives the general path's scores, winner and counts, request after request, with
    unknown, infeasible (GPU pods on CPU nodes, a 48-CPU pod on 32-CPU nodes) and stale
    candidates mixed in."""
    old = data.draw(st.lists(st.sampled_from([0, 2, 4, 6, 8]), max_size=3))
    stale_s = data.draw(st.sampled_from([30.0, 1e9]))
    caches = [_aged_cache(old), _aged_cache(old)]
    wall = lambda: NOW.timestamp() + 5  # noqa: E731
    scaled = DSANScorer(ServingModel(MODEL, default_workload()))
    engines = [ScoringEngine(caches[0], scaled, Untrusting(), stale_s, wall=wall),
               ScoringEngine(caches[1], Unscaled(), Untrusting(), stale_s, wall=wall)]
    assert engines[0]._score_scaled is not None and engines[1]._score_scaled is None
    assert scaled.serving._fixed_weights  # the engine's promise: it never writes them
    shapes = [*POD_SHAPES, {"cpu": "48", "memory": "16Gi"}]
    gpu_nodes = NAMES[::2]
    for k in range(8):
        shape = shapes[data.draw(st.integers(0, len(shapes) - 1))]
        spec = podspec_from_pod(ko.pod(f"p{k}", uid=f"u{k}", **shape),  # type: ignore[arg-type]
                                caches[0].models)
        pool = data.draw(st.sampled_from([NAMES, gpu_nodes]))
        names = data.draw(st.lists(st.sampled_from(pool), min_size=1, max_size=len(pool),
                                   unique=True))
        for _ in range(data.draw(st.integers(0, 2))):  # names the cache never heard of
            names.insert(data.draw(st.integers(0, len(names))), f"ghost-{k}-{len(names)}")
        _same_answer(engines, spec, names, f"default/p{k}")
    assert engines[0].policy_errors == engines[1].policy_errors == 0


@pytest.mark.skipif(not (logitscale.compiled and headscan.compiled and heldreply.compiled
                         and rowkernel.compiled),
                    reason="dsan._logitscale / _headscan / _heldreply / _rowkernel not built "
                           "(no C compiler)")
def test_the_one_pass_reply_and_its_settle_stay_in_the_c_twins(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A C twin hands arrays of another dtype or layout to numpy without a word (that hid a
    numpy settle for two sessions): DSAN's one-pass replies (quantise, scale, winner), its
    replies from held logits, and their settles (the changed rows' features, the head on
    them) must reach the C twins."""
    fell_back: list[str] = []
    for mod, name in ((logitscale, "scale_py"), (headscan, "request_rows_py"),
                      (headscan, "few_head_py"), (headscan, "head_logits_py"),
                      (heldreply, "held_py"),
                      (rowkernel, "fill_rows_py")):
        twin = getattr(mod, name)

        def spy(*a: object, _twin: Any = twin, _name: str = name, **kw: object) -> object:
            fell_back.append(_name)
            return _twin(*a, **kw)

        monkeypatch.setattr(mod, name, spy)
    served: list[int] = []
    c_twin = dsan_policy.scale

    def count(*a: object) -> object:
        served.append(1)
        return c_twin(*a)

    monkeypatch.setattr(dsan_policy, "scale", count)
    held: list[bool] = []
    monkeypatch.setattr(heldreply, "reply", _answers(heldreply.reply, held))
    cache = _cache()
    engine = ScoringEngine(cache, DSANScorer(ServingModel(MODEL, default_workload())),
                           Untrusting(), 1e9, wall=lambda: NOW.timestamp() + 5)
    for k in range(12):  # two classes in turn, then one (its replies from the held logits)
        shape = POD_SHAPES[k % 2] if k < 6 else POD_SHAPES[0]
        spec = podspec_from_pod(ko.pod(f"p{k}", uid=f"u{k}", **shape),  # type: ignore[arg-type]
                                cache.models)
        res = engine.score(spec, NAMES[::2], assume=f"default/p{k}", defer=True)
        assert res.best >= 0
        engine.settle()
    assert len(served) + sum(held) == 12 and engine.policy_errors == 0
    assert sum(held) >= 3
    assert fell_back == []


def _same_answer(engines: list[ScoringEngine], spec: PodSpec, names: list[str],
                 key: str) -> None:
    """Both engines score ``names`` for ``spec`` alike (scores, winner, counts), then settle."""
    got = [e.score(spec, names, assume=key, defer=True) for e in engines]
    assert got[0].scores.tolist() == got[1].scores.tolist()
    assert (got[0].best, got[0].unknown, got[0].infeasible, got[0].fallback) == \
        (got[1].best, got[1].unknown, got[1].infeasible, got[1].fallback)
    for e in engines:
        e.settle()
        e.warm()  # the replay, where an engine has one (the service's order)


def _answers(fn: Callable[..., Any], seen: list[bool]) -> Callable[..., Any]:
    """``fn``, recording for each call whether it answered (not None)."""
    def spy(*a: Any) -> Any:
        got = fn(*a)
        seen.append(got is not None)
        return got

    return spy


class Unheld(Unscaled):
    """DSAN with ``score_scaled`` but without ``score_held``: the one-pass general path."""

    def __init__(self) -> None:
        super().__init__()
        self.score_scaled = self.inner.score_scaled


@settings(max_examples=10, deadline=None)
@given(data=st.data())
def test_the_held_reply_answers_as_the_general_path(data: st.DataObject) -> None:
    """Pods of one class in a row, as kube-scheduler sends a ReplicaSet's, each reply
    settled before the next: DSAN answers from the logits its class holds
    (DSANScorer.score_held), and gives what the engine without that path gives; a
    rotated, shortened or ghost-bearing list, or a bound pod in between, may send a
    request down the general path, never to another answer."""
    # A fixed monotonic clock too: on a loaded machine a slow example would otherwise see
    # the published snapshot's age run out and a republish between two requests.
    caches = [_cache(lambda: 0.0), _cache(lambda: 0.0)]
    held = DSANScorer(ServingModel(MODEL, default_workload()))
    engines = [ScoringEngine(caches[0], held, Untrusting(), 1e9),
               ScoringEngine(caches[1], Unheld(), Untrusting(), 1e9)]
    assert engines[0]._score_held is not None and engines[1]._score_held is None
    served: list[bool] = []
    engines[0]._score_held = _answers(held.score_held, served)
    shape = POD_SHAPES[data.draw(st.integers(0, 1))]
    for k in range(16):  # drawn lists, then four plain ones (their replies must be held)
        spec = podspec_from_pod(ko.pod(f"p{k}", uid=f"u{k}", **shape),  # type: ignore[arg-type]
                                caches[0].models)
        start = data.draw(st.integers(0, len(NAMES) - 1))
        names = NAMES[start:] + NAMES[:start]
        change = data.draw(st.sampled_from(["none", "none", "short", "ghost", "bind"])) \
            if k < 12 else "none"
        if change == "short":
            names = names[: data.draw(st.integers(1, len(names)))]
        elif change == "ghost":
            names = [*names, f"ghost-{k}"]
        _same_answer(engines, spec, names, f"default/p{k}")
        if change == "bind":
            obj = ko.pod(f"b{k}", uid=f"b{k}", node_name=NAMES[k % len(NAMES)],
                         phase="Running", **shape)  # type: ignore[arg-type]
            for c in caches:
                c.upsert_pod(obj)
    assert engines[0].policy_errors == engines[1].policy_errors == 0
    assert served[-3:] == [True] * 3  # the path is taken, not only offered


def test_the_settle_hands_the_scorer_its_feasibility_of_every_node() -> None:
    """The settle passes DSAN's after_assume the engine's cached feasibility (which
    headcache.follow reads instead of checking the changed rows again): for the pod just
    assumed, on the snapshot the hook gets, exactly dsan.filtering.feasible's mask."""
    from dsan.filtering import feasible

    cache = _cache()
    scorer = DSANScorer(ServingModel(MODEL, default_workload()))
    engine = ScoringEngine(cache, scorer, Untrusting(), 1e9)
    seen: list[bool] = []
    inner = scorer.after_assume

    def hook(pod: PodSpec, snap: ClusterSnapshot, node: int,
             ok: npt.NDArray[np.bool_] | None = None) -> None:
        assert ok is not None
        seen.append(bool(np.array_equal(ok, feasible(pod, snap))))
        inner(pod, snap, node, ok)

    engine._after_assume = hook
    for k in range(8):
        shape = POD_SHAPES[k % len(POD_SHAPES)]
        spec = podspec_from_pod(ko.pod(f"p{k}", uid=f"u{k}", **shape),  # type: ignore[arg-type]
                                cache.models)
        engine.score(spec, NAMES, assume=f"default/p{k}", defer=True)
        assert engine.settle()
    assert seen == [True] * 8


def test_the_warm_replay_after_a_settle_changes_no_answer_and_runs_only_there() -> None:
    """``warm_reply_max_nodes``: warm() replays the held reply of the request settle() settled on
    its candidates (read-only: the answers of an engine without it are the same, request
    after request), once per settle() and never when the next request applies the deferred
    assumption itself (that would put the replay on a reply's path)."""
    caches = [_cache(lambda: 0.0), _cache(lambda: 0.0)]
    engines = [ScoringEngine(c, DSANScorer(ServingModel(MODEL, default_workload())),
                             Untrusting(), 1e9, warm_reply_max_nodes=most)
               for c, most in zip(caches, (len(NAMES), 0), strict=True)]
    calls: list[bool] = []
    engines[0]._score_held = _answers(engines[0]._score_held, calls)
    for k in range(10):
        spec = podspec_from_pod(ko.pod(f"p{k}", uid=f"u{k}", **POD_SHAPES[0]),  # type: ignore[arg-type]
                                caches[0].models)
        names = NAMES[k:] + NAMES[:k]
        before = len(calls)
        _same_answer(engines, spec, names, f"default/p{k}")
        assert len(calls) - before == 2  # the request, then the replay in settle()
    assert calls[-2:] == [True, True]  # the replay took the held path, as the request did
    # The next request settles the previous one's assumption itself: no replay then.
    specs = [podspec_from_pod(ko.pod(f"q{k}", uid=f"q{k}", **POD_SHAPES[0]),  # type: ignore[arg-type]
                              caches[0].models) for k in range(2)]
    engines[0].score(specs[0], NAMES, assume="default/q0", defer=True)
    before = len(calls)
    engines[0].score(specs[1], NAMES, assume="default/q1", defer=True)
    engines[0].warm()
    assert len(calls) - before == 1 and engines[0].settled_by_next == 1
    assert engines[0].settle() and len(calls) - before == 1
    engines[0].warm()
    assert len(calls) - before == 2
    engines[0].warm()  # once per settle()
    assert len(calls) - before == 2
    # A list longer than warm_reply_max_nodes is not replayed.
    engines[0].warm_reply_max_nodes = len(NAMES) - 1
    engines[0].score(specs[0], NAMES, assume="default/q2", defer=True)
    assert engines[0].settle()
    engines[0].warm()
    assert len(calls) - before == 3
    assert engines[0].warm_errors == 0


def test_a_failing_warm_replay_is_counted_and_the_next_reply_still_answers() -> None:
    cache = _cache(lambda: 0.0)
    engine = ScoringEngine(cache, DSANScorer(ServingModel(MODEL, default_workload())),
                           Untrusting(), 1e9, warm_reply_max_nodes=256)
    feed = engine._feed
    replaying = [False]

    def broken(pub: Any) -> None:  # the scorer's feed, which the replay catches up first
        if replaying[0]:
            raise RuntimeError("replay broke")
        feed(pub)

    engine._feed = broken  # type: ignore[assignment]
    replay = engine._warm

    def marked(*a: Any) -> None:
        replaying[0] = True
        try:
            replay(*a)
        finally:
            replaying[0] = False

    engine._warm = marked  # type: ignore[method-assign]
    for k in range(3):
        spec = podspec_from_pod(ko.pod(f"p{k}", uid=f"u{k}", **POD_SHAPES[0]),  # type: ignore[arg-type]
                                cache.models)
        res = engine.score(spec, NAMES, assume=f"default/p{k}", defer=True)
        assert res.best >= 0
        assert engine.settle()
        engine.warm()  # the assumption stands although the replay raised
    assert engine.warm_errors == 3 and cache.assumed_count == 3


def test_the_service_replays_last_and_a_scrape_still_sees_every_settle() -> None:
    """ScoringService.settle runs the replay after the metrics (so nothing cools what it
    warmed) and queues its own time for the next settle; /metrics settles first and so
    still counts every settle, the last one included."""
    import re

    from sidecar.metrics import SidecarMetrics
    from sidecar.service import PolicyInfo, ScoringService

    cache = _cache(lambda: 0.0)
    engine = ScoringEngine(cache, DSANScorer(ServingModel(MODEL, default_workload())),
                           Untrusting(), 1e9, warm_reply_max_nodes=256)
    calls: list[bool] = []
    assert engine._score_held is not None
    engine._score_held = _answers(engine._score_held, calls)
    service = ScoringService(cache, None, engine, SidecarMetrics(),  # type: ignore[arg-type]
                             PolicyInfo("dsan", "test", "fgd"))
    for k in range(5):
        spec = podspec_from_pod(ko.pod(f"p{k}", uid=f"u{k}", **POD_SHAPES[0]),  # type: ignore[arg-type]
                                cache.models)
        service.score("inprocess", spec, f"default/p{k}", NAMES, 100, defer=True)
        service.settle()
    assert len(calls) == 10 and calls[-1]  # each settle replayed its request's reply
    # With the caller's next request already there, the replay would only delay it.
    spec = podspec_from_pod(ko.pod("p5", uid="u5", **POD_SHAPES[0]),  # type: ignore[arg-type]
                            cache.models)
    service.score("inprocess", spec, "default/p5", NAMES, 100, defer=True)
    service.settle(lambda: True)
    assert len(calls) == 11 and engine.replays_skipped == 1 and service.settles == 6
    text = service.exposition().decode()
    count = re.search(r"^dsan_sidecar_settle_seconds_count(?:\{[^}]*\})? (\S+)$", text, re.M)
    assert count is not None and float(count.group(1)) == 6 == service.settles
