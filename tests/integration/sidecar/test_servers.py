"""The sidecar's HTTP and gRPC servers, for real on loopback."""

from __future__ import annotations

import os
import socket
import statistics
import time
from typing import Any

import grpc
import httpx
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from dsan.api.gen.scorer_v1 import scorer_pb2, scorer_pb2_grpc
from tests.support import kubeobjects as ko

pytestmark = pytest.mark.integration
NAMES = [f"node-{i:05d}" for i in range(50)]


def base(sc: Any) -> str:
    return sc.extender_url.rsplit("/", 1)[0]


def body(names: list[str], **pod: Any) -> dict[str, Any]:
    return {"Pod": ko.pod("p", **pod), "Nodes": None, "NodeNames": names}


def metric(text: str, prefix: str) -> float:
    for line in text.splitlines():
        if line.startswith(prefix):
            return float(line.rsplit(" ", 1)[1])
    raise AssertionError(f"{prefix} not in /metrics")


def test_readyz_follows_informer_sync_and_grpc_health_too(grpc_via: Any) -> None:
    sc, view, target = grpc_via(ready=False)
    with httpx.Client() as c:
        assert c.get(base(sc) + "/healthz").status_code == 200
        assert c.get(base(sc) + "/readyz").status_code == 503
        r = c.post(sc.extender_url + "/prioritize", json=body(NAMES[:2]))
        assert r.status_code == 503
        ch = grpc.insecure_channel(target)
        with pytest.raises(grpc.RpcError) as exc:
            scorer_pb2_grpc.ScorerStub(ch).NodeTable(scorer_pb2.NodeTableRequest())
        assert exc.value.code() == grpc.StatusCode.UNAVAILABLE
        health = health_pb2_grpc.HealthStub(ch)
        check = health_pb2.HealthCheckRequest(service="dsan.scorer.v1.Scorer")
        assert health.Check(check).status == health_pb2.HealthCheckResponse.NOT_SERVING
        view.open()
        assert sc.wait_ready(5)
        assert c.get(base(sc) + "/readyz").status_code == 200
        deadline = time.monotonic() + 5
        while health.Check(check).status != health_pb2.HealthCheckResponse.SERVING:
            assert time.monotonic() < deadline, "gRPC health never turned SERVING"
            time.sleep(0.05)
        ch.close()


def test_prioritize_and_filter_over_keep_alive_without_nagle_stalls(sidecar_factory: Any) -> None:
    sc, _ = sidecar_factory()
    with httpx.Client() as c:
        times = []
        for _ in range(15):
            t = time.perf_counter()
            r = c.post(sc.extender_url + "/prioritize", json=body(NAMES, gpus=1))
            times.append(time.perf_counter() - t)
            assert r.status_code == 200
        reply = r.json()
        assert [h["Host"] for h in reply] == NAMES
        assert max(h["Score"] for h in reply) == 10
        # The stdlib server stalls ~44 ms per keep-alive request with Nagle on (field notes).
        assert statistics.median(times) < 0.040, times
        f = c.post(sc.extender_url + "/filter", json=body(NAMES[:4], gpus=1)).json()
        assert f["NodeNames"] == ["node-00000", "node-00002"]  # the odd nodes have no GPUs
        assert set(f["FailedNodes"]) == {"node-00001", "node-00003"}


def test_bad_input_gets_4xx_is_counted_and_the_server_keeps_serving(
    sidecar_factory: Any,
) -> None:
    sc, _ = sidecar_factory(max_body_bytes=4096)
    url = sc.extender_url + "/prioritize"
    with httpx.Client() as c:
        assert c.post(url, content=b"{oops").status_code == 400
        assert c.post(url, json=body(["ghost-1", "ghost-2"])).status_code == 404
        big = c.post(url, json=body([f"n{i:06d}" for i in range(1000)]))
        assert big.status_code == 413 and "exceeds the limit of 4096" in big.json()["error"]
        assert c.post(sc.extender_url + "/nope", json={}).status_code == 404
        assert c.post(url, json=body(NAMES[:3])).status_code == 200  # still serving
        text = c.get(base(sc) + "/metrics").text
    errors = 'dsan_sidecar_request_errors_total{api="http",reason="%s"}'
    for reason in ("malformed_json", "unknown_nodes", "too_large"):
        assert metric(text, errors % reason) == 1



def test_raw_requests_without_length_get_411(sidecar_factory: Any) -> None:
    sc, _ = sidecar_factory()
    port = sc.http.port
    with socket.create_connection(("127.0.0.1", port), timeout=5) as s:
        s.sendall(b"POST /dsan/prioritize HTTP/1.1\r\nHost: x\r\n\r\n")
        assert s.recv(4096).startswith(b"HTTP/1.1 411")


def test_metrics_expose_latency_per_phase_policy_and_cache(sidecar_factory: Any) -> None:
    sc, view = sidecar_factory(n=20)
    view.apply("pods", "ADDED", ko.pod("p"))
    with httpx.Client() as c:
        for _ in range(3):
            c.post(sc.extender_url + "/prioritize", json=body(NAMES[:20]))
        text = c.get(base(sc) + "/metrics").text
    for phase in ("featurize", "model", "total"):
        assert metric(text, "dsan_sidecar_score_latency_seconds_count"
                            f'{{api="http",phase="{phase}"}}') == 3
    assert metric(text, 'dsan_sidecar_candidate_nodes_sum{api="http"}') == 60
    assert 'dsan_sidecar_policy_info{fallback="fgd",policy="fgd",version="fgd"} 1.0' in text
    assert metric(text, "dsan_sidecar_cache_nodes") == 20
    assert metric(text, "dsan_sidecar_ready") == 1
    assert metric(text, "dsan_sidecar_cpus") == len(os.sched_getaffinity(0))
    # load_policies held numpy's BLAS to the config's one thread (the fixture's sidecar)
    assert metric(text, 'dsan_sidecar_compute_threads{pool="blas"}') == 1
    assert metric(text, 'dsan_sidecar_informer_lag_seconds{resource="pods"}') >= 0
    assert metric(text, "dsan_sidecar_cache_assumed_pods") == 1  # same pod, re-assumed


def test_grpc_score_is_columnar_and_errors_have_clear_statuses(grpc_via: Any) -> None:
    sc, _, target = grpc_via()
    ch = grpc.insecure_channel(target)
    stub = scorer_pb2_grpc.ScorerStub(ch)
    pod = scorer_pb2.Pod(name="g", namespace="ns", uid="u-g",
                         requests={"cpu": "2", "nvidia.com/gpu": "1"})
    r = stub.Score(scorer_pb2.ScoreRequest(pod=pod, node_names=[*NAMES[:6], "ghost"]))
    assert len(r.scores) == 7 and r.policy == "fgd" and r.unknown_nodes == 1
    assert r.scores[6] == 0 and max(r.scores) == 100
    assert all(s == 0 for s in r.scores[1:6:2])  # CPU-only nodes cannot host a GPU pod
    raw = ch.unary_unary("/dsan.scorer.v1.Scorer/Score")
    cases = [
        (b"\xff\xff\xff", grpc.StatusCode.INVALID_ARGUMENT, "not a dsan.scorer.v1.ScoreRequest"),
        (scorer_pb2.ScoreRequest(node_names=NAMES[:2]).SerializeToString(),
         grpc.StatusCode.INVALID_ARGUMENT, "pod.name is empty"),
        (scorer_pb2.ScoreRequest(pod=pod).SerializeToString(),
         grpc.StatusCode.INVALID_ARGUMENT, "no candidate"),
        (scorer_pb2.ScoreRequest(pod=scorer_pb2.Pod(name="x", requests={"cpu": "lots"}),
                                 node_names=NAMES[:2]).SerializeToString(),
         grpc.StatusCode.INVALID_ARGUMENT, "requests[cpu]"),
        (scorer_pb2.ScoreRequest(pod=pod, node_names=["ghost"]).SerializeToString(),
         grpc.StatusCode.NOT_FOUND, "unknown node names"),
    ]
    for payload, code, message in cases:
        with pytest.raises(grpc.RpcError) as exc:
            raw(payload)
        assert exc.value.code() == code and message in exc.value.details()
    assert len(stub.Score(scorer_pb2.ScoreRequest(pod=pod, node_names=NAMES[:3])).scores) == 3
    ch.close()
    text = httpx.get(base(sc) + "/metrics").text
    assert metric(text, 'dsan_sidecar_request_errors_total{api="grpc",reason="bad_protobuf"}') == 1
    assert metric(text, 'dsan_sidecar_score_latency_seconds_count{api="grpc",phase="total"}') == 2


def test_grpc_node_table_rows_score_as_names_and_a_stale_table_is_refused(
        grpc_via: Any) -> None:
    import numpy as np

    sc, view, target = grpc_via()
    ch = grpc.insecure_channel(target)
    stub = scorer_pb2_grpc.ScorerStub(ch)
    table = stub.NodeTable(scorer_pb2.NodeTableRequest())
    assert sorted(table.node_names) == NAMES
    index = {n: i for i, n in enumerate(table.node_names)}
    pod = scorer_pb2.Pod(name="g", namespace="ns", requests={"cpu": "2", "nvidia.com/gpu": "1"})
    picks = [NAMES[7], NAMES[2], NAMES[30], NAMES[11], NAMES[2]]
    rows = np.array([index[n] for n in picks], dtype="<u4").tobytes()
    by_name = stub.Score(scorer_pb2.ScoreRequest(pod=pod, node_names=picks))
    assert by_name.node_table_epoch == table.epoch
    pod.uid = "u-2"  # another pod: the first one's assumption is seen by both calls below
    by_row = stub.Score(scorer_pb2.ScoreRequest(pod=pod, node_indices=rows,
                                                node_table_epoch=table.epoch))
    again = stub.Score(scorer_pb2.ScoreRequest(pod=pod, node_names=picks))
    assert list(by_row.scores) == list(again.scores) and max(by_row.scores) == 100
    cases = [
        (scorer_pb2.ScoreRequest(pod=pod, node_indices=rows, node_table_epoch=table.epoch + 1),
         grpc.StatusCode.FAILED_PRECONDITION, "fetch the table again"),
        (scorer_pb2.ScoreRequest(pod=pod, node_indices=rows[:5], node_table_epoch=table.epoch),
         grpc.StatusCode.INVALID_ARGUMENT, "not 4 per node"),
        (scorer_pb2.ScoreRequest(pod=pod, node_indices=np.array([50], "<u4").tobytes(),
                                 node_table_epoch=table.epoch),
         grpc.StatusCode.INVALID_ARGUMENT, "out of range"),
        (scorer_pb2.ScoreRequest(pod=pod, node_indices=rows, node_names=picks,
                                 node_table_epoch=table.epoch),
         grpc.StatusCode.INVALID_ARGUMENT, "both"),
    ]
    for req, code, message in cases:
        with pytest.raises(grpc.RpcError) as exc:
            stub.Score(req)
        assert exc.value.code() == code and message in exc.value.details()
    view.apply("nodes", "ADDED", ko.node("node-new", cpu="8"))  # a new node set: a new table
    deadline = time.monotonic() + 5
    while stub.Score(scorer_pb2.ScoreRequest(pod=pod, node_names=picks)).node_table_epoch \
            == table.epoch:
        assert time.monotonic() < deadline
        time.sleep(0.05)
    with pytest.raises(grpc.RpcError) as exc:
        stub.Score(scorer_pb2.ScoreRequest(pod=pod, node_indices=rows,
                                           node_table_epoch=table.epoch))
    assert exc.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    assert len(stub.NodeTable(scorer_pb2.NodeTableRequest()).node_names) == len(NAMES) + 1
    ch.close()
    text = httpx.get(base(sc) + "/metrics").text
    assert metric(text, 'dsan_sidecar_request_errors_total{api="grpc",'
                        'reason="stale_node_table"}') == 2


def test_concurrent_clients_on_both_apis_all_get_answers(sidecar_factory: Any) -> None:
    from concurrent.futures import ThreadPoolExecutor

    sc, view = sidecar_factory()
    for k in range(3):  # every pod pending for dsan-scheduler, as the informer saw it
        for i in range(10):
            view.apply("pods", "ADDED", ko.pod("p", uid=f"h{k}-{i}"))
            view.apply("pods", "ADDED", ko.pod(f"g{k}-{i}", uid=f"g{k}-{i}"))

    def http_client(k: int) -> int:
        with httpx.Client() as c:
            for i in range(10):
                r = c.post(sc.extender_url + "/prioritize",
                           json=body(NAMES, gpus=1, uid=f"h{k}-{i}"))
                assert r.status_code == 200 and len(r.json()) == len(NAMES)
        return 10

    def grpc_client(k: int) -> int:
        ch = grpc.insecure_channel(sc.grpc_target)
        stub = scorer_pb2_grpc.ScorerStub(ch)
        for i in range(10):
            pod = scorer_pb2.Pod(name=f"g{k}-{i}", uid=f"g{k}-{i}", requests={"cpu": "1"})
            assert len(stub.Score(scorer_pb2.ScoreRequest(pod=pod, node_names=NAMES)).scores) \
                == len(NAMES)
        ch.close()
        return 10

    with ThreadPoolExecutor(6) as pool:
        done = [pool.submit(http_client, k) for k in range(3)]
        done += [pool.submit(grpc_client, k) for k in range(3)]
        assert sum(f.result(timeout=60) for f in done) == 60
    # Every request assumed its own pod on its best node.
    assert sc.service.assumed_count == 60


def test_a_wrong_method_is_a_405_naming_the_allowed_ones_and_an_unknown_path_a_404_counted(
        sidecar_factory: Any) -> None:
    """The routes exist for one method each: another one is a 405 with Allow (RFC 9110,
    15.5.6), not a 404 saying there is no such endpoint; every refusal is counted."""
    sc, _ = sidecar_factory(n=10)
    with httpx.Client() as c:
        for method in ("GET", "HEAD"):
            r = c.request(method, sc.extender_url + "/prioritize")
            assert r.status_code == 405 and r.headers["Allow"] == "POST", (method, r.text)
        r = c.get(sc.extender_url + "/filter")
        assert r.status_code == 405 and "method GET not allowed (POST)" in r.json()["error"]
        r = c.post(base(sc) + "/healthz", content=b"{}")
        assert r.status_code == 405 and r.headers["Allow"] == "GET, HEAD"
        assert c.post(sc.extender_url + "/nope", json={}).status_code == 404
        assert c.get(base(sc) + "/nope").status_code == 404
        assert c.post(sc.extender_url + "/prioritize", json=body(NAMES[:3])).status_code == 200
        text = c.get(base(sc) + "/metrics").text
    errors = 'dsan_sidecar_request_errors_total{api="http",reason="%s"}'
    assert metric(text, errors % "method_not_allowed") == 4
    assert metric(text, errors % "not_found") == 2
