"""The real cluster view against a real kube-apiserver (engineer D's control_plane fixture):
the ClusterView contract, convergence after an apiserver restart, and `dsan serve` itself."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from sidecar.cache import GraphCache
from sidecar.clusterview import KubeClusterView, load_api_client
from sidecar.config import SidecarConfig
from tests.support import kubeobjects as ko
from tests.unit.sidecar.test_clusterview_contract import check_contract, wait_for

pytestmark = pytest.mark.e2e
NS = "sidecar-informer"


@pytest.fixture(scope="module")
def cluster(control_plane: Any) -> Iterator[tuple[Any, Any]]:
    from kubernetes import client

    control_plane.ensure_namespace(NS)
    api = control_plane.api_client()
    yield control_plane, client.CoreV1Api(api)
    api.close()


def applier(core: Any) -> Any:
    """ADDED / MODIFIED / DELETED through the API, so the view sees them as watch events."""

    def apply(resource: str, kind: str, obj: dict[str, Any]) -> None:
        name = obj["metadata"]["name"]
        if resource == "nodes":
            if kind == "ADDED":
                core.create_node(obj)
            elif kind == "MODIFIED":
                # Patches, not replaces: kwok writes these nodes' status concurrently.
                core.patch_node(name, {"metadata": {"labels": obj["metadata"]["labels"]}})
                core.patch_node_status(name, {"status": obj["status"]})
            else:
                core.delete_node(name)
        elif resource == "pods":
            if kind == "ADDED":
                meta = {k: v for k, v in obj["metadata"].items() if k != "uid"}
                body = {**obj, "metadata": {**meta, "namespace": NS}}
                core.create_namespaced_pod(NS, body)
            else:
                core.delete_namespaced_pod(name, NS, grace_period_seconds=0)

    return apply


def create_node(core: Any, obj: dict[str, Any]) -> None:
    # Node status (allocatable) is a subresource: create, then write the status.
    core.create_node(obj)
    core.patch_node_status(obj["metadata"]["name"], {"status": obj["status"]})


def test_kube_view_meets_the_contract(cluster: tuple[Any, Any]) -> None:
    cp, core = cluster
    create_node(core, ko.node("cv-0"))
    cache = GraphCache(SidecarConfig())
    view = KubeClusterView(SidecarConfig(), cache, load_api_client(str(cp.kubeconfig)))
    base = applier(core)

    def apply(resource: str, kind: str, obj: dict[str, Any]) -> None:
        if resource == "nodes" and kind == "ADDED":
            create_node(core, obj)
        else:
            base(resource, kind, obj)

    try:
        check_contract(cache, view, apply, timeout=20)
    finally:
        core.delete_node("cv-0")


def test_view_converges_after_an_apiserver_restart(cluster: tuple[Any, Any]) -> None:
    cp, core = cluster
    cfg = SidecarConfig(backoff_initial_s=0.2, backoff_max_s=1.0)
    cache = GraphCache(cfg)
    view = KubeClusterView(cfg, cache, load_api_client(str(cp.kubeconfig)))
    view.start()
    try:
        assert wait_for(view.synced, 20)
        cp.restart_apiserver()
        create_node(core, ko.node("after-restart", cpu="7"))
        assert wait_for(lambda: "after-restart" in cache.snapshot().index, 30), \
            "the view never saw a node created after the restart"
        core.delete_node("after-restart")
        assert wait_for(lambda: "after-restart" not in cache.snapshot().index, 30)
        assert view.relists("nodes") >= 2  # the broken watch led to a fresh list
    finally:
        view.stop()


def test_dsan_serve_against_the_real_apiserver(cluster: tuple[Any, Any]) -> None:
    cp, core = cluster
    for i in range(3):
        create_node(core, ko.node(f"serve-{i}", cpu=str(8 * (i + 1)), gpus=2, model="A100"))
    proc = subprocess.Popen(
        [sys.executable, "-m", "dsan", "serve", "--kubeconfig", str(cp.kubeconfig),
         "--http-port", "0", "--grpc-port", "0", "--policy", "k8s-default",
         "--ready-timeout", "60"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"})
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        assert line.startswith("serving extender on http://127.0.0.1:"), line
        url = line.split()[3]
        names = ["serve-0", "serve-1", "serve-2"]
        r = httpx.post(url + "/prioritize", content=json.dumps(
            {"Pod": ko.pod("x", cpu="2"), "Nodes": None, "NodeNames": names}), timeout=10)
        assert r.status_code == 200
        scores = {h["Host"]: h["Score"] for h in r.json()}
        assert scores["serve-2"] > scores["serve-0"]  # LeastAllocated: the biggest node wins
        assert httpx.get(url.rsplit("/", 1)[0] + "/readyz").status_code == 200
    finally:
        proc.terminate()
        proc.wait(timeout=10)
        for i in range(3):
            core.delete_node(f"serve-{i}")
    assert proc.returncode == 0
