"""The control plane itself: kwok nodes turn Ready, the default scheduler binds, kwok runs pods,
GPU capacity is respected. Everything the DSAN e2e tests build on."""

from __future__ import annotations

import time
from typing import Any

import pytest
from kubernetes import client

from tests.support.controlplane import ControlPlane
from tests.support.workload import BindingWatch, add_nodes, create_all, fleet, pod_manifest

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def core(control_plane: ControlPlane) -> Any:
    with control_plane.api_client() as api:
        yield client.CoreV1Api(api)


def test_kwok_nodes_turn_ready_without_not_ready_taint(core: Any) -> None:
    label = {"dsan.io/e2e": "cp-ready"}
    add_nodes(core, fleet(5, prefix="cp-ready", labels=label), "dsan.io/e2e=cp-ready")
    nodes = core.list_node(label_selector="dsan.io/e2e=cp-ready").items
    assert len(nodes) == 5
    for node in nodes:
        taints = [t.key for t in (node.spec.taints or [])]
        assert "node.kubernetes.io/not-ready" not in taints, node.metadata.name
        assert node.status.allocatable["nvidia.com/gpu"] == "8"


def test_default_scheduler_binds_and_kwok_runs_pods(control_plane: ControlPlane, core: Any) -> None:
    ns = "e2e-cp-bind"
    control_plane.ensure_namespace(ns)
    add_nodes(
        core, fleet(3, prefix="cp-bind", labels={"dsan.io/e2e": "cp-bind"}), "dsan.io/e2e=cp-bind"
    )
    watch = BindingWatch(core, ns).start()
    try:
        pods = [pod_manifest(f"p{i}", node_selector={"dsan.io/e2e": "cp-bind"}) for i in range(10)]
        create_all(lambda p: core.create_namespaced_pod(ns, p), pods)
        bound = watch.wait([p["metadata"]["name"] for p in pods], timeout=30)
    finally:
        watch.stop()
    assert {node for node, _ in bound.values()} <= {"cp-bind-0000", "cp-bind-0001", "cp-bind-0002"}
    # kwok's watches end every ~20-40 s here ("RequestWatchProgress is disabled": etcd 3.4) and
    # it relists; on the loaded 2-core box that has delayed Running by up to a minute.
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        phases = {p.status.phase for p in core.list_namespaced_pod(ns).items}
        if phases == {"Running"}:
            break
        time.sleep(0.2)
    assert phases == {"Running"}, "kwok did not move the bound pods to Running"


def test_gpu_requests_respected_by_default_scheduler(
    control_plane: ControlPlane, core: Any
) -> None:
    """3 nodes x 2 GPUs and 7 one-GPU pods: exactly 6 bind, at most 2 per node, 1 stays Pending."""
    ns = "e2e-cp-gpu"
    control_plane.ensure_namespace(ns)
    sel = {"dsan.io/e2e": "cp-gpu"}
    add_nodes(core, fleet(3, prefix="cp-gpu", gpus=2, labels=sel), "dsan.io/e2e=cp-gpu")
    watch = BindingWatch(core, ns).start()
    names = [f"g{i}" for i in range(7)]
    try:
        create_all(
            lambda p: core.create_namespaced_pod(ns, p),
            [pod_manifest(n, gpus=1, node_selector=sel) for n in names],
        )
        with pytest.raises(TimeoutError, match="1 pods not bound"):
            watch.wait(names, timeout=5)
        bound = dict(watch.bound)
    finally:
        watch.stop()
    per_node: dict[str, int] = {}
    for node, _ in bound.values():
        per_node[node] = per_node.get(node, 0) + 1
    assert len(bound) == 6 and max(per_node.values()) == 2, per_node
    pending = [p for p in core.list_namespaced_pod(ns).items if not p.spec.node_name]
    assert len(pending) == 1
    conds = {c.type: c for c in (pending[0].status.conditions or [])}
    assert conds["PodScheduled"].reason == "Unschedulable"
    assert "nvidia.com/gpu" in conds["PodScheduled"].message
