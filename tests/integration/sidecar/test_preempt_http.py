"""The preempt verb on the real HTTP server: routed under the URL prefix, malformed args are
400s naming the field while the sidecar keeps scoring, and /metrics counts the verb; the gRPC
Reclaim and Filter beside it on the real gRPC server."""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest

from dsan.api import types as t
from tests.support import kubeobjects as ko

pytestmark = pytest.mark.integration


def victim(name: str, node: str, task: str) -> dict[str, Any]:
    p = ko.pod(name, cpu="8", node_name=node, phase="Running",
               annotations={t.ANNOTATION_TASK_TYPE: task})
    p["spec"]["priority"] = 10
    return p


def args(victims: dict[str, list[str]], prio: int = 100, **pod: Any) -> bytes:
    preemptor = ko.pod("urgent", **pod)
    preemptor["spec"]["priority"] = prio
    return json.dumps({"Pod": preemptor, "NodeNameToVictims": None, "NodeNameToMetaVictims": {
        n: {"Pods": [{"UID": f"uid-{u}"} for u in us], "NumPDBViolations": 0}
        for n, us in victims.items()}}).encode()


@pytest.mark.parametrize(("body", "status", "words"), [
    (b"{not json", 400, "not JSON"),
    (json.dumps({"Pod": ko.pod("p")}).encode(), 400, "neither NodeNameToMetaVictims"),
    (json.dumps({"Pod": ko.pod("p"), "NodeNameToMetaVictims": {"node-00000": {"Pods": [7]}}}
                ).encode(), 400, "MetaPod"),
    (args({"node-00000": ["web"]}, extra_requests={"cpu": "1e999998"}), 400, "requests[cpu]"),
])
def test_malformed_preempt_args_are_400s_and_the_sidecar_keeps_serving(
        sidecar_factory: Any, body: bytes, status: int, words: str) -> None:
    sc, _ = sidecar_factory(n=10, reclaimer="protect-latency",
                            pods=[victim("web", "node-00000", "web"),
                                  victim("nb", "node-00001", "other")])
    with httpx.Client(timeout=5) as c:
        r = c.post(sc.extender_url + "/preempt", content=body)
        assert r.status_code == status and words in r.json()["error"], r.text
        r = c.post(sc.extender_url + "/preempt",
                   content=args({"node-00000": ["web"], "node-00001": ["nb"]}))
        assert r.status_code == 200
        assert r.json() == {"NodeNameToMetaVictims": {
            "node-00001": {"Pods": [{"UID": "uid-nb"}], "NumPDBViolations": 0}}}
        r = c.post(sc.extender_url + "/prioritize", content=json.dumps(
            {"Pod": ko.pod("p"), "Nodes": None, "NodeNames": ["node-00000"]}).encode())
        assert r.status_code == 200
        m = c.get(sc.extender_url.rsplit("/", 1)[0] + "/metrics").text
    assert 'dsan_sidecar_requests_total{api="http",verb="preempt"} 1.0' in m
    assert 'dsan_sidecar_preemptions_total{outcome="evict"} 1.0' in m
    assert 'dsan_sidecar_preempt_victims_total{task_type="other"} 1.0' in m
    assert 'dsan_sidecar_preempt_candidates_total{result="offered"} 2.0' in m


def test_a_sidecar_not_synced_yet_answers_503(sidecar_factory: Any) -> None:
    sc, _ = sidecar_factory(n=10, ready=False)
    r = httpx.post(sc.extender_url + "/preempt", content=args({"node-00000": ["x"]}), timeout=5)
    assert r.status_code == 503


def test_grpc_reclaim_shares_the_verbs_reclamation(grpc_via: Any) -> None:
    """The gRPC Reclaim (the DSANPreemption plugin's call) is routed by the real server and
    answered by the same Reclamation: the same choice, counted in the same series."""
    import grpc

    from dsan.api.gen.scorer_v1 import scorer_pb2, scorer_pb2_grpc

    sc, _, target = grpc_via(n=10, reclaimer="protect-latency",
                             pods=[victim("web", "node-00000", "web"),
                                   victim("nb", "node-00001", "other")])
    req = scorer_pb2.ReclaimRequest(
        pod=scorer_pb2.Pod(namespace="default", name="urgent", priority=100),
        candidates=[scorer_pb2.ReclaimCandidate(node="node-00000", victim_uids=["uid-web"]),
                    scorer_pb2.ReclaimCandidate(node="node-00001", victim_uids=["uid-nb"])])
    with grpc.insecure_channel(target) as ch:
        got = scorer_pb2_grpc.ScorerStub(ch).Reclaim(req, timeout=5)
        alone = scorer_pb2_grpc.ScorerStub(ch).Reclaim(scorer_pb2.ReclaimRequest(
            pod=req.pod, candidates=req.candidates[:1]), timeout=5)
        with pytest.raises(grpc.RpcError) as exc:
            ch.unary_unary("/dsan.scorer.v1.Scorer/Reclaim")(b"\xff\xff", timeout=5)
    assert (got.node, got.reclaimer) == ("node-00001", "protect-latency")
    assert alone.node == ""  # only the web pod's node: evict nothing
    assert exc.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    with httpx.Client(timeout=5) as c:
        r = c.post(sc.extender_url + "/preempt",
                   content=args({"node-00000": ["web"], "node-00001": ["nb"]}))
        assert list(r.json()["NodeNameToMetaVictims"]) == [got.node]
        m = c.get(sc.extender_url.rsplit("/", 1)[0] + "/metrics").text
    assert 'dsan_sidecar_requests_total{api="grpc",verb="reclaim"} 2.0' in m
    assert 'dsan_sidecar_preemptions_total{outcome="evict"} 2.0' in m
    assert 'dsan_sidecar_preemptions_total{outcome="none"} 1.0' in m
    assert 'dsan_sidecar_preempt_latency_seconds_count 3.0' in m


def test_grpc_filter_leaves_fit_to_kube_scheduler(grpc_via: Any) -> None:
    """The gRPC Filter (the DSANScore plugin's Filter) is routed by the real server and,
    unlike the HTTP filter verb, refuses no node for being full (NodeResourcesFit's job, on
    the state kube-scheduler's preemption dry run changes); a malformed request is
    INVALID_ARGUMENT and the next one is served."""
    import grpc

    from dsan.api.gen.scorer_v1 import scorer_pb2, scorer_pb2_grpc

    sc, _, target = grpc_via(n=10, pods=[victim("web", "node-00000", "web")])
    names = ["node-00000", "node-00001", "ghost"]
    pod = scorer_pb2.Pod(namespace="default", name="p", requests={"cpu": "999"})
    with grpc.insecure_channel(target) as ch:
        stub = scorer_pb2_grpc.ScorerStub(ch)
        with pytest.raises(grpc.RpcError) as exc:
            ch.unary_unary("/dsan.scorer.v1.Scorer/Filter")(b"\xff\xff", timeout=5)
        got = stub.Filter(scorer_pb2.FilterRequest(pod=pod, node_names=names), timeout=5)
    assert exc.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "FilterRequest" in (exc.value.details() or "")
    with httpx.Client(timeout=5) as c:
        r = c.post(sc.extender_url + "/filter", content=json.dumps(
            {"Pod": ko.pod("p", cpu="999"), "Nodes": None, "NodeNames": names}).encode())
        m = c.get(sc.extender_url.rsplit("/", 1)[0] + "/metrics").text
    # A 999-core pod: the verb refuses both known nodes (the unknown one passes); the served
    # policy has no quota, so the gRPC Filter refuses none.
    assert set(r.json()["FailedNodes"]) == {"node-00000", "node-00001"}
    assert dict(got.refused) == {} and got.policy
    assert 'dsan_sidecar_requests_total{api="grpc",verb="filter"} 1.0' in m
    assert 'dsan_sidecar_request_errors_total{api="grpc",reason="bad_protobuf"} 1.0' in m
