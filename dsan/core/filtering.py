"""Filter and bind: kube-scheduler's feasibility checks and the bookkeeping of a placement,
shared by the simulator and the sidecar. Checks: free CPU and memory cover the request
(NodeResourcesFit), the node's GPU model is one the pod allows, at least ``num_gpu`` GPUs
have ``gpu_milli`` free each (Open-Gpu-Share), the pod tolerates every NoSchedule taint.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from dsan.api.types import LATENCY_SENSITIVE_INDICES
from dsan.core.snapshot import BOOL, ClusterSnapshot, PodSpec


def feasible(pod: PodSpec, snap: ClusterSnapshot) -> BOOL:
    """Boolean mask over nodes that can host ``pod`` now."""
    ok = (snap.cpu_cap - snap.cpu_used >= pod.cpu_milli) & (
        snap.mem_cap - snap.mem_used >= pod.mem_mib)
    if pod.num_gpu > 0 and pod.gpu_milli > 0:
        ok &= _gpus_that_fit(snap.gpu_free, pod.gpu_milli) >= pod.num_gpu
        if pod.gpu_models:
            ok &= np.isin(snap.gpu_model, np.asarray(pod.gpu_models, dtype=np.int32))
    if snap.taint_mask is not None:
        ok &= (snap.taint_mask & ~np.int64(pod.toleration_mask)) == 0
    return ok


def _gpus_that_fit(gpu_free: npt.NDArray[np.int32], milli: int) -> npt.NDArray[np.integer]:
    """Per node, how many GPU slots have at least ``milli`` free: a popcount of each row's 8
    bool bytes read as one uint64, much faster than numpy's per-row ``sum(axis=1)``."""
    fits = gpu_free >= milli
    if fits.shape[1] % 8 == 0 and fits.flags.c_contiguous:
        bits = np.bitwise_count(fits.view(np.uint64))
        return bits[:, 0] if bits.shape[1] == 1 else bits.sum(axis=1)
    return fits.sum(axis=1)


def feasible_nodes(pod: PodSpec, snap: ClusterSnapshot) -> npt.NDArray[np.int64]:
    """Indices of the nodes that can host ``pod``."""
    return np.flatnonzero(feasible(pod, snap)).astype(np.int64)


def allocate(snap: ClusterSnapshot, pod: PodSpec, node: int, gpus: tuple[int, ...]) -> None:
    """Charge ``pod`` to ``node`` (and to GPU slots ``gpus``) in place; ``ValueError`` rather
    than over-committing."""
    if len(gpus) != (pod.num_gpu if pod.gpu_milli > 0 else 0):
        raise ValueError(f"{pod.name}: {len(gpus)} GPU slots given, {pod.num_gpu} requested")
    if snap.cpu_used[node] + pod.cpu_milli > snap.cpu_cap[node] + 1e-9:
        raise ValueError(f"{pod.name}: CPU over-commit on {snap.names[node]}")
    if snap.mem_used[node] + pod.mem_mib > snap.mem_cap[node] + 1e-9:
        raise ValueError(f"{pod.name}: memory over-commit on {snap.names[node]}")
    for g in gpus:
        if g >= snap.gpu_count[node] or snap.gpu_free[node, g] < pod.gpu_milli:
            raise ValueError(f"{pod.name}: GPU {g} of {snap.names[node]} cannot fit")
    snap.cpu_used[node] += pod.cpu_milli
    snap.mem_used[node] += pod.mem_mib
    for g in gpus:
        snap.gpu_free[node, g] -= pod.gpu_milli
    if snap.pod_count is not None:
        snap.pod_count[node] += 1
    if snap.ls_pods is not None and pod.task_type in LATENCY_SENSITIVE_INDICES:
        snap.ls_pods[node] += 1
    snap.version += 1


def release(snap: ClusterSnapshot, pod: PodSpec, node: int, gpus: tuple[int, ...]) -> None:
    """Undo :func:`allocate` for a pod that finished or was evicted."""
    snap.cpu_used[node] = max(0.0, snap.cpu_used[node] - pod.cpu_milli)
    snap.mem_used[node] = max(0.0, snap.mem_used[node] - pod.mem_mib)
    for g in gpus:
        snap.gpu_free[node, g] = min(1000, snap.gpu_free[node, g] + pod.gpu_milli)
    if snap.pod_count is not None:
        snap.pod_count[node] = max(0, snap.pod_count[node] - 1)
    if snap.ls_pods is not None and pod.task_type in LATENCY_SENSITIVE_INDICES:
        snap.ls_pods[node] = max(0, snap.ls_pods[node] - 1)
    snap.version += 1


def best_fit_gpus(pod: PodSpec, snap: ClusterSnapshot, node: int) -> tuple[int, ...]:
    """The ``pod.num_gpu`` GPUs with the least free share that still fit (stable by slot);
    ``ValueError`` when the node cannot host them (callers filter first)."""
    if pod.num_gpu == 0 or pod.gpu_milli == 0:
        return ()
    count = int(snap.gpu_count[node])
    free = snap.gpu_free[node, :count]
    fits = np.flatnonzero(free >= pod.gpu_milli)
    if fits.size < pod.num_gpu:
        raise ValueError(f"node {snap.names[node]} cannot host {pod.name}'s GPUs")
    order = fits[np.argsort(free[fits], kind="stable")]
    return tuple(int(g) for g in sorted(order[: pod.num_gpu]))
