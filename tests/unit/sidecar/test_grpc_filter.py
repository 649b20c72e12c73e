"""The gRPC Filter method: the framework plugin's pod and nodes in, the refused nodes with their
reasons out, answered by the very ScoringEngine.filter that answers the extender's filter verb
(feasibility on the sidecar's view, then the served policy's node quota)."""

from __future__ import annotations

import json

import grpc
import pytest

from dsan.api import types as t
from dsan.api.gen.scorer_v1 import scorer_pb2
from dsan.policies.dsan_actions import ActionParams, LearnedController
from dsan.policies.registry import make_scorer
from sidecar.cache import GraphCache
from sidecar.config import SidecarConfig
from sidecar.extender import ExtenderApp
from sidecar.grpc_server import ScoreHandler
from sidecar.metrics import SidecarMetrics
from sidecar.scoring import ScoringEngine
from sidecar.service import PolicyInfo, ScoringService
from tests.support import kubeobjects as ko
from tests.support.fakes import FakeClusterView
from tests.unit.sidecar.test_grpc_reclaim import Aborted, Context

ELASTIC = {t.ANNOTATION_ELASTIC: "true", t.ANNOTATION_TASK_TYPE: "batch"}


def world(ls_headroom: float = 0.75) -> tuple[ScoreHandler, ExtenderApp, ScoringService]:
    """Nodes a and b (8 cores each) and a 1-core small; a web pod with 2 cores on a."""
    cache = GraphCache(SidecarConfig())
    web = ko.pod("web", cpu="2", node_name="a", phase="Running",
                 annotations={t.ANNOTATION_TASK_TYPE: "web"})
    view = FakeClusterView(cache, nodes=[ko.node("a", cpu="8"), ko.node("b", cpu="8"),
                                         ko.node("small", cpu="1")], pods=[web])
    view.start()
    scorer = make_scorer("k8s-default")
    scorer.controller = LearnedController(ActionParams(ls_headroom=ls_headroom))
    eng = ScoringEngine(cache, scorer, make_scorer("fgd"), 60)
    svc = ScoringService(cache, view, eng, SidecarMetrics(),
                         PolicyInfo("dsan", "dsan@test", "fgd"))
    return ScoreHandler(svc), ExtenderApp(svc), svc


def request(names: list[str], cpu: str = "5", annotations: dict[str, str] | None = None,
            name: str = "elastic") -> scorer_pb2.FilterRequest:
    return scorer_pb2.FilterRequest(
        pod=scorer_pb2.Pod(namespace="default", name=name, requests={"cpu": cpu},
                           annotations=ELASTIC if annotations is None else annotations),
        node_names=names)


def filter_(h: ScoreHandler, req: scorer_pb2.FilterRequest) -> scorer_pb2.FilterResponse:
    return scorer_pb2.FilterResponse.FromString(h.filter(req.SerializeToString(), Context()))


def refused(h: ScoreHandler, raw: bytes) -> Context:
    ctx = Context()
    with pytest.raises(Aborted):
        h.filter(raw, ctx)
    return ctx


def test_the_quota_refuses_the_web_pods_node_to_a_batch_pod() -> None:
    h, _, svc = world()
    got = filter_(h, request(["a", "b", "small", "new"]))  # a: (2 + 5) / 8 = 0.875 > 0.75
    # small is too small, but kube-scheduler's NodeResourcesFit says so, on the state its
    # preemption dry run changes: a refusal here would outlive the victims' removal.
    assert set(got.refused) == {"a"} and got.policy == "dsan@test"
    assert got.refused["a"].startswith("dsan: the node's quota")
    # A core (not elastic) batch pod is held to it too; a web replica is not; without the
    # quota nothing is refused.
    assert set(filter_(h, request(["a", "b"], annotations={})).refused) == {"a"}
    web = {t.ANNOTATION_TASK_TYPE: "web"}
    assert dict(filter_(h, request(["a", "b"], annotations=web)).refused) == {}
    assert dict(filter_(world(ls_headroom=1.0)[0], request(["a", "b"])).refused) == {}
    m = svc.metrics.exposition().decode()
    assert 'dsan_sidecar_requests_total{api="grpc",verb="filter"} 3.0' in m


@pytest.mark.parametrize(("cpu", "annotations"), [
    ("5", ELASTIC), ("5", {}), ("1", ELASTIC), ("7", ELASTIC), ("9", {}),
    ("2", {t.ANNOTATION_TASK_TYPE: "web"})])
def test_grpc_refuses_the_http_verbs_quota_refusals(cpu: str,
                                                    annotations: dict[str, str]) -> None:
    """The same quota as the filter verb, without its refusals of full nodes (on a full node
    the quota may still refuse: a 9-core pod on a)."""
    h, app, _ = world()
    names = ["a", "b", "small", "ghost"]
    status, body = app.filter(json.dumps({"Pod": ko.pod("elastic", cpu=cpu,
                                                        annotations=annotations),
                                          "Nodes": None, "NodeNames": names}).encode())
    assert status == 200, body
    over_http = json.loads(body)["FailedNodes"]
    quota = {n: r for n, r in over_http.items() if r.startswith("dsan: the node's quota")}
    got = dict(filter_(h, request(names, cpu, annotations)).refused)
    assert {n: r for n, r in got.items() if n in over_http and over_http[n] == r} == quota
    full = {n for n, r in over_http.items() if r.startswith("dsan: insufficient")}
    assert set(got) - set(quota) <= full  # a full node refused only by the quota


@pytest.mark.parametrize(("raw", "words"), [
    (b"\xff\xff", "not a dsan.scorer.v1.FilterRequest"),
    (request(["a"], name="").SerializeToString(), "pod.name is empty"),
    (request(["a", ""]).SerializeToString(), "empty name"),
    (request(["a"], cpu="lots").SerializeToString(), "cpu"),
])
def test_bad_requests_are_invalid_argument_and_the_next_is_served(raw: bytes, words: str) -> None:
    h, _, svc = world()
    ctx = refused(h, raw)
    assert ctx.code == grpc.StatusCode.INVALID_ARGUMENT and words in ctx.details, ctx.details
    assert set(filter_(h, request(["a", "b"])).refused) == {"a"}
    assert 'dsan_sidecar_request_errors_total{api="grpc"' in svc.metrics.exposition().decode()


def test_no_nodes_refuses_nothing() -> None:
    h, _, _ = world()
    assert dict(filter_(h, request([])).refused) == {}


def test_before_the_cache_synced_the_method_is_unavailable() -> None:
    h, _, svc = world()
    svc.view.stop()
    ctx = refused(h, request(["a"]).SerializeToString())
    assert ctx.code == grpc.StatusCode.UNAVAILABLE, ctx.details

