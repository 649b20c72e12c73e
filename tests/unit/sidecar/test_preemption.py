"""The preempt verb: ExtenderPreemptionArgs in, the reclaimer's one node out, against a cache
fed like the informer feeds it."""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

import pytest

from dsan.api import types as t
from dsan.policies.reclaim import Candidate, DefaultReclaimer, ProtectingReclaimer, Reclaimer
from dsan.policies.registry import make_scorer
from sidecar.cache import GraphCache
from sidecar.config import SidecarConfig
from sidecar.extender import ExtenderApp
from sidecar.metrics import SidecarMetrics
from sidecar.preemption import Reclamation, parse_preemption_args
from sidecar.scoring import ScoringEngine
from sidecar.service import PolicyInfo, RequestError, ScoringService
from sidecar.shrinker import Shrinker
from tests.support import kubeobjects as ko
from tests.support.fakes import FakeClusterView, FakeWorkloads, idle

STARTED = datetime(2027, 1, 15, 8, tzinfo=UTC).timestamp()
NOW = STARTED + 3600


def bound(name: str, node: str, prio: int, task: str = "batch", cpu: str = "2",
          start: str | None = "2027-01-15T08:00:00Z", **ann: str) -> dict[str, Any]:
    p = ko.pod(name, cpu=cpu, node_name=node, phase="Running",
               annotations={t.ANNOTATION_TASK_TYPE: task, **ann})
    p["spec"]["priority"] = prio
    if start is not None:
        p["status"]["startTime"] = start
    return p


def world(pods: list[dict[str, Any]], reclaimer: Reclaimer | None = None,
          shrinker: Shrinker | None = None) -> tuple[ExtenderApp, ScoringService, FakeClusterView]:
    cache = GraphCache(SidecarConfig())
    view = FakeClusterView(cache, nodes=[ko.node(f"n{i}", cpu="4") for i in range(3)], pods=pods)
    view.start()
    eng = ScoringEngine(cache, make_scorer("k8s-default"), make_scorer("fgd"), 60)
    svc = ScoringService(cache, view, eng, SidecarMetrics(),
                         PolicyInfo("k8s-default", "k8s-default", "fgd"))
    rec = Reclamation(cache, reclaimer or DefaultReclaimer(), shrinker, wall=lambda: NOW)
    return ExtenderApp(svc, rec), svc, view


def preemptor(prio: int = 1000) -> dict[str, Any]:
    p = ko.pod("urgent", cpu="4")
    p["spec"]["priority"] = prio
    return p


def meta_args(victims: dict[str, list[str]], prio: int = 1000) -> bytes:
    return json.dumps({"Pod": preemptor(prio), "NodeNameToVictims": None,
                       "NodeNameToMetaVictims": {
                           n: {"Pods": [{"UID": f"uid-{u}"} for u in us], "NumPDBViolations": 0}
                           for n, us in victims.items()}}).encode()


def reply(out: tuple[int, bytes]) -> dict[str, list[str]]:
    status, body = out
    assert status == 200, body
    got = json.loads(body)
    assert set(got) == {"NodeNameToMetaVictims"}
    return {n: [p["UID"] for p in v["Pods"]] for n, v in got["NodeNameToMetaVictims"].items()}


TWO_NODES = [bound("web", "n0", 100, "web", cpu="4"),
             bound("be-a", "n1", 100, "batch"), bound("be-b", "n1", 100, "batch")]


def test_kubernetes_own_pick_evicts_the_single_web_pod() -> None:
    app, _, _ = world(TWO_NODES)
    got = reply(app.preempt(meta_args({"n0": ["web"], "n1": ["be-a", "be-b"]})))
    assert got == {"n0": ["uid-web"]}  # the smaller sum of victim priorities


def test_a_protecting_reclaimer_returns_only_the_best_effort_node() -> None:
    app, svc, _ = world(TWO_NODES, ProtectingReclaimer())
    got = reply(app.preempt(meta_args({"n0": ["web"], "n1": ["be-a", "be-b"]})))
    assert got == {"n1": ["uid-be-a", "uid-be-b"]}
    m = svc.metrics.exposition().decode()
    assert 'dsan_sidecar_requests_total{api="http",verb="preempt"} 1.0' in m
    assert "dsan_sidecar_preempt_latency_seconds_count 1.0" in m


def test_the_served_dsan_policy_reclaims_with_its_learned_reclaimer() -> None:
    """``dsan serve --policy dsan`` without ``--reclaimer``: the shipped actions.json's cost
    reclaimer, which passes over the web pod kube-scheduler would have evicted."""
    from sidecar.app import load_policies

    scorer, _, _ = load_policies(SidecarConfig(policy="dsan"))
    assert scorer.name == "dsan" and scorer.reclaimer.name == "dsan"
    app, _, _ = world(TWO_NODES, scorer.reclaimer)
    got = reply(app.preempt(meta_args({"n0": ["web"], "n1": ["be-a", "be-b"]})))
    assert got == {"n1": ["uid-be-a", "uid-be-b"]}


def test_nothing_admissible_is_an_empty_map_and_the_pod_waits() -> None:
    app, _, _ = world(TWO_NODES, ProtectingReclaimer())
    assert reply(app.preempt(meta_args({"n0": ["web"]}))) == {}
    # Victims of the preemptor's own priority are never returned, whatever was proposed.
    app, _, _ = world(TWO_NODES)
    assert reply(app.preempt(meta_args({"n0": ["web"], "n1": ["be-a"]}, prio=100))) == {}


def test_a_candidate_with_a_victim_the_cache_does_not_know_is_dropped_not_guessed() -> None:
    app, _, _ = world(TWO_NODES)
    got = reply(app.preempt(meta_args({"n0": ["web", "ghost"], "n1": ["be-a", "be-b"]})))
    assert got == {"n1": ["uid-be-a", "uid-be-b"]}
    # A victim the cache shows on another node than proposed is not known there either.
    assert reply(app.preempt(meta_args({"n0": ["be-a"]}))) == {}
    assert app.reclamation is not None
    assert app.reclamation.candidates == {"offered": 3, "unknown_victim": 2,
                                         "quota_refused": 0, "chosen": 1}


def test_a_node_the_quota_refuses_the_preemptor_is_no_candidate() -> None:
    """kube-scheduler's preemption dry run never asks the extender's filter, so it proposes
    n0, where the preemptor would sit beside the web pod past the quota's CPU headroom even
    once the batch pod is gone ((1 + 2) / 4 > 0.5 of the cores); the verb drops it, as the
    gRPC Filter keeps it out in plugin mode. kube-scheduler's own pick would have taken it."""
    from dsan.policies.dsan_actions import ActionParams, LearnedController

    pods = [bound("web", "n0", 100, "web", cpu="1"), bound("be", "n0", 100, "batch", cpu="3"),
            bound("be-a", "n1", 100, "batch"), bound("be-b", "n1", 100, "batch")]
    offered = {"n0": ["be"], "n1": ["be-a", "be-b"]}

    def preempt(ls_headroom: float) -> dict[str, list[str]]:
        app, svc, _ = world(pods)
        svc.engine.scorer.controller = LearnedController(ActionParams(ls_headroom=ls_headroom))
        body = json.loads(meta_args(offered))
        body["Pod"]["spec"]["containers"][0]["resources"]["requests"]["cpu"] = "2"
        return reply(app.preempt(json.dumps(body).encode()))

    assert preempt(ls_headroom=1.0) == {"n0": ["uid-be"]}  # one victim: kube-scheduler's pick
    assert preempt(ls_headroom=0.5) == {"n1": ["uid-be-a", "uid-be-b"]}


def test_a_deleted_victim_is_forgotten() -> None:
    app, _, view = world(TWO_NODES)
    view.apply("pods", "DELETED", TWO_NODES[0])
    assert reply(app.preempt(meta_args({"n0": ["web"]}))) == {}


def test_the_reply_keeps_kube_schedulers_order_and_pdb_count() -> None:
    app, _, _ = world(TWO_NODES)
    body = json.loads(meta_args({"n1": ["be-b", "be-a"]}))
    body["NodeNameToMetaVictims"]["n1"]["NumPDBViolations"] = 2
    _status, out = app.preempt(json.dumps(body).encode())
    assert json.loads(out) == {"NodeNameToMetaVictims": {"n1": {
        "Pods": [{"UID": "uid-be-b"}, {"UID": "uid-be-a"}], "NumPDBViolations": 2}}}


def test_whole_victim_pods_are_read_from_the_request() -> None:
    """Without nodeCacheCapable kube-scheduler sends whole pods; the reply is UIDs anyway."""
    app, _, _ = world([], ProtectingReclaimer())
    body = {"Pod": preemptor(), "NodeNameToMetaVictims": None, "NodeNameToVictims": {
        "n0": {"Pods": [bound("web", "n0", 100, "web")], "NumPDBViolations": 0},
        "n1": {"Pods": [bound("nb", "n1", 100, "other")], "NumPDBViolations": 0}}}
    assert reply(app.preempt(json.dumps(body).encode())) == {"n1": ["uid-nb"]}


class Spy:
    name = "spy"

    def __init__(self, pick: int | None = 0) -> None:
        self.pick, self.seen = pick, []  # type: ignore[var-annotated]

    def choose(self, priority: int, candidates: Sequence[Candidate]) -> int | None:
        self.seen.append((priority, list(candidates)))
        return self.pick


def test_victims_carry_the_pods_fields_from_annotations_and_status() -> None:
    pods = [bound("ex", "n2", 50, "batch", cpu="1500m", start="2027-01-15T08:00:00Z",
                  **{t.ANNOTATION_ELASTIC: "true", t.ANNOTATION_LOST_SECONDS: "30"}),
            bound("nb", "n2", 60, "other", start=None),
            bound("g", "n1", 70, "train", **{t.ANNOTATION_GPU_MILLI: "250"})]
    pods[2]["spec"]["containers"][0]["resources"]["requests"][t.RESOURCE_GPU] = "1"
    spy = Spy()
    app, _, _ = world(pods, spy)
    reply(app.preempt(meta_args({"n2": ["ex", "nb"], "n1": ["g"]}, prio=77)))
    prio, cands = spy.seen[0]
    assert prio == 77
    ex, nb = cands[0].victims
    assert (ex.priority, ex.task_type, ex.cores, ex.gpus, ex.elastic, ex.lost_s) == (
        50, "batch", 1.5, 0.0, True, 30.0)
    assert ex.start == STARTED
    # Not started: starts now, nothing lost; no lost-seconds: everything since the start.
    assert (nb.start, nb.lost_s, nb.elastic) == (NOW, 0.0, False)
    (g,) = cands[1].victims
    assert (g.gpus, g.task_type, g.lost_s) == (0.25, "train", 3600.0)


def test_a_reclaimer_that_breaks_the_contract_evicts_nothing() -> None:
    app, _, _ = world(TWO_NODES, Spy(pick=0))
    assert reply(app.preempt(meta_args({"n0": ["web"]}, prio=50))) == {}
    app, _, _ = world(TWO_NODES, Spy(pick=7))
    assert reply(app.preempt(meta_args({"n0": ["web"]}))) == {}


def test_evicting_elastic_members_shrinks_their_owner_once() -> None:
    owner = ko.pod("driver", node_name="n0", phase="Running",
                   annotations={t.ANNOTATION_DESIRED_MEMBERS: "4"})
    execs = [bound(f"ex{i}", "n1", 10, "batch", cpu="1", **{
        t.ANNOTATION_ELASTIC: "true", t.ANNOTATION_WORKLOAD_OWNER: "driver"}) for i in range(2)]
    fake = FakeWorkloads({("default", "driver"): owner})
    shrinker = Shrinker(fake)
    shrinker.start()
    try:
        app, _svc, _ = world([owner, *execs], shrinker=shrinker)
        args = meta_args({"n1": ["ex0", "ex1"]})
        assert reply(app.preempt(args)) == {"n1": ["uid-ex0", "uid-ex1"]}
        reply(app.preempt(args))  # kube-scheduler asking again: no second shrink
        assert idle(shrinker)
    finally:
        shrinker.stop()
    assert owner["metadata"]["annotations"][t.ANNOTATION_DESIRED_MEMBERS] == "2"
    assert len(fake.patches) == 1 and shrinker.counts["ok"] == 1


@pytest.mark.parametrize(("body", "reason", "words"), [
    (b"{", "malformed_json", "not JSON"),
    (b"[]", "bad_request", "must be a JSON object"),
    (b'{"NodeNameToMetaVictims": {}}', "bad_pod", "Pod is missing"),
    (json.dumps({"Pod": {"spec": {}}}).encode(), "bad_request", "neither"),
    (json.dumps({"Pod": {"spec": {}}, "NodeNameToMetaVictims": []}).encode(), "bad_request",
     "must be an object"),
    (json.dumps({"Pod": {"spec": {}}, "NodeNameToMetaVictims": {"n": 3}}).encode(),
     "bad_request", "must be an object"),
    (json.dumps({"Pod": {"spec": {}}, "NodeNameToMetaVictims": {"n": {"Pods": {}}}}).encode(),
     "bad_request", "Pods must be a list"),
    (json.dumps({"Pod": {"spec": {}}, "NodeNameToMetaVictims": {"n": {"Pods": [{"uid": "x"}]}}}
                ).encode(), "bad_request", "MetaPod"),
    (json.dumps({"Pod": {"spec": {}}, "NodeNameToMetaVictims": {
        "n": {"Pods": [], "NumPDBViolations": -1}}}).encode(), "bad_request", "NumPDB"),
    (json.dumps({"Pod": {"spec": {}}, "NodeNameToVictims": {"n": {"Pods": [{}]}}}).encode(),
     "bad_request", "metadata.uid"),
])
def test_malformed_args_are_400s_naming_the_field(body: bytes, reason: str, words: str) -> None:
    with pytest.raises(RequestError) as err:
        parse_preemption_args(body)
    assert err.value.reason == reason and words in err.value.message
    app, svc, _ = world(TWO_NODES)
    status, out = app.preempt(body)
    assert status == 400 and words in json.loads(out)["error"]
    assert svc.metrics.errors.labels("http", reason)._value.get() == 1
    # ...and the verb keeps serving.
    assert reply(app.preempt(meta_args({"n1": ["be-a"]}))) == {"n1": ["uid-be-a"]}


def test_a_preemptor_with_a_bad_priority_is_a_bad_pod() -> None:
    app, _, _ = world(TWO_NODES)
    body = json.loads(meta_args({"n1": ["be-a"]}))
    body["Pod"]["spec"]["priority"] = "high"
    status, out = app.preempt(json.dumps(body).encode())
    assert status == 400 and "Pod.spec.priority" in json.loads(out)["error"]


def test_a_status_update_brings_the_start_time_and_a_relist_forgets_vanished_pods() -> None:
    pod = bound("late", "n1", 10, start=None)
    spy = Spy()
    app, svc, view = world([pod], spy)
    pod = json.loads(json.dumps(pod))
    pod["status"]["startTime"] = "2027-01-15T08:00:00Z"
    view.apply("pods", "MODIFIED", pod)
    reply(app.preempt(meta_args({"n1": ["late"]})))
    assert spy.seen[-1][1][0].victims[0].start == STARTED
    svc.cache.replace_pods([])
    assert reply(app.preempt(meta_args({"n1": ["late"]}))) == {}


def test_the_reclaimer_setting_is_validated() -> None:
    assert SidecarConfig(reclaimer="protect-latency").reclaimer == "protect-latency"
    with pytest.raises(ValueError, match="reclaimer"):
        SidecarConfig(reclaimer="nope")
