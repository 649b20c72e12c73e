"""kwok nodes and test pods as plain manifests, and helpers that create and watch them in bulk.

Nodes carry what the sidecar featurizes: CPU, memory, ``nvidia.com/gpu`` capacity, the GPU
model label, and zone / rack / NVLink-domain topology labels (keys from dsan.api.types).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from dsan.api import types as t

GPU_MODELS = ("V100M16", "V100M32", "A100", "T4")


@dataclass(frozen=True)
class NodeShape:
    cpu: int = 64
    memory_gi: int = 256
    gpus: int = 8
    gpu_model: str = "V100M32"
    zone: str = "zone-a"
    rack: str = "rack-0"
    nvlink: str = "nvl-0"


def node_manifest(
    name: str, shape: NodeShape, extra_labels: dict[str, str] | None = None
) -> dict[str, Any]:
    res = {"cpu": str(shape.cpu), "memory": f"{shape.memory_gi}Gi", "pods": "110"}
    if shape.gpus:
        res[t.RESOURCE_GPU] = str(shape.gpus)
    labels = {
        "type": "kwok",
        "kubernetes.io/hostname": name,
        "kubernetes.io/os": "linux",
        t.LABEL_ZONE: shape.zone,
        t.LABEL_RACK: shape.rack,
        t.LABEL_NVLINK_DOMAIN: shape.nvlink,
    }
    if shape.gpus:
        labels[t.LABEL_GPU_MODEL] = shape.gpu_model
        labels[t.LABEL_GPU_COUNT] = str(shape.gpus)
    labels.update(extra_labels or {})
    return {
        "apiVersion": "v1",
        "kind": "Node",
        # kwok's own convention for nodes it fakes; harmless for a real cluster reader.
        "metadata": {"name": name, "labels": labels, "annotations": {"kwok.x-k8s.io/node": "fake"}},
        "spec": {},
        "status": {"capacity": res, "allocatable": res},
    }


def fleet(
    n: int,
    prefix: str = "node",
    gpu_every: int = 1,
    gpus: int = 8,
    labels: dict[str, str] | None = None,
) -> list[dict[str, Any]]:
    """``n`` nodes over 4 zones, 8 racks, NVLink domains of 4 nodes.

    Every ``gpu_every``-th node has ``gpus`` GPUs (models cycle through GPU_MODELS); ``labels``
    go on every node so a test can pin its pods to its own nodes.
    """
    out = []
    for i in range(n):
        shape = NodeShape(
            gpus=gpus if i % gpu_every == 0 else 0,
            gpu_model=GPU_MODELS[i % len(GPU_MODELS)],
            zone=f"zone-{i % 4}",
            rack=f"rack-{(i // 4) % 8}",
            nvlink=f"nvl-{i // 4}",
        )
        out.append(node_manifest(f"{prefix}-{i:04d}", shape, labels))
    return out


def pod_manifest(
    name: str,
    scheduler: str | None = None,
    cpu: str = "1",
    memory: str = "1Gi",
    gpus: int = 0,
    labels: dict[str, str] | None = None,
    annotations: dict[str, str] | None = None,
    node_selector: dict[str, str] | None = None,
) -> dict[str, Any]:
    """A pod for kwok nodes; ``node_selector`` keeps a test's pods on that test's own nodes."""
    req: dict[str, str] = {"cpu": cpu, "memory": memory}
    if gpus:
        req[t.RESOURCE_GPU] = str(gpus)
    spec: dict[str, Any] = {
        "containers": [
            {
                "name": "main",
                "image": "registry.invalid/fake:1",
                "resources": {
                    "requests": req,
                    "limits": {t.RESOURCE_GPU: str(gpus)} if gpus else {},
                },
            }
        ],
        # kwok nodes run nothing; a zero grace period lets deletes finish at once.
        "terminationGracePeriodSeconds": 0,
    }
    if scheduler:
        spec["schedulerName"] = scheduler
    if node_selector:
        spec["nodeSelector"] = node_selector
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": labels or {}, "annotations": annotations or {}},
        "spec": spec,
    }


def create_all(
    create: Callable[[dict[str, Any]], Any], objs: Sequence[dict[str, Any]], threads: int = 8
) -> None:
    """Create ``objs`` with ``threads`` parallel requests; the first error is raised."""
    with ThreadPoolExecutor(threads) as ex:
        for fut in [ex.submit(create, o) for o in objs]:
            fut.result()


class BindingWatch:
    """Watch pods in one namespace; record per pod when its ``spec.nodeName`` appeared.

    List first and watch from the returned resourceVersion: etcd 3.4 rejects a watch started
    without one (field notes).
    """

    def __init__(self, core: Any, namespace: str) -> None:
        self.core, self.ns = core, namespace
        self.bound: dict[str, tuple[str, float]] = {}
        self._stop = threading.Event()
        self._cv = threading.Condition()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def start(self) -> BindingWatch:
        self._thread.start()
        return self

    def _record(self, pod: Any) -> None:
        node = pod.spec.node_name
        if node and pod.metadata.name not in self.bound:
            with self._cv:
                self.bound[pod.metadata.name] = (node, time.monotonic())
                self._cv.notify_all()

    def _run(self) -> None:
        from kubernetes import watch

        while not self._stop.is_set():
            try:
                lst = self.core.list_namespaced_pod(self.ns, resource_version="0")
                for p in lst.items:
                    self._record(p)
                w = watch.Watch()
                for ev in w.stream(
                    self.core.list_namespaced_pod,
                    self.ns,
                    resource_version=lst.metadata.resource_version,
                    timeout_seconds=30,
                ):
                    if ev["type"] in ("ADDED", "MODIFIED"):
                        self._record(ev["object"])
                    if self._stop.is_set():
                        w.stop()
                        break
            except Exception:
                time.sleep(0.2)

    def wait(self, names: Iterable[str], timeout: float) -> dict[str, tuple[str, float]]:
        """Wait until all ``names`` are bound: {name: (node, t)}; TimeoutError names the missing."""
        want = set(names)
        deadline = time.monotonic() + timeout
        with self._cv:
            while not want <= self.bound.keys():
                left = deadline - time.monotonic()
                if left <= 0:
                    missing = sorted(want - self.bound.keys())
                    raise TimeoutError(
                        f"{len(missing)} pods not bound after {timeout:.0f} s: {missing[:10]}"
                    )
                self._cv.wait(min(left, 0.5))
            return {n: self.bound[n] for n in want}

    def stop(self) -> None:
        self._stop.set()


def ready_nodes(core: Any, label_selector: str) -> set[str]:
    """Names of nodes matching ``label_selector`` whose Ready condition is True."""
    out = set()
    for node in core.list_node(label_selector=label_selector).items:
        conds = node.status.conditions or []
        if any(c.type == "Ready" and c.status == "True" for c in conds):
            out.add(node.metadata.name)
    return out


def add_nodes(
    core: Any, nodes: Sequence[dict[str, Any]], selector: str, timeout: float = 60
) -> float:
    """Create ``nodes`` and wait until kwok has marked them all Ready; returns seconds waited."""
    start = time.monotonic()
    create_all(core.create_node, nodes)
    want = {n["metadata"]["name"] for n in nodes}
    while not want <= ready_nodes(core, selector):
        if time.monotonic() - start > timeout:
            missing = sorted(want - ready_nodes(core, selector))
            raise TimeoutError(
                f"{len(missing)} nodes not Ready after {timeout:.0f} s: {missing[:5]}"
            )
        time.sleep(0.2)
    return time.monotonic() - start
