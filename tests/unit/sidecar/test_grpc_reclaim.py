"""The gRPC Reclaim method: the framework plugin's candidates in, the node whose victims to evict
out, chosen by the very Reclamation that answers the extender's preempt verb."""

from __future__ import annotations

import json
from typing import Any

import grpc
import pytest

from dsan.api.gen.scorer_v1 import scorer_pb2
from dsan.policies.reclaim import DefaultReclaimer, ProtectingReclaimer, Reclaimer
from sidecar.grpc_server import ScoreHandler
from sidecar.service import ScoringService
from tests.unit.sidecar.test_preemption import TWO_NODES, Spy, bound, meta_args, reply, world


class Aborted(Exception):
    pass


class Context:
    """What the handler uses of grpc.ServicerContext: abort() ends the RPC with a status."""

    def __init__(self) -> None:
        self.code: grpc.StatusCode | None = None
        self.details = ""
        self.trailing: Any = ()

    def abort(self, code: grpc.StatusCode, details: str) -> None:
        self.code, self.details = code, details
        raise Aborted(details)

    def set_trailing_metadata(self, md: Any) -> None:
        self.trailing = md


def request(victims: dict[str, list[str]], prio: int = 1000, pdb: int = 0,
            name: str = "urgent") -> scorer_pb2.ReclaimRequest:
    return scorer_pb2.ReclaimRequest(
        pod=scorer_pb2.Pod(namespace="default", name=name, uid="uid-urgent", priority=prio),
        candidates=[scorer_pb2.ReclaimCandidate(node=n, victim_uids=[f"uid-{u}" for u in us],
                                                pdb_violations=pdb)
                    for n, us in victims.items()])


def handler(pods: list[dict[str, Any]], reclaimer: Reclaimer | None = None
            ) -> tuple[ScoreHandler, Any, ScoringService]:
    app, svc, _ = world(pods, reclaimer)
    return ScoreHandler(svc, app.reclamation), app, svc


def reclaim(h: ScoreHandler, req: scorer_pb2.ReclaimRequest | bytes) -> scorer_pb2.ReclaimResponse:
    raw = req if isinstance(req, bytes) else req.SerializeToString()
    return scorer_pb2.ReclaimResponse.FromString(h.reclaim(raw, Context()))


def refused(h: ScoreHandler, raw: bytes) -> Context:
    ctx = Context()
    with pytest.raises(Aborted):
        h.reclaim(raw, ctx)
    return ctx


def test_the_protecting_reclaimer_chooses_the_best_effort_node() -> None:
    h, _, svc = handler(TWO_NODES, ProtectingReclaimer())
    got = reclaim(h, request({"n0": ["web"], "n1": ["be-a", "be-b"]}))
    assert (got.node, got.reclaimer) == ("n1", "protect-latency")
    m = svc.metrics.exposition().decode()
    assert 'dsan_sidecar_requests_total{api="grpc",verb="reclaim"} 1.0' in m
    assert "dsan_sidecar_preempt_latency_seconds_count 1.0" in m
    assert h.reclamation is not None and h.reclamation.outcomes == {"evict": 1, "none": 0}


def test_kubernetes_own_pick_is_the_web_node() -> None:
    h, _, _ = handler(TWO_NODES, DefaultReclaimer())
    assert reclaim(h, request({"n0": ["web"], "n1": ["be-a", "be-b"]})).node == "n0"


def test_nothing_admissible_is_an_empty_node() -> None:
    h, _, _ = handler(TWO_NODES, ProtectingReclaimer())
    got = reclaim(h, request({"n0": ["web"]}))
    assert got.node == "" and got.reclaimer == "protect-latency"
    # Never a victim of the preemptor's own priority, whatever was proposed.
    h, _, _ = handler(TWO_NODES)
    assert reclaim(h, request({"n0": ["web"], "n1": ["be-a"]}, prio=100)).node == ""
    # A candidate without victims is allowed in the request and never chosen.
    assert reclaim(h, request({"n2": []})).node == ""


def test_a_candidate_with_an_unknown_victim_is_dropped() -> None:
    h, _, _ = handler(TWO_NODES)
    assert reclaim(h, request({"n0": ["web", "ghost"], "n1": ["be-a", "be-b"]})).node == "n1"
    assert reclaim(h, request({"n0": ["be-a"]})).node == ""  # bound elsewhere


@pytest.mark.parametrize("reclaimer", [DefaultReclaimer(), ProtectingReclaimer()])
@pytest.mark.parametrize("victims", [
    {"n0": ["web"], "n1": ["be-a", "be-b"]}, {"n0": ["web"]}, {"n1": ["be-b"], "n2": ["nb"]},
    {"n2": ["nb", "ghost"], "n1": ["be-a"]}, {"n1": ["be-a", "be-b"], "n2": ["nb"]}])
def test_grpc_and_the_http_verb_make_the_same_choice(reclaimer: Reclaimer,
                                                     victims: dict[str, list[str]]) -> None:
    pods = [*TWO_NODES, bound("nb", "n2", 90, "other")]
    h, app, _ = handler(pods, reclaimer)
    over_http = reply(app.preempt(meta_args(victims)))
    over_grpc = reclaim(h, request(victims)).node
    assert list(over_http) == ([over_grpc] if over_grpc else [])


def test_the_reclaimer_sees_the_preemptors_priority_and_the_pdb_count() -> None:
    spy = Spy(pick=None)
    h, _, _ = handler(TWO_NODES, spy)
    reclaim(h, request({"n1": ["be-a", "be-b"]}, prio=77, pdb=1))
    prio, cands = spy.seen[0]
    assert prio == 77 and [len(c.victims) for c in cands] == [2]
    assert h.reclamation is not None and h.reclamation.outcomes["none"] == 1


def test_a_reclaimer_that_breaks_the_contract_evicts_nothing() -> None:
    h, _, _ = handler(TWO_NODES, Spy(pick=0))
    assert reclaim(h, request({"n0": ["web"]}, prio=50)).node == ""


@pytest.mark.parametrize(("raw", "words"), [
    (b"\xff\xff", "not a dsan.scorer.v1.ReclaimRequest"),
    (request({"n0": ["web"]}, name="").SerializeToString(), "pod.name is empty"),
    (request({"": ["web"]}).SerializeToString(), "candidates[0].node is empty"),
    (scorer_pb2.ReclaimRequest(pod=scorer_pb2.Pod(name="p"), candidates=[
        scorer_pb2.ReclaimCandidate(node="n0", victim_uids=["x" * 129])]).SerializeToString(),
     "1..128 characters"),
    (scorer_pb2.ReclaimRequest(pod=scorer_pb2.Pod(name="p"), candidates=[
        scorer_pb2.ReclaimCandidate(node="n0", victim_uids=[""])]).SerializeToString(),
     "1..128 characters"),
    (scorer_pb2.ReclaimRequest(pod=scorer_pb2.Pod(name="p"), candidates=[
        scorer_pb2.ReclaimCandidate(node="n0", victim_uids=["a"], pdb_violations=-1)
    ]).SerializeToString(), "negative"),
])
def test_bad_requests_are_invalid_argument_and_the_next_is_served(raw: bytes, words: str) -> None:
    h, _, svc = handler(TWO_NODES, ProtectingReclaimer())
    ctx = refused(h, raw)
    assert ctx.code == grpc.StatusCode.INVALID_ARGUMENT and words in ctx.details, ctx.details
    assert reclaim(h, request({"n0": ["web"], "n1": ["be-a", "be-b"]})).node == "n1"
    assert 'dsan_sidecar_request_errors_total{api="grpc"' in svc.metrics.exposition().decode()


def test_without_a_reclamation_the_method_refuses() -> None:
    _, svc, _ = world(TWO_NODES)
    ctx = refused(ScoreHandler(svc), request({"n0": ["web"]}).SerializeToString())
    assert ctx.code == grpc.StatusCode.INVALID_ARGUMENT and "no Reclaim" in ctx.details


def test_before_the_cache_synced_the_method_is_unavailable() -> None:
    h, _, svc = handler(TWO_NODES)
    svc.view.stop()
    ctx = refused(h, request({"n0": ["web"]}).SerializeToString())
    assert ctx.code == grpc.StatusCode.UNAVAILABLE, json.dumps(ctx.details)
