"""Filter and bind: kube-scheduler's feasibility checks and the bookkeeping of a placement.

Shared by the simulator (every scenario) and the sidecar, so a node that the simulator calls
feasible is feasible for the sidecar too. Checks, in kube-scheduler's spirit:

* NodeResourcesFit: free CPU and memory cover the request;
* GPU model: the node's GPU model is one the pod allows (openb's ``gpu_spec``);
* GPU-share fit (the FGD simulator's Open-Gpu-Share filter): at least ``num_gpu`` GPUs each
  with ``gpu_milli`` free;
* TaintToleration: the pod tolerates every NoSchedule taint on the node.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from dsan.core.snapshot import BOOL, ClusterSnapshot, PodSpec


def feasible(
    pod: PodSpec, snap: ClusterSnapshot, rows: npt.NDArray[np.int64] | None = None
) -> BOOL:
    """Boolean mask over nodes that can host ``pod`` now (over ``rows`` only, if given: the
    sidecar checks a request's candidates)."""
    if rows is None:
        cpu_cap, cpu_used = snap.cpu_cap, snap.cpu_used
        mem_cap, mem_used = snap.mem_cap, snap.mem_used
        gpu_free, gpu_model, taints = snap.gpu_free, snap.gpu_model, snap.taint_mask
    else:
        cpu_cap, cpu_used = snap.cpu_cap[rows], snap.cpu_used[rows]
        mem_cap, mem_used = snap.mem_cap[rows], snap.mem_used[rows]
        gpu_free, gpu_model = snap.gpu_free[rows], snap.gpu_model[rows]
        taints = None if snap.taint_mask is None else snap.taint_mask[rows]
    ok = (cpu_cap - cpu_used >= pod.cpu_milli) & (mem_cap - mem_used >= pod.mem_mib)
    if pod.num_gpu > 0 and pod.gpu_milli > 0:
        ok &= _gpus_that_fit(gpu_free, pod.gpu_milli) >= pod.num_gpu
        if pod.gpu_models:
            ok &= np.isin(gpu_model, np.asarray(pod.gpu_models, dtype=np.int32))
    if taints is not None:
        ok &= (taints & ~np.int64(pod.toleration_mask)) == 0
    return ok


def _gpus_that_fit(gpu_free: npt.NDArray[np.int32], milli: int) -> npt.NDArray[np.integer]:
    """Per node, how many GPU slots have at least ``milli`` free.

    numpy's ``sum(axis=1)`` over an (n, 8) bool mask is a reduction per row (~15 ns a node);
    the 8 bool bytes of a row read as one uint64 have as many set bits as True entries, so a
    popcount does the same in one pass (75 -> 6 us at 5,000 nodes).
    """
    fits = gpu_free >= milli
    if fits.shape[1] % 8 == 0 and fits.flags.c_contiguous:
        bits = np.bitwise_count(fits.view(np.uint64))
        return bits[:, 0] if bits.shape[1] == 1 else bits.sum(axis=1)
    return fits.sum(axis=1)


def feasible_nodes(pod: PodSpec, snap: ClusterSnapshot) -> npt.NDArray[np.int64]:
    """Indices of the nodes that can host ``pod``."""
    return np.flatnonzero(feasible(pod, snap)).astype(np.int64)


def allocate(snap: ClusterSnapshot, pod: PodSpec, node: int, gpus: tuple[int, ...]) -> None:
    """Charge ``pod`` to ``node`` (and to GPU slots ``gpus``) in place.

    Raises ``ValueError`` rather than over-committing: a caller bug must not corrupt state.
    """
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
    snap.version += 1


def release(snap: ClusterSnapshot, pod: PodSpec, node: int, gpus: tuple[int, ...]) -> None:
    """Undo :func:`allocate` for a pod that finished or was evicted."""
    snap.cpu_used[node] = max(0.0, snap.cpu_used[node] - pod.cpu_milli)
    snap.mem_used[node] = max(0.0, snap.mem_used[node] - pod.mem_mib)
    for g in gpus:
        snap.gpu_free[node, g] = min(1000, snap.gpu_free[node, g] + pod.gpu_milli)
    if snap.pod_count is not None:
        snap.pod_count[node] = max(0, snap.pod_count[node] - 1)
    snap.version += 1


def best_fit_gpus(pod: PodSpec, snap: ClusterSnapshot, node: int) -> tuple[int, ...]:
    """The ``pod.num_gpu`` GPUs with the least free share that still fit (stable by slot).

    Raises ``ValueError`` when the node cannot host the pod's GPUs: callers filter first.
    """
    if pod.num_gpu == 0 or pod.gpu_milli == 0:
        return ()
    count = int(snap.gpu_count[node])
    free = snap.gpu_free[node, :count]
    fits = np.flatnonzero(free >= pod.gpu_milli)
    if fits.size < pod.num_gpu:
        raise ValueError(f"node {snap.names[node]} cannot host {pod.name}'s GPUs")
    order = fits[np.argsort(free[fits], kind="stable")]
    return tuple(int(g) for g in sorted(order[: pod.num_gpu]))
