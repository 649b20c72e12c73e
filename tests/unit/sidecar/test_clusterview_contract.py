"""The ClusterView contract, run against the fake here and against a real kube-apiserver in
tests/integration/sidecar/test_informer.py (same assertions, via check_contract)."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from sidecar.cache import GraphCache
from sidecar.config import SidecarConfig
from tests.support import kubeobjects as ko
from tests.support.fakes import FakeClusterView

Apply = Callable[[str, str, dict[str, Any]], None]


def wait_for(cond: Callable[[], bool], timeout: float = 10.0) -> bool:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if cond():
            return True
        time.sleep(0.02)
    return cond()


def check_contract(cache: GraphCache, view: Any, apply: Apply, timeout: float = 10.0) -> None:
    """Start with one node, then add, bind, update and delete through ``apply``."""
    view.start()
    try:
        assert wait_for(view.synced, timeout), "view never synced"
        assert "cv-0" in cache.snapshot().index
        apply("nodes", "ADDED", ko.node("cv-1", cpu="16", gpus=4, model="A100"))
        assert wait_for(lambda: "cv-1" in cache.snapshot().index, timeout)
        apply("pods", "ADDED", ko.pod("cvp", cpu="2", gpus=1, node_name="cv-1"))

        def charged() -> bool:
            pub = cache.snapshot()
            return bool(pub.snap.cpu_used[pub.index["cv-1"]] == 2000)

        assert wait_for(charged, timeout)
        apply("nodes", "MODIFIED", ko.node("cv-1", cpu="32", gpus=4, model="A100"))
        assert wait_for(lambda: cache.snapshot().snap.cpu_cap[
            cache.snapshot().index["cv-1"]] == 32000, timeout)
        assert charged()  # an update keeps the node's pods
        apply("pods", "DELETED", ko.pod("cvp", cpu="2", gpus=1, node_name="cv-1"))
        assert wait_for(lambda: not charged(), timeout)
        apply("nodes", "DELETED", ko.node("cv-1"))
        assert wait_for(lambda: "cv-1" not in cache.snapshot().index, timeout)
        assert view.lag_seconds("nodes") < 60
    finally:
        view.stop()


def test_fake_view_meets_the_contract() -> None:
    cache = GraphCache(SidecarConfig())
    view = FakeClusterView(cache, nodes=[ko.node("cv-0")])
    check_contract(cache, view, view.apply)


def test_fake_view_is_unsynced_until_started() -> None:
    view = FakeClusterView(GraphCache(SidecarConfig()))
    assert not view.synced()
    view.start()
    assert view.synced()
