"""Node, Pod and GPUTelemetry JSON as the apiserver returns them, for tests and benchmarks."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from dsan.api.telemetry import WINDOW_METRICS, GPUInfo, GPUStatus, GPUTelemetry
from dsan.api.types import (
    LABEL_GPU_MODEL,
    LABEL_NVLINK_DOMAIN,
    LABEL_RACK,
    LABEL_ZONE,
    RESOURCE_GPU,
)


def node(name: str, cpu: str = "32", memory: str = "128Gi", gpus: int = 0,
         model: str | None = None, zone: str | None = None, rack: str | None = None,
         nvlink: str | None = None, labels: dict[str, str] | None = None) -> dict[str, Any]:
    lab = dict(labels or {})
    for key, value in ((LABEL_GPU_MODEL, model), (LABEL_ZONE, zone), (LABEL_RACK, rack),
                       (LABEL_NVLINK_DOMAIN, nvlink)):
        if value is not None:
            lab[key] = value
    alloc = {"cpu": cpu, "memory": memory, "pods": "110"}
    if gpus:
        alloc[RESOURCE_GPU] = str(gpus)
    return {"apiVersion": "v1", "kind": "Node",
            "metadata": {"name": name, "labels": lab},
            "status": {"capacity": dict(alloc), "allocatable": alloc}}


def pod(name: str, cpu: str = "1", memory: str = "1Gi", gpus: int = 0,
        node_name: str | None = None, namespace: str = "default", uid: str | None = None,
        annotations: dict[str, str] | None = None, phase: str = "Pending",
        extra_requests: dict[str, str] | None = None) -> dict[str, Any]:
    req = {"cpu": cpu, "memory": memory, **(extra_requests or {})}
    if gpus:
        req[RESOURCE_GPU] = str(gpus)
    # Extended resources cannot be overcommitted: the apiserver wants limits == requests.
    limits = {k: v for k, v in req.items() if "/" in k}
    resources: dict[str, Any] = {"requests": req}
    if limits:
        resources["limits"] = limits
    spec: dict[str, Any] = {
        "schedulerName": "dsan-scheduler",
        "containers": [{"name": "main", "image": "busybox", "resources": resources}],
    }
    if node_name:
        spec["nodeName"] = node_name
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": namespace, "uid": uid or f"uid-{name}",
                         "annotations": dict(annotations or {})},
            "spec": spec, "status": {"phase": phase}}


def telemetry(node_name: str, util: list[list[float]], mem_used_mib: list[list[float]] | None
              = None, power_w: list[list[float]] | None = None,
              sampled_at: datetime | None = None, model: str = "A100",
              memory_total_mib: int = 40960, window_s: int = 10) -> dict[str, Any]:
    """A GPUTelemetry object: ``util[g]`` is GPU g's window series (percent), oldest first."""
    at = sampled_at or datetime.now(UTC)
    gpus = tuple(GPUInfo(uuid=f"GPU-{node_name}-{g}", index=g, model=model,
                         memory_total_mib=memory_total_mib) for g in range(len(util)))
    zeros = [[0.0] * len(u) for u in util]
    # Every series filled: GPUTelemetry requires all of one GPU's series to be equally long.
    statuses = tuple(
        GPUStatus(uuid=f"GPU-{node_name}-{g}", index=g, windows={
            **{m: tuple(zeros[g]) for m in WINDOW_METRICS},
            "util": tuple(util[g]),
            "memoryUsedMiB": tuple((mem_used_mib or zeros)[g]),
            "powerW": tuple((power_w or zeros)[g]),
        }) for g in range(len(util)))
    return GPUTelemetry(node_name=node_name, gpus=gpus, statuses=statuses, sampled_at=at,
                        window_seconds=window_s).to_dict()


def cluster(n: int, gpu_every: int = 2, seed: int = 0) -> list[dict[str, Any]]:
    """``n`` nodes: every ``gpu_every``-th has 8 GPUs; racks of 8, NVLink pairs, 4 zones."""
    import random

    rnd = random.Random(seed)
    out = []
    for i in range(n):
        gpus = 8 if i % gpu_every == 0 else 0
        out.append(node(f"node-{i:05d}", cpu=str(rnd.choice((32, 64, 96))),
                        memory=f"{rnd.choice((128, 256, 512))}Gi", gpus=gpus,
                        model=rnd.choice(("A100", "V100", "T4")) if gpus else None,
                        zone=f"z{i % 4}", rack=f"r{i // 8}",
                        nvlink=f"nv{i // 2}" if gpus else None))
    return out
