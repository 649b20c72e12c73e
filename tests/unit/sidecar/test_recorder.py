"""Events and annotations for the pods the dsan-scheduler bound: what the informer hook
reports, what is written (with the fake writer), the token bucket, the bounded queue, and
failures counted and logged once per reason. ``check_writer_contract`` runs against the fake
here and against a real kube-apiserver in tests/e2e/test_dsan_explain.py."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Any

import pytest

from dsan.api import types as t
from sidecar.cache import GraphCache
from sidecar.config import SidecarConfig
from sidecar.recorder import (
    NOTE_MAX_BYTES,
    Binding,
    ClusterWriter,
    Recorder,
    TokenBucket,
    WriteError,
    event_of,
)
from tests.support import kubeobjects as ko
from tests.support.fakes import FakeClusterView, FakeClusterWriter, idle
from tests.unit.sidecar.decisionworld import World, world

# --- the informer hook ---------------------------------------------------------------------


def hooked(pods: list[dict[str, Any]] | None = None) -> tuple[GraphCache, FakeClusterView,
                                                               list[tuple[str, ...]]]:
    cache = GraphCache(SidecarConfig())
    seen: list[tuple[str, ...]] = []
    cache.on_bound = lambda *a: seen.append(a)
    view = FakeClusterView(cache, nodes=[ko.node("n1"), ko.node("n2")], pods=pods)
    view.start()
    return cache, view, seen


def test_a_pod_seen_pending_for_our_scheduler_then_bound_is_reported_once() -> None:
    _, view, seen = hooked()
    view.apply("pods", "ADDED", ko.pod("p", namespace="ns", uid="u1"))
    assert seen == []
    view.apply("pods", "MODIFIED", ko.pod("p", namespace="ns", uid="u1", node_name="n1"))
    view.apply("pods", "MODIFIED", ko.pod("p", namespace="ns", uid="u1", node_name="n1",
                                          phase="Running"))  # a status update
    assert seen == [("ns", "p", "u1", "n1")]


def test_pods_of_other_schedulers_and_pods_bound_before_are_not_reported() -> None:
    other = ko.pod("o", uid="u2")
    other["spec"]["schedulerName"] = "default-scheduler"
    _, view, seen = hooked(pods=[ko.pod("old", uid="u3", node_name="n1")])
    view.apply("pods", "ADDED", other)
    bound = ko.pod("o", uid="u2", node_name="n2")
    bound["spec"]["schedulerName"] = "default-scheduler"
    view.apply("pods", "MODIFIED", bound)
    assert seen == []


def test_a_relist_reports_the_pods_bound_while_the_watch_was_down() -> None:
    cache, view, seen = hooked()
    view.apply("pods", "ADDED", ko.pod("p", uid="u1"))
    view.apply("pods", "ADDED", ko.pod("q", uid="u2"))
    cache.replace_pods([ko.pod("p", uid="u1", node_name="n2"), ko.pod("q", uid="u2")])
    assert seen == [("default", "p", "u1", "n2")]
    view.apply("pods", "MODIFIED", ko.pod("q", uid="u2", node_name="n1"))
    assert seen[-1] == ("default", "q", "u2", "n1")


# --- what gets written -----------------------------------------------------------------------


def recorded(w: World, writer: FakeClusterWriter, qps: float = 1000.0,
             burst: int = 1000) -> Recorder:
    rec = Recorder(writer, w.decisions, "sidecar-0", qps, burst, 100)
    w.cache.on_bound = rec.offer
    rec.start()
    return rec


def test_a_scored_pod_gets_an_event_naming_winner_runner_up_and_policy_and_an_annotation(
) -> None:
    w, writer = world(), FakeClusterWriter()
    rec = recorded(w, writer)
    try:
        w.create("p", cpu="4", memory="16Gi", gpus=1)
        res = w.score("p")
        w.bind("p", res.winner)
        assert idle(rec, 5)
    finally:
        rec.stop()
    d = w.decisions.get("default/p")
    assert d is not None and d.bound_node == res.winner and d.uid == "uid-p"
    [(ns, ev)] = writer.events
    assert ns == "default" and ev["reason"] == t.EVENT_REASON_SCORED
    assert ev["regarding"] == {"apiVersion": "v1", "kind": "Pod", "namespace": "default",
                               "name": "p", "uid": "uid-p"}
    note = ev["note"]
    assert f"best {res.winner} 10/10" in note and f"runner-up {d.name_at(d.runner_up())}" in note
    assert d.policy in note and d.policy.startswith("dsan@") and f"bound to {res.winner}" in note
    assert writer.annotations[("default", "p")] == {t.ANNOTATION_SCORED_BY: d.policy}
    assert rec.recorded == {"event": 1, "annotation": 1}


def test_a_pod_scored_before_the_informer_showed_it_is_assumed_and_reported_once_it_does(
) -> None:
    """kube-scheduler usually asks before the sidecar's watch delivers the pod: the decision
    is held, then charged and remembered when the pod shows up pending."""
    w, writer = world(), FakeClusterWriter()
    rec = recorded(w, writer)
    try:
        w.create("p", seen=False, cpu="4", memory="16Gi", gpus=1)
        res = w.score("p")
        assert w.service.assumed_count == 0 and w.decisions.get("default/p") is None
        assert w.service.assume_skipped["not_pending"] == 1
        w.see("p")
        assert w.service.assumed_count == 1
        assert w.service.metrics.decisions.counts == {res.winner: 1}
        w.bind("p", res.winner)
        assert idle(rec, 5)
    finally:
        rec.stop()
    assert w.cache.assumptions_ended["bound"] == 1
    [(_, ev)] = writer.events
    assert ev["reason"] == t.EVENT_REASON_SCORED and f"best {res.winner}" in ev["note"]


def test_a_pod_the_informer_shows_while_it_is_scored_is_assumed_once() -> None:
    w = world()
    w.create("p", seen=False, cpu="1")
    score = w.engine.score

    def score_while_the_informer_delivers(*args: Any, **kw: Any) -> Any:
        res = score(*args, **kw)
        w.see("p")  # after the service asked may_assume, before it held the decision
        return res

    w.engine.score = score_while_the_informer_delivers  # type: ignore[method-assign]
    res = w.score("p")
    assert w.service.assumed_count == 1
    assert w.service.metrics.decisions.counts == {res.winner: 1}


def test_a_held_decision_is_never_charged_for_a_pod_that_is_not_ours_or_too_old() -> None:
    w = world()
    w.decisions.held_max_age_s = 0.0
    w.create("late", seen=False, cpu="1")
    w.score("late")
    time.sleep(0.01)
    w.see("late")  # older than held_max_age_s: kube-scheduler has moved on
    other = w.create("other", seen=False, cpu="1")
    other["spec"]["schedulerName"] = "default-scheduler"
    w.score("other")
    w.see("other")
    assert w.service.assumed_count == 0 and not w.service.metrics.decisions.counts


def test_a_pod_bound_without_a_score_says_so() -> None:
    w, writer = world(), FakeClusterWriter()
    rec = recorded(w, writer)
    try:
        w.create("p", cpu="4", memory="16Gi")
        w.bind("p", "node-00001")  # one feasible node: kube-scheduler asked nobody
        assert idle(rec, 5)
    finally:
        rec.stop()
    [(_, ev)] = writer.events
    assert ev["reason"] == t.EVENT_REASON_NOT_SCORED and "did not score" in ev["note"]
    assert writer.annotations[("default", "p")] == {t.ANNOTATION_SCORED_BY: t.NOT_SCORED}


def test_a_decision_about_an_earlier_pod_of_the_same_name_is_not_used() -> None:
    w, writer = world(), FakeClusterWriter()
    rec = recorded(w, writer)
    try:
        w.create("p", cpu="4", memory="16Gi")
        w.score("p")
        w.view.apply("pods", "DELETED", w.pods["p"])
        w.view.apply("pods", "ADDED", ko.pod("p", uid="uid-new", cpu="4", memory="16Gi"))
        w.view.apply("pods", "MODIFIED", ko.pod("p", uid="uid-new", cpu="4", memory="16Gi",
                                                 node_name="node-00003"))
        assert idle(rec, 5)
    finally:
        rec.stop()
    assert [ev["reason"] for _, ev in writer.events] == [t.EVENT_REASON_NOT_SCORED]


def test_the_event_fits_the_api_limits() -> None:
    b = Binding("ns", "p" * 253, "u", "n" * 253, 1.0e9)
    ev = event_of(b, None, "i" * 300, b.at)
    assert len(ev["metadata"]["name"]) <= 253 and not ev["metadata"]["name"].startswith(".")
    assert len(ev["note"].encode()) <= NOTE_MAX_BYTES and len(ev["reportingInstance"]) <= 128
    assert ev["eventTime"] == "2001-09-09T01:46:40.000000Z"  # six fractional digits, always


# --- rate, queue, failures -------------------------------------------------------------------


def test_token_bucket_gives_the_burst_then_the_rate() -> None:
    now = [0.0]
    b = TokenBucket(rate=4.0, burst=3, clock=lambda: now[0])
    assert [b.take() for _ in range(4)] == [True, True, True, False]
    assert b.delay() == pytest.approx(0.25)
    now[0] += 0.25
    assert b.take() and not b.take()
    now[0] += 100
    assert sum(b.take() for _ in range(10)) == 3  # never more than the burst saved up


def test_writes_are_rate_limited_off_the_informer_thread() -> None:
    w, writer = world(), FakeClusterWriter()
    rec = recorded(w, writer, qps=20, burst=2)
    try:
        t0 = time.monotonic()
        for i in range(5):
            w.create(f"p{i}", cpu="1", memory="1Gi")
            w.bind(f"p{i}", "node-00001")  # five bindings, ten writes
        offered = time.monotonic() - t0
        assert idle(rec, 10)
        took = time.monotonic() - t0
    finally:
        rec.stop()
    assert len(writer.events) == 5 and len(writer.annotations) == 5
    assert took >= (10 - 2) / 20 * 0.95 and offered < 0.2, (took, offered)


def test_a_full_queue_drops_and_counts_without_blocking_the_informer() -> None:
    release = threading.Event()

    class Stuck(FakeClusterWriter):
        def create_event(self, namespace: str, event: Any) -> None:
            release.wait(10)
            super().create_event(namespace, event)

    w, writer = world(), Stuck()
    rec = Recorder(writer, w.decisions, "sidecar-0", 1000, 1000, queue_max=2)
    w.cache.on_bound = rec.offer
    rec.start()
    try:
        t0 = time.monotonic()
        for i in range(6):
            w.create(f"p{i}", cpu="1", memory="1Gi")
            w.bind(f"p{i}", "node-00001")
        assert time.monotonic() - t0 < 1.0
        release.set()
        assert idle(rec, 5)
    finally:
        release.set()
        rec.stop()
    assert rec.counts["dropped"] >= 3
    assert len(writer.events) + rec.counts["dropped"] == 6


def test_failures_are_counted_and_logged_once_per_reason(caplog: pytest.LogCaptureFixture
                                                         ) -> None:
    w = world()
    writer = FakeClusterWriter(fail={"event": WriteError("forbidden", "events is forbidden")})
    rec = recorded(w, writer)
    try:
        with caplog.at_level(logging.WARNING, "dsan.sidecar.recorder"):
            for i in range(3):
                w.create(f"p{i}", cpu="1", memory="1Gi")
                w.bind(f"p{i}", "node-00001")
            assert idle(rec, 5)
    finally:
        rec.stop()
    assert rec.counts["forbidden"] == 3 and rec.recorded == {"event": 0, "annotation": 3}
    assert len([r for r in caplog.records if "forbidden" in r.getMessage()]) == 1


# --- the writer contract ---------------------------------------------------------------------

ReadBack = Callable[[str, str], tuple[list[dict[str, Any]], dict[str, str]]]


def check_writer_contract(writer: ClusterWriter, ns: str, pod: str, uid: str,
                          read_back: ReadBack) -> None:
    """``pod`` exists in ``ns`` with annotation ``keep: me``; ``read_back(ns, pod)`` gives
    (the Events regarding it, as events.k8s.io/v1 JSON; its annotations)."""
    b = Binding(ns, pod, uid, "node-x", time.time())
    writer.create_event(ns, event_of(b, None, "contract", b.at))
    writer.annotate_pod(ns, pod, {t.ANNOTATION_SCORED_BY: "dsan@v1"})
    events, annotations = read_back(ns, pod)
    assert [e["reason"] for e in events] == [t.EVENT_REASON_NOT_SCORED]
    assert events[0]["reportingController"] == t.EVENT_CONTROLLER
    assert events[0]["note"].startswith("bound to node-x")
    # a merge: the pod's other annotations stay
    assert annotations == {"keep": "me", t.ANNOTATION_SCORED_BY: "dsan@v1"}
    with pytest.raises(WriteError) as exc:
        writer.annotate_pod(ns, pod + "-gone", {t.ANNOTATION_SCORED_BY: "x"})
    assert exc.value.reason == "not_found"
    other = event_of(Binding(ns, pod, uid, "n", time.time()), None, "contract", time.time())
    other["metadata"]["namespace"] = ns + "-other"
    with pytest.raises(WriteError) as exc:
        writer.create_event(ns, other)
    assert exc.value.reason in ("invalid", "not_found")


def test_the_fake_writer_passes_the_contract() -> None:
    writer = FakeClusterWriter(pods={("ns", "p")})
    writer.annotations[("ns", "p")] = {"keep": "me"}

    def read_back(ns: str, pod: str) -> tuple[list[dict[str, Any]], dict[str, str]]:
        return ([e for n, e in writer.events if n == ns and e["regarding"]["name"] == pod],
                writer.annotations[(ns, pod)])

    check_writer_contract(writer, "ns", "p", "u", read_back)


def test_decisions_keep_the_most_recent() -> None:
    w = world(kept=2)
    for name in ("a", "b", "c"):
        w.create(name, cpu="1", memory="1Gi")
        w.score(name)
    assert len(w.decisions) == 2 and w.decisions.get("default/a") is None
