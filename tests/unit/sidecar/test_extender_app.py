from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from dsan.policies.registry import make_scorer
from sidecar.cache import GraphCache
from sidecar.config import SidecarConfig
from sidecar.extender import ExtenderApp, encode_priorities, parse_args
from sidecar.metrics import SidecarMetrics
from sidecar.scoring import ScoringEngine
from sidecar.service import PolicyInfo, RequestError, ScoringService
from tests.support import kubeobjects as ko
from tests.support.fakes import FakeClusterView


def service(n: int = 4, start: bool = True,
            pods: list[dict[str, Any]] | None = None) -> ScoringService:
    """``pods``: what the informer has seen (a pending pod of ours may be assumed)."""
    cache = GraphCache(SidecarConfig())
    view = FakeClusterView(cache, nodes=[ko.node(f"n{i}", cpu=str(4 * (i + 1)), gpus=2,
                                                 model="A100") for i in range(n)], pods=pods)
    if start:
        view.start()
    eng = ScoringEngine(cache, make_scorer("k8s-default"), make_scorer("fgd"), 60)
    return ScoringService(cache, view, eng, SidecarMetrics(), PolicyInfo("k8s-default",
                                                                          "k8s-default", "fgd"))


def args(names: list[str], **pod: Any) -> bytes:
    return json.dumps({"Pod": ko.pod("p", **pod), "Nodes": None, "NodeNames": names}).encode()


@given(st.lists(st.text(), max_size=20), st.data())
def test_priorities_encoding_round_trips_any_names(names: list[str], data: st.DataObject) -> None:
    scores = data.draw(st.lists(st.integers(0, 10), min_size=len(names), max_size=len(names)))
    out = json.loads(encode_priorities(names, scores))
    assert out == [{"Host": n, "Score": s} for n, s in zip(names, scores, strict=True)]


def test_prioritize_replies_host_priority_list_in_request_order() -> None:
    svc = service(pods=[ko.pod("p")])  # pending, for dsan-scheduler
    status, body = ExtenderApp(svc).prioritize(args(["n3", "n0", "ghost"], cpu="2"))
    assert status == 200
    reply = json.loads(body)
    assert [r["Host"] for r in reply] == ["n3", "n0", "ghost"]
    assert all(0 <= r["Score"] <= 10 for r in reply)
    assert reply[2]["Score"] == 0  # unknown
    assert reply[0]["Score"] > reply[1]["Score"]  # LeastAllocated prefers the big node
    assert svc.assumed_count == 1  # the winner is charged (after the reply) until it binds


def test_nodes_items_are_read_when_node_names_is_absent() -> None:
    body = json.dumps({"Pod": ko.pod("p"), "Nodes": {"items": [ko.node("n1"), ko.node("n2")]}})
    _, names, _ = parse_args(body.encode())
    assert names == ["n1", "n2"]


@pytest.mark.parametrize(
    ("body", "status", "reason", "message"),
    [(b"{nope", 400, "malformed_json", "not JSON"),
     (b"[1, 2]", 400, "bad_request", "JSON object"),
     (b'{"NodeNames": ["n0"]}', 400, "bad_pod", "Pod"),
     (b'{"Pod": {}, "NodeNames": null}', 400, "bad_request", "neither NodeNames"),
     (b'{"Pod": {}, "NodeNames": [1]}', 400, "bad_request", "list of strings"),
     (b'{"Pod": {"spec": {"containers": [{"resources": {"requests": {"cpu": "x"}}}]}},'
      b' "NodeNames": ["n0"]}', 400, "bad_pod", "requests[cpu]"),
     (b'{"Pod": {"spec": {}}, "NodeNames": ["a", "b"]}', 404, "unknown_nodes", "unknown node"),
     (b'{"Pod": {"spec": {}}, "NodeNames": []}', 400, "bad_request", "no candidate")],
)
def test_bad_requests_get_a_clear_error_and_are_counted(
    body: bytes, status: int, reason: str, message: str
) -> None:
    svc = service()
    got, out = ExtenderApp(svc).prioritize(body)
    assert got == status
    assert message in json.loads(out)["error"]
    assert svc.metrics.errors.labels("http", reason)._value.get() == 1


def test_not_ready_is_503() -> None:
    got, out = ExtenderApp(service(start=False)).prioritize(args(["n0"]))
    assert got == 503 and "not synced" in json.loads(out)["error"]


def test_filter_reply_is_an_extender_filter_result() -> None:
    status, body = ExtenderApp(service()).filter(args(["n0", "n3"], cpu="6"))
    reply = json.loads(body)
    assert status == 200
    assert reply["NodeNames"] == ["n3"] and list(reply["FailedNodes"]) == ["n0"]
    assert reply["Error"] == "" and reply["Nodes"] is None


def test_filter_answers_whole_nodes_to_a_scheduler_that_sent_whole_nodes() -> None:
    """Without nodeCacheCapable, kube-scheduler's HTTPExtender.Filter (pkg/scheduler/
    extender.go) ignores the reply's NodeNames and keeps only ``result.Nodes.Items``: a
    reply with ``"Nodes": null`` filters every node out."""
    sent = [ko.node(f"n{i}", cpu=str(4 * (i + 1)), gpus=2, model="A100") for i in range(4)]
    sent.append(ko.node("ghost"))
    body = json.dumps({"Pod": ko.pod("p", cpu="6"), "Nodes": {"items": [sent[0], sent[3],
                                                                        sent[4]]},
                       "NodeNames": None}).encode()
    status, out = ExtenderApp(service()).filter(body)
    reply = json.loads(out)
    assert status == 200 and list(reply["FailedNodes"]) == ["n0"]
    assert reply["Nodes"] == {"items": [sent[3], sent[4]]}  # as sent, unknown nodes pass


def test_request_error_reasons_are_known() -> None:
    with pytest.raises(ValueError, match="unknown error reason"):
        RequestError("oops", "x")


@given(st.lists(st.integers(0, 100), max_size=3000))
def test_grpc_score_bytes_decode_as_a_score_response(scores: list[int]) -> None:
    import numpy as np

    from dsan.api.gen.scorer_v1 import scorer_pb2
    from sidecar.grpc_server import encode_scores

    tail = scorer_pb2.ScoreResponse(policy="p", unknown_nodes=2).SerializeToString()
    out = scorer_pb2.ScoreResponse.FromString(encode_scores(np.array(scores, np.int64)) + tail)
    assert list(out.scores) == scores and out.policy == "p" and out.unknown_nodes == 2


def test_priorities_encoding_refuses_scores_outside_extender_range() -> None:
    with pytest.raises(ValueError, match=r"0\.\.10"):
        encode_priorities(["a", "b"], [3, 11])
    with pytest.raises(ValueError, match="2 scores"):
        encode_priorities(["a", "b"], [3])
    with pytest.raises(ValueError, match=r"0\.\.10"):  # a negative one (wraps as uint64)
        encode_priorities(["a", "b"], [-1, 3])
    assert encode_priorities([], []) == b"[]"
    assert json.loads(encode_priorities(["a", "b"], [0, 10])) == [
        {"Host": "a", "Score": 0}, {"Host": "b", "Score": 10}]


def test_grpc_scores_encoding_refuses_scores_past_one_byte_varints() -> None:
    import numpy as np

    from sidecar.grpc_server import encode_scores

    for bad in ([128], [-1, 5], [5, -(2**63)]):
        for dtype in (np.int64, np.int32):
            if dtype is np.int32 and min(bad) < -(2**31):
                continue
            with pytest.raises(ValueError, match=r"0\.\.127"):
                encode_scores(np.array(bad, dtype=dtype))
    assert encode_scores(np.array([0, 127], dtype=np.int32)) == \
        encode_scores(np.array([0, 127], dtype=np.int64))
    assert encode_scores(np.zeros(0, dtype=np.int64)) == b""


@pytest.mark.parametrize("cpu", ["1e999998", "1e999999", "1e300000", "9e999999Ki"])
def test_cpu_quantities_past_any_range_are_400s_naming_the_field(cpu: str) -> None:
    """Issue 34, defect 3: these answered 500 with decimal.Overflow's name, unlogged."""
    svc = service()
    for verb in ("prioritize", "filter"):
        status, out = getattr(ExtenderApp(svc), verb)(args(["n0"], cpu=cpu))
        assert status == 400, out
        assert "requests[cpu]" in json.loads(out)["error"]
    assert svc.metrics.errors.labels("http", "bad_pod")._value.get() == 2


@pytest.mark.parametrize("verb", ["prioritize", "filter"])
def test_an_unexpected_error_is_a_500_carrying_the_request_id_it_was_logged_with(
        verb: str, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    svc = service()

    def boom(*a: Any, **k: Any) -> Any:
        raise ZeroDivisionError("an internal detail")

    monkeypatch.setattr(svc.engine, "score" if verb == "prioritize" else "filter", boom)
    with caplog.at_level("ERROR", logger="dsan.sidecar"):
        status, out = getattr(ExtenderApp(svc), verb)(args(["n0"]))
    assert status == 500
    reply = json.loads(out)
    assert "ZeroDivisionError" not in out.decode() and "internal detail" not in out.decode()
    rid = reply["requestId"]
    assert len(rid) == 16 and rid in reply["error"]
    logged = [r for r in caplog.records if rid in r.getMessage()]
    assert len(logged) == 1 and logged[0].exc_info is not None
    assert svc.metrics.errors.labels("http", "internal")._value.get() == 1
