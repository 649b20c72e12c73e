"""Hypothesis over both APIs: whatever arrives, the reply is 200 or a clear 4xx (a gRPC
OK / INVALID_ARGUMENT / NOT_FOUND), never a 5xx or a dead server."""

from __future__ import annotations

import json
from typing import Any

import grpc
import httpx
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dsan.api.gen.scorer_v1 import scorer_pb2
from sidecar import kubeobjects as ko

pytestmark = pytest.mark.integration
NAMES = [f"node-{i:05d}" for i in range(10)]
FUZZ = settings(max_examples=80, deadline=None,
                suppress_health_check=[HealthCheck.function_scoped_fixture])

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=6), inner,
                                                                 max_size=4),
    max_leaves=12,
)
quantities = st.one_of(st.sampled_from(["1", "500m", "2Gi", "-1", "x", "", "1e400", "0.1m"]),
                       st.text(max_size=5))


@st.composite
def extender_bodies(draw: st.DrawFn) -> bytes:
    kind = draw(st.integers(0, 3))
    if kind == 0:
        return draw(st.binary(max_size=200))
    if kind == 1:
        return json.dumps(draw(json_values)).encode()
    pod = ko.pod("f", cpu=draw(quantities), memory=draw(quantities), gpus=draw(st.integers(0, 9)),
                 annotations=draw(st.dictionaries(
                     st.sampled_from(["dsan.io/gpu-milli", "dsan.io/gpu-models",
                                      "dsan.io/task-type", "other"]), st.text(max_size=6))))
    if kind == 3:
        pod["spec"] = draw(json_values)
    names = draw(st.lists(st.sampled_from(NAMES) | st.text(max_size=6), max_size=12))
    return json.dumps({"Pod": pod, "Nodes": None, "NodeNames": names}).encode()


@st.composite
def grpc_payloads(draw: st.DrawFn) -> bytes:
    if draw(st.booleans()):
        return draw(st.binary(max_size=200))
    pod = scorer_pb2.Pod(
        name=draw(st.text(max_size=5)), namespace=draw(st.text(max_size=5)),
        requests=draw(st.dictionaries(st.sampled_from(["cpu", "memory", "nvidia.com/gpu",
                                                       "dsan.io/gpu-milli"]), quantities)),
        annotations=draw(st.dictionaries(st.text(max_size=5), st.text(max_size=5), max_size=3)),
        priority=draw(st.integers(-(2**31), 2**31 - 1)))
    names = draw(st.lists(st.sampled_from(NAMES) | st.text(max_size=6), max_size=12))
    req = scorer_pb2.ScoreRequest(pod=pod, node_names=names)
    if draw(st.booleans()):  # node-table rows instead (or as well): any bytes, any epoch
        req.node_indices = draw(st.binary(max_size=48))
        req.node_table_epoch = draw(st.integers(0, 2**64 - 1))
    return req.SerializeToString()


@pytest.fixture(scope="module")
def shared(request: pytest.FixtureRequest) -> Any:
    from sidecar.app import Sidecar, load_policies
    from sidecar.config import SidecarConfig
    from tests.integration.sidecar.harness import GatedView
    cfg = SidecarConfig(http_port=0, grpc_port=0, policy="fgd", max_body_bytes=2048,
                        gc_freeze_after_sync=False, max_grpc_message_bytes=4096)
    views: list[GatedView] = []

    def factory(cache: Any) -> GatedView:
        views.append(GatedView(cache, ko.cluster(10)))
        return views[0]

    sc = Sidecar(cfg, view_factory=factory, policies=load_policies(cfg))
    sc.start()
    views[0].open()
    assert sc.wait_ready(5)
    client = httpx.Client()
    channel = grpc.insecure_channel(sc.grpc_target)
    yield sc, client, channel
    client.close()
    channel.close()
    sc.stop()


@FUZZ
@given(payload=extender_bodies(), verb=st.sampled_from(["prioritize", "filter"]))
def test_extender_never_fails_with_5xx(shared: Any, payload: bytes, verb: str) -> None:
    sc, client, _ = shared
    r = client.post(f"{sc.extender_url}/{verb}", content=payload)
    assert r.status_code in (200, 400, 404, 413), r.text
    if r.status_code != 200:
        assert r.json()["error"]
    elif verb == "prioritize":
        assert all(0 <= h["Score"] <= 10 for h in r.json())


@FUZZ
@given(payload=grpc_payloads(),
       rows=st.none() | st.lists(st.integers(0, 12), max_size=12).map(
           lambda r: np.array(r, dtype="<u4").tobytes()))
def test_grpc_never_fails_with_an_internal_error(shared: Any, payload: bytes,
                                                  rows: bytes | None) -> None:
    channel = shared[2]
    call = channel.unary_unary("/dsan.scorer.v1.Scorer/Score")
    if rows is not None:  # rows of the current table (in range or not) appended to the message
        table = scorer_pb2.NodeTableResponse.FromString(
            channel.unary_unary("/dsan.scorer.v1.Scorer/NodeTable")(b"", timeout=10))
        payload += scorer_pb2.ScoreRequest(node_indices=rows,
                                           node_table_epoch=table.epoch).SerializeToString()
    try:
        out = scorer_pb2.ScoreResponse.FromString(call(payload, timeout=10))
        assert all(0 <= s <= 100 for s in out.scores)
    except grpc.RpcError as exc:
        assert exc.code() in (grpc.StatusCode.INVALID_ARGUMENT, grpc.StatusCode.NOT_FOUND,
                              grpc.StatusCode.FAILED_PRECONDITION), exc.details()
        assert exc.details()


def test_still_healthy_after_fuzzing(shared: Any) -> None:
    sc, client, _ = shared
    assert client.get(sc.extender_url.rsplit("/", 1)[0] + "/healthz").status_code == 200
