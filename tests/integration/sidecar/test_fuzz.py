"""Hypothesis against one live sidecar (fgd, 10 nodes, real HTTP and gRPC servers): whatever a
caller sends and whatever the informers deliver, every request gets a clear answer, nothing
crashes, no request costs the sidecar more than 50 ms of CPU, and /healthz answers within
100 ms throughout.

Each run sends at least 10,000 generated requests (6,000 HTTP, 4,000 gRPC) and feeds at least
2,000 generated cluster objects through the cache's object parser; every test asserts its
own count. Examples are batches (one Hypothesis example = 25 requests or objects), so the
engine's per-example cost is paid 400 times, not 10,000. The batches mix well-formed
objects with hostile values at any depth: quantities past any range or outside the grammar,
priorities past int32, annotations of the wrong type, junk in place of whole sections,
conflicting HTTP framing, arbitrary bytes.

Statuses allowed: 200 and the 4xx the APIs document; over gRPC OK, INVALID_ARGUMENT,
NOT_FOUND, FAILED_PRECONDITION, RESOURCE_EXHAUSTED (a message past the size limit). The only
5xx allowed are what HTTP/1.1 prescribes for a request line the server cannot take at all,
and only for the raw requests that send one: 501 for a method no server knows (``BREW``) and
505 for an HTTP version other than 1.x.
"""

from __future__ import annotations

import http.client
import json
import multiprocessing
import socket
from collections.abc import Iterator
from dataclasses import dataclass
from multiprocessing.connection import Connection
from typing import Any

import grpc
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dsan.api.gen.scorer_v1 import scorer_pb2
from tests.support import kubeobjects as ko

pytestmark = pytest.mark.integration
NAMES = [f"node-{i:05d}" for i in range(10)]
BATCH = 25
HTTP_REQUESTS, GRPC_REQUESTS, OBJECTS = 6000, 4000, 2000
CPU_BUDGET_S = 0.050
HEALTHZ_BUDGET_S = 0.100
#: Pods the fixture's informer has seen pending for dsan-scheduler: requests naming them
#: are assumed (the settle path runs too), the rest only scored.
PENDING_UIDS = [f"fz-{i}" for i in range(8)]


def runs(total: int) -> Any:
    return settings(max_examples=total // BATCH, deadline=None, database=None,
                    suppress_health_check=list(HealthCheck))


# --- values ------------------------------------------------------------------------------------
HOSTILE_QUANTITIES = [
    "1e999998", "1e999999", "1e300000", "-1e999999", "1e-999999", "9e999999Ki", "1E999999",
    "9223372036854775807", "9223372036854775808", "8Ei", "7Ei", "1e19", "1_000", "\u0661",
    "\uff11", "1 ", " 1", "1\n", "1e", "1e+", "", ".", "+", "-", "-1", "0.1n", "1.5", "NaN",
    "inf", "1K", "1ki", "9" * 64, "9" * 65, "1" * 5000, "500m", "2Gi", "4", "1", "0", "8",
    "250", "999", "1000", "1001"]
quantities = st.one_of(
    st.sampled_from(HOSTILE_QUANTITIES),
    st.text(alphabet="0123456789.+-eEKMGTPinumk _", max_size=10),
    st.integers(-(2**70), 2**70), st.floats(), st.booleans(), st.none())
json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**70), 2**70) | st.floats(allow_nan=False)
    | st.text(max_size=6),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner,
                                                                max_size=3),
    max_leaves=6)
names = st.one_of(st.sampled_from(NAMES), st.text(max_size=8))
annotation_values = st.one_of(st.sampled_from(["300", "1000", "0", "1001", " 300", "3_00",
                                               "\u0663\u0660\u0660", "A100|V100", "train",
                                               "web", ""]),
                              st.text(max_size=6), json_values)
priorities = st.one_of(st.integers(-(2**31), 2**31 - 1), st.sampled_from(
    [2**31, -(2**31) - 1, 2**63, 2**64, True, None, 1.0, "5"]), json_values)


@st.composite
def pods(draw: st.DrawFn) -> Any:
    """A Pod as kube-scheduler sends it, then hostile at any depth."""
    shape = draw(st.integers(0, 19))
    if shape == 0:
        return draw(json_values)
    pod = ko.pod("p", namespace=draw(st.sampled_from(["default", "ns"])),
                 uid=draw(st.sampled_from([*PENDING_UIDS, "made-up"])))
    spec = pod["spec"]
    containers = []
    for i in range(draw(st.integers(0, 3))):
        req = draw(st.dictionaries(st.sampled_from(
            ["cpu", "memory", "nvidia.com/gpu", "dsan.io/gpu-milli", "x"]), quantities,
            max_size=4))
        res = {draw(st.sampled_from(["requests", "limits"])): req}
        containers.append({"name": f"c{i}", "resources": draw(st.just(res) | json_values)
                           if shape == 1 else res})
    spec["containers"] = containers
    if draw(st.integers(0, 3)) == 0:
        spec["initContainers"] = [{"name": "i", "resources": {"requests": draw(
            st.dictionaries(st.sampled_from(["cpu", "memory"]), quantities, max_size=2))}}]
    if draw(st.integers(0, 4)) == 0:
        spec["overhead"] = draw(st.dictionaries(st.sampled_from(["cpu", "memory"]),
                                                quantities, max_size=2) | json_values)
    if draw(st.booleans()):
        spec["priority"] = draw(priorities)
    spec["schedulerName"] = draw(st.sampled_from(["dsan-scheduler", "dsan-scheduler",
                                                  "default-scheduler", None, 5]))
    pod["metadata"]["annotations"] = draw(st.dictionaries(st.sampled_from(
        ["dsan.io/gpu-milli", "dsan.io/gpu-models", "dsan.io/task-type", "other"]),
        annotation_values, max_size=3))
    if shape == 2:
        pod["spec"] = draw(json_values)
    elif shape == 3:
        pod["metadata"] = draw(json_values)
    return pod


# --- HTTP -----------------------------------------------------------------------------------------
@dataclass(frozen=True)
class HttpCall:
    method: str
    path: str
    body: bytes
    raw: bytes | None = None  # sent as is on a fresh connection (framing and request lines)


RAW_LINES = [b"BREW /dsan/prioritize HTTP/1.1", b"POST /dsan/prioritize HTTP/2.0",
             b"POST /dsan/prioritize", b"GARBAGE", b"POST " + b"x" * 70000 + b" HTTP/1.1",
             b"POST /dsan/prioritize HTTP/1.1"]
RAW_HEADERS = [[b"Content-Length: %d", b"Content-Length: 3"], [b"Content-Length: %d, 9"],
               [b"Content-Length: %d", b"Transfer-Encoding: chunked"],
               [b"Transfer-Encoding: gzip"], [b"Content-Length: +%d"], [b"Content-Length: -1"],
               [b"Content-Length: 99999999999999999999"], [b"X: " + b"y" * 70000],
               [b"Transfer-Encoding: chunked"], [], [b"Content-Length: %d"]]


@st.composite
def http_calls(draw: st.DrawFn) -> HttpCall:
    kind = draw(st.integers(0, 39))
    verb = draw(st.sampled_from(["prioritize", "prioritize", "filter"]))
    if kind == 0:
        return HttpCall("GET", draw(st.sampled_from(["/healthz", "/readyz", "/nope", "/dsan"])),
                        b"")
    if kind == 1:
        return HttpCall(draw(st.sampled_from(["PUT", "DELETE", "PATCH", "OPTIONS", "HEAD"])),
                        f"/dsan/{verb}", b"{}")
    if kind == 2:
        return HttpCall("POST", draw(st.sampled_from(["/dsan/nope", "/", "/dsan/prioritize?x=1"])),
                        b"{}")
    if kind in (3, 4):  # raw: framing and request lines
        body = json.dumps({"Pod": ko.pod("p"), "NodeNames": NAMES[:3]}).encode()
        line = draw(st.sampled_from(RAW_LINES))
        headers = [h % len(body) if b"%d" in h else h for h in draw(st.sampled_from(RAW_HEADERS))]
        payload = draw(st.sampled_from([body, b"3\r\nabc\r\n0\r\n\r\n", b"zz\r\n", b""]))
        raw = b"\r\n".join([line, b"Host: x", b"Connection: close", *headers]) + b"\r\n\r\n"
        return HttpCall("RAW", "", b"", raw + payload)
    if kind == 5:
        return HttpCall("POST", f"/dsan/{verb}", draw(st.binary(max_size=64)))
    if kind == 6:
        return HttpCall("POST", f"/dsan/{verb}", json.dumps(draw(json_values)).encode())
    args: dict[str, Any] = {"Pod": draw(pods()), "Nodes": None}
    form = draw(st.integers(0, 9))
    if form == 0:
        args["Nodes"] = {"items": draw(st.lists(st.sampled_from(
            [ko.node(NAMES[0]), {"metadata": {}}, {"metadata": {"name": 5}}, 7]), max_size=3))}
    elif form == 1:
        args["NodeNames"] = draw(json_values)
    else:
        args["NodeNames"] = draw(st.lists(names, max_size=12))
    return HttpCall("POST", f"/dsan/{verb}", json.dumps(args).encode())


class HttpClient:
    """One keep-alive connection (reopened when the server closes it)."""

    def __init__(self, port: int) -> None:
        self.port = port
        self.conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)

    def call(self, c: HttpCall) -> tuple[int, bytes]:
        if c.raw is not None:
            return self._raw(c.raw)
        headers = {"Content-Type": "application/json"} if c.method != "GET" else {}
        try:
            self.conn.request(c.method, c.path, c.body if c.method != "GET" else None,
                              headers)
            resp = self.conn.getresponse()
            out = resp.read()
        except (http.client.HTTPException, OSError):
            self.conn.close()  # a closed keep-alive connection: once more on a fresh one
            self.conn.request(c.method, c.path, c.body if c.method != "GET" else None,
                              headers)
            resp = self.conn.getresponse()
            out = resp.read()
        if resp.will_close:
            self.conn.close()
        return resp.status, out

    def _raw(self, data: bytes) -> tuple[int, bytes]:
        with socket.create_connection(("127.0.0.1", self.port), timeout=5) as s:
            try:
                s.sendall(data)
                s.shutdown(socket.SHUT_WR)  # all sent: a body shorter than announced ends
            except OSError:  # the server answered and closed before taking all of it
                pass
            out = b""
            try:
                while chunk := s.recv(65536):
                    out += chunk
            except ConnectionResetError:
                pass
        assert out.startswith(b"HTTP/1."), (data[:100], out[:100])
        return int(out.split(b" ", 2)[1]), out


# --- gRPC -----------------------------------------------------------------------------------------
str_quantities = st.one_of(st.sampled_from(HOSTILE_QUANTITIES),
                           st.text(alphabet="0123456789.+-eEKMGTPinumk _", max_size=10))


@st.composite
def grpc_calls(draw: st.DrawFn) -> tuple[str, bytes]:
    kind = draw(st.integers(0, 19))
    if kind == 0:
        return draw(st.sampled_from(["Score", "NodeTable"])), draw(st.binary(max_size=96))
    if kind == 1:
        return "NodeTable", scorer_pb2.NodeTableRequest().SerializeToString()
    pod = scorer_pb2.Pod(
        name=draw(st.sampled_from(["p", "", "q"]) | st.text(max_size=4)),
        namespace=draw(st.sampled_from(["", "ns"])),
        uid=draw(st.sampled_from([*PENDING_UIDS, "", "made-up"])),
        requests=draw(st.dictionaries(st.sampled_from(
            ["cpu", "memory", "nvidia.com/gpu", "dsan.io/gpu-milli", "x"]), str_quantities,
            max_size=4)),
        annotations=draw(st.dictionaries(st.sampled_from(
            ["dsan.io/gpu-milli", "dsan.io/gpu-models", "dsan.io/task-type", "z"]),
            st.text(max_size=5) | st.sampled_from(["300", "1001", "A100"]), max_size=3)),
        priority=draw(st.integers(-(2**31), 2**31 - 1)))
    req = scorer_pb2.ScoreRequest(pod=pod, node_names=draw(st.lists(names, max_size=12)))
    if kind == 2:  # node-table rows instead (or as well): any bytes, any epoch
        req.node_indices = draw(st.binary(max_size=48))
        req.node_table_epoch = draw(st.integers(0, 2**64 - 1))
    return "Score", req.SerializeToString()


GRPC_OK = {grpc.StatusCode.INVALID_ARGUMENT, grpc.StatusCode.NOT_FOUND,
           grpc.StatusCode.FAILED_PRECONDITION, grpc.StatusCode.RESOURCE_EXHAUSTED}


# --- cluster objects ---------------------------------------------------------------------------
def _paths(obj: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """Every path into a JSON object (for replacing what is there with junk)."""
    out = [prefix]
    if isinstance(obj, dict):
        for k, v in obj.items():
            out += _paths(v, (*prefix, k))
    elif isinstance(obj, list):
        for i, v in enumerate(obj):
            out += _paths(v, (*prefix, i))
    return out


def _replace(obj: Any, path: tuple[Any, ...], value: Any) -> Any:
    if not path:
        return value
    node = obj
    for k in path[:-1]:
        node = node[k]
    node[path[-1]] = value
    return obj


@st.composite
def cluster_objects(draw: st.DrawFn) -> tuple[str, str, Any]:
    resource = draw(st.sampled_from(["nodes", "pods", "pods", "gputelemetries"]))
    event = draw(st.sampled_from(["ADDED", "MODIFIED", "MODIFIED", "DELETED"]))
    i = draw(st.integers(0, 40))
    if resource == "nodes":
        obj = ko.node(f"fz-node-{i}", cpu=draw(quantities), memory=draw(quantities),
                      gpus=draw(st.integers(0, 8)), model=draw(st.sampled_from(["A100", None])))
    elif resource == "pods":
        obj = ko.pod(f"fz-pod-{i}", cpu=draw(quantities), memory=draw(quantities),
                     gpus=draw(st.integers(0, 2)),
                     node_name=draw(st.sampled_from([None, f"fz-node-{i}", *NAMES[:3]])),
                     phase=draw(st.sampled_from(["Pending", "Running", "Succeeded"])))
        obj["spec"]["schedulerName"] = draw(st.sampled_from(["dsan-scheduler", "other", 3]))
    else:
        obj = ko.telemetry(f"fz-node-{i}", [[50.0] * 3] * draw(st.integers(0, 2)))
    if draw(st.integers(0, 2)) > 0:  # junk at some depth: any value, anywhere
        paths = _paths(obj)
        obj = _replace(obj, paths[draw(st.integers(0, len(paths) - 1))],
                       draw(quantities | json_values))
    return resource, event, obj


# --- the sidecar under test (tests/support/fuzzsidecar.py) ------------------------------------
@dataclass
class Live:
    http_port: int
    grpc_target: str
    sidecar: Connection
    prober: Connection

    def check(self) -> dict[str, Any]:
        """The budgets, so far: CPU per request, /healthz answer times."""
        self.sidecar.send(("meter",))
        meter = self.sidecar.recv()
        assert meter["cpu_max"] <= CPU_BUDGET_S, (
            f"a request took {meter['cpu_max'] * 1e3:.1f} ms of sidecar CPU ({meter['worst']})")
        self.prober.send("read")
        probes, slowest, failed = self.prober.recv()
        assert probes > 10 and failed == 0
        assert slowest <= HEALTHZ_BUDGET_S, f"/healthz took {slowest * 1e3:.0f} ms"
        return dict(meter)


@pytest.fixture(scope="module")
def live() -> Iterator[Live]:
    from tests.support import fuzzsidecar

    ctx = multiprocessing.get_context("spawn")  # a clean process, as `dsan serve` is
    sidecar, child = ctx.Pipe()
    healthz_thread = ctx.Value("l", 0)
    server = ctx.Process(target=fuzzsidecar.serve, args=(child, PENDING_UIDS, healthz_thread),
                         name="fuzz-sidecar", daemon=True)
    server.start()
    prober_proc = None
    try:
        assert sidecar.poll(120), "the fuzz sidecar did not start"
        http_port, grpc_target = sidecar.recv()
        prober, prober_child = ctx.Pipe()
        prober_proc = ctx.Process(target=fuzzsidecar.probe_healthz,
                                  args=(prober_child, http_port, server.pid, healthz_thread),
                                  name="fuzz-healthz", daemon=True)
        prober_proc.start()
        yield Live(http_port, grpc_target, sidecar, prober)
        prober.send("stop")
        prober.recv()
        sidecar.send(("stop",))
    finally:
        for proc in (prober_proc, server):
            if proc is not None:
                proc.join(10)
                if proc.is_alive():
                    proc.kill()
                    proc.join(5)


def test_http_requests_get_an_answer_never_a_server_error(live: Live) -> None:
    client = HttpClient(live.http_port)
    sent = 0

    @runs(HTTP_REQUESTS)
    @given(st.lists(http_calls(), min_size=BATCH, max_size=BATCH))
    def batch(calls: list[HttpCall]) -> None:
        nonlocal sent
        for c in calls:
            status, out = client.call(c)
            sent += 1
            if c.raw is not None:
                line = c.raw.split(b"\r\n", 1)[0]
                protocol = (line.startswith(b"BREW") and status == 501) or (
                    b"HTTP/2.0" in line and status == 505)
                assert status in (200, 400, 404, 405, 411, 413, 414, 431, 501) or protocol, \
                    (c.raw[:200], out[:300])
                assert status != 501 or protocol or b"Transfer-Encoding: gzip" in c.raw
                continue
            assert status in (200, 400, 404, 405, 413), (c, out[:300])
            if c.method == "HEAD":
                continue
            if status != 200:
                assert json.loads(out)["error"]
            elif c.path.endswith("/prioritize"):
                reply = json.loads(out)
                assert all(0 <= h["Score"] <= 10 for h in reply)
            elif c.path.endswith("/filter"):
                reply = json.loads(out)
                assert isinstance(reply["NodeNames"], list)

    batch()
    assert sent >= HTTP_REQUESTS
    assert client.call(HttpCall("GET", "/readyz", b""))[0] == 200
    live.check()


def test_grpc_requests_get_a_clear_status_never_internal(live: Live) -> None:
    channel = grpc.insecure_channel(live.grpc_target)
    calls = {m: channel.unary_unary(f"/dsan.scorer.v1.Scorer/{m}")
             for m in ("Score", "NodeTable")}
    sent = 0

    @runs(GRPC_REQUESTS)
    @given(st.lists(grpc_calls(), min_size=BATCH, max_size=BATCH))
    def batch(reqs: list[tuple[str, bytes]]) -> None:
        nonlocal sent
        for method, payload in reqs:
            sent += 1
            try:
                out = calls[method](payload, timeout=10)
            except grpc.RpcError as exc:
                assert exc.code() in GRPC_OK, (method, payload[:200], exc.details())
                assert exc.details()
                continue
            if method == "Score":
                assert all(0 <= s <= 100 for s in scorer_pb2.ScoreResponse.FromString(out).scores)

    batch()
    channel.close()
    assert sent >= GRPC_REQUESTS
    live.check()


def test_cluster_objects_are_applied_or_counted_never_raised(live: Live) -> None:
    """Through the cache's object parser, as informer events: each object is applied or
    counted as bad (never both, never an exception), and the base nodes stay."""
    fed = 0

    @runs(OBJECTS)
    @given(st.lists(cluster_objects(), min_size=BATCH, max_size=BATCH))
    def batch(objs: list[tuple[str, str, Any]]) -> None:
        nonlocal fed
        live.sidecar.send(("apply", objs))
        for (resource, event, _), (raised, bad, in_table, base_ok) in zip(
                objs, live.sidecar.recv(), strict=True):
            fed += 1
            assert not raised and bad in (0, 1) and base_ok
            if resource == "nodes" and event != "DELETED":
                assert in_table or bad, "a Node neither applied nor counted"

    batch()
    assert fed >= OBJECTS
    meter = live.check()
    assert meter["synced"] and sum(meter["bad_objects"].values()) > 0
    client = HttpClient(live.http_port)  # still scoring, on whatever the objects left behind
    status, _ = client.call(HttpCall("POST", "/dsan/prioritize", json.dumps(
        {"Pod": ko.pod("p"), "NodeNames": NAMES}).encode()))
    assert status == 200
    text = client.call(HttpCall("GET", "/metrics", b""))[1].decode()
    assert 'dsan_sidecar_bad_objects_total{kind="pod"}' in text
