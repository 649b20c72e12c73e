"""KubeClusterView's list/watch loop on scripted API responses: resourceVersion threading,
bookmarks, relist on 410 Gone (as an ERROR event and as an HTTP status), backoff on errors,
and a missing GPUTelemetry CRD. The same class runs against a real apiserver in
tests/integration/sidecar/test_informer.py."""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Iterator
from typing import Any

import pytest

from sidecar.cache import GraphCache
from sidecar.clusterview import KubeClusterView
from sidecar.config import SidecarConfig
from tests.support import kubeobjects as ko
from tests.unit.sidecar.test_clusterview_contract import wait_for


class FakeSock:
    """What stop() shuts down to unblock a watch read."""

    def __init__(self, unblock: threading.Event) -> None:
        self.unblock = unblock

    def shutdown(self, how: int) -> None:
        self.unblock.set()


class Resp:
    def __init__(self, data: Any = None, lines: list[dict[str, Any]] | None = None,
                 block: threading.Event | None = None) -> None:
        self.data = json.dumps(data).encode() if data is not None else b""
        self._lines = lines or []
        self._block = block
        self.connection = type("Conn", (), {"sock": FakeSock(block or threading.Event())})()

    def stream(self, amt: Any = None, decode_content: bool = False) -> Iterator[bytes]:
        for ev in self._lines:
            yield json.dumps(ev).encode() + b"\n"
        if self._block is not None:
            self._block.wait(5)

    def release_conn(self) -> None:
        pass


class ApiError(Exception):
    def __init__(self, status: int) -> None:
        super().__init__(f"HTTP {status}")
        self.status = status


class Script:
    """A list function answering from a queue of (kind, payload) steps, recording calls."""

    def __init__(self, steps: list[tuple[str, Any]]) -> None:
        self.steps = steps
        self.calls: list[dict[str, Any]] = []
        self.done = threading.Event()

    def __call__(self, **kw: Any) -> Resp:
        self.calls.append(kw)
        if not self.steps:
            self.done.set()
            return Resp(lines=[], block=threading.Event())  # an idle watch
        kind, payload = self.steps.pop(0)
        if kind == "raise":
            raise ApiError(payload)
        if kind == "list":
            return Resp(data={"metadata": {"resourceVersion": payload[0]}, "items": payload[1]})
        return Resp(lines=payload)


def view(nodes: Script, pods: Script | None = None, tele: Script | None = None
         ) -> tuple[KubeClusterView, GraphCache]:
    cfg = SidecarConfig(backoff_initial_s=0.01, backoff_max_s=0.02)
    cache = GraphCache(cfg)
    v = KubeClusterView.__new__(KubeClusterView)
    KubeClusterView.__init__(v, cfg, cache, api_client=None, list_fns={
        "nodes": nodes, "pods": pods or Script([("list", ("1", []))]),
        "gputelemetries": tele or Script([("list", ("1", []))])})
    return v, cache


def ev(kind: str, obj: dict[str, Any], rv: str) -> dict[str, Any]:
    obj = {**obj, "metadata": {**obj["metadata"], "resourceVersion": rv}}
    return {"type": kind, "object": obj}


def test_watch_continues_from_the_last_resource_version_and_bookmarks() -> None:
    nodes = Script([
        ("list", ("10", [ko.node("a")])),
        ("watch", [ev("ADDED", ko.node("b"), "11"),
                   {"type": "BOOKMARK", "object": {"metadata": {"resourceVersion": "15"}}}]),
        ("watch", [ev("DELETED", ko.node("a"), "16")]),
    ])
    v, cache = view(nodes)
    v.start()
    try:
        assert wait_for(nodes.done.is_set, 5)
        assert sorted(cache.snapshot().index) == ["b"]
        watches = [c for c in nodes.calls if c.get("watch")]
        assert [c["resource_version"] for c in watches[:3]] == ["10", "15", "16"]
        assert all(c["allow_watch_bookmarks"] for c in watches)
        assert nodes.calls[0]["resource_version"] == "0"  # the list reads the watch cache
    finally:
        v.stop()


def test_gone_relists_and_the_relist_replaces_the_node_set() -> None:
    nodes = Script([
        ("list", ("10", [ko.node("a"), ko.node("b")])),
        ("watch", [{"type": "ERROR", "object": {"kind": "Status", "code": 410,
                                                "message": "too old resource version"}}]),
        ("list", ("50", [ko.node("b"), ko.node("c")])),  # a vanished while we were away
        ("raise", 410),  # also as an HTTP status
        ("list", ("60", [ko.node("c")])),
    ])
    v, cache = view(nodes)
    v.start()
    try:
        assert wait_for(nodes.done.is_set, 5)
        assert sorted(cache.snapshot().index) == ["c"]
        assert v.relists("nodes") == 3
        # After a 410 the relist reads etcd (""), not the watch cache ("0") that may still be
        # behind what expired, as client-go's reflector does.
        lists = [c["resource_version"] for c in nodes.calls if not c.get("watch")]
        assert lists == ["0", "", ""]
    finally:
        v.stop()


def test_errors_back_off_and_recover_and_missing_crd_counts_as_synced() -> None:
    nodes = Script([("raise", 500), ("raise", 503), ("list", ("5", [ko.node("z")]))])
    tele = Script([("raise", 404)])
    v, cache = view(nodes, tele=tele)
    v.start()
    try:
        assert wait_for(v.synced, 5)
        assert "z" in cache.snapshot().index
        assert len([c for c in nodes.calls if not c.get("watch")]) == 3
    finally:
        v.stop()


def test_not_synced_until_every_resource_listed() -> None:
    nodes = Script([("raise", 500)] * 1000)
    v, _ = view(nodes)
    v.start()
    try:
        assert not wait_for(v.synced, 0.3)
    finally:
        v.stop()


def test_malformed_objects_are_counted_logged_once_and_never_block_sync(
        caplog: pytest.LogCaptureFixture) -> None:
    """Issue 34, defect 2: a bound pod whose CPU request overflowed (``1e999999``) raised
    out of the cache; the pods informer relisted every 5 s forever, the sidecar never became
    ready, and nothing named the pod. Now every malformed object is counted by kind, logged
    once with its namespace/name, and skipped; the rest of the list lands."""
    hog = ko.pod("hog", cpu="1e999999", node_name="a", namespace="team")
    hog["metadata"]["resourceVersion"] = "7"
    nodes = Script([("list", ("1", [ko.node("a"), ko.node("huge", cpu="1e999999"),
                                    {"metadata": "x"}, 5]))])
    pods = Script([
        ("list", ("1", [hog, ko.pod("ok", cpu="2", node_name="a"), {"metadata": ["x"]}, 5])),
        ("watch", [ev("ADDED", ko.pod("hog2", memory="1e999998", node_name="a"), "2"),
                   {"type": "DELETED", "object": {"kind": "Pod", "metadata": 3}},
                   {"type": "MODIFIED", "object": ["not", "a", "pod"]},
                   ev("ADDED", ko.pod("fine", cpu="1", node_name="a"), "3")]),
        ("raise", 410),
        ("list", ("9", [hog, ko.pod("ok", cpu="2", node_name="a"),
                        ko.pod("fine", cpu="1", node_name="a")])),  # hog again: not logged
    ])
    tele = Script([("list", ("1", [{"kind": "GPUTelemetry", "metadata": {"name": "a"}}]))])
    with caplog.at_level(logging.WARNING, logger="dsan.sidecar.cache"):
        v, cache = view(nodes, pods, tele)
        v.start()
        try:
            assert wait_for(pods.done.is_set, 5) and wait_for(v.synced, 5)
            assert v.relists("pods") == 2 and v.relists("nodes") == 1
            assert cache.bad_objects == {"node": 3, "pod": 7, "telemetry": 1}
            assert sorted(cache.snapshot().index) == ["a"]
            assert cache.snapshot().snap.cpu_used[0] == 3000  # "ok" and "fine" are charged
        finally:
            v.stop()
    hog_lines = [r.getMessage() for r in caplog.records if "team/hog " in r.getMessage()]
    assert len(hog_lines) == 1, hog_lines
    assert "requests[cpu]" in hog_lines[0] and "out of range" in hog_lines[0]
    assert any("node huge" in r.getMessage() for r in caplog.records)
    assert any("telemetry a " in r.getMessage() for r in caplog.records)
