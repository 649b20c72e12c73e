"""Kubernetes-style preemption (DefaultPreemption), identical for every scoring policy.

For a pod that fits nowhere: the node whose victims have the lowest highest priority, then
the fewest victims; victims lowest priority first, then most recently started; only
reclaimable pods of strictly lower priority. A gang's plan is made for all its workers on a
scratch copy of the free capacity, so victims are evicted only if every worker fits.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from dsan.core.snapshot import MAX_GPUS, ClusterSnapshot, PodSpec

I64 = npt.NDArray[np.int64]
F64 = npt.NDArray[np.float64]

#: Candidate nodes examined in detail per pod (ranked cheaply first); keeps preemption fast.
MAX_CANDIDATES = 8


@dataclass
class Bound:
    """The bound pods preemption may look at, as parallel arrays (one entry per pod)."""

    node: I64
    cpu: F64
    mem: F64
    gpu_milli: I64
    gslot: I64  # GPU slot for single-GPU pods, -1 otherwise
    prio: I64
    start: F64  # bind time, for "most recently started first"
    reclaimable: npt.NDArray[np.bool_]


def _fits(pod: PodSpec, cpu: float, mem: float, gpu_free: npt.NDArray[np.int64]) -> bool:
    need_gpu = pod.num_gpu > 0 and pod.gpu_milli > 0
    return bool(cpu >= pod.cpu_milli and mem >= pod.mem_mib
                and (not need_gpu or int((gpu_free >= pod.gpu_milli).sum()) >= pod.num_gpu))


def _static_ok(pod: PodSpec, snap: ClusterSnapshot) -> npt.NDArray[np.bool_]:
    ok = np.ones(len(snap), dtype=bool)
    if pod.num_gpu > 0 and pod.gpu_milli > 0:
        ok &= snap.gpu_count >= pod.num_gpu
        if pod.gpu_models:
            ok &= np.isin(snap.gpu_model, np.asarray(pod.gpu_models, dtype=np.int32))
    if snap.taint_mask is not None:
        ok &= (snap.taint_mask & ~np.int64(pod.toleration_mask)) == 0
    return ok


def plan(pods: list[PodSpec], snap: ClusterSnapshot, bound: Bound) -> list[int] | None:
    """Indices (into ``bound``) of the victims that let every pod of ``pods`` (a gang or one
    pod, of one priority) fit, or None. Mutates nothing."""
    prio = pods[0].priority
    n = len(snap)
    cpu_free = snap.cpu_cap - snap.cpu_used
    mem_free = snap.mem_cap - snap.mem_used
    gpu_free = snap.gpu_free.astype(np.int64)
    removed = np.zeros(bound.node.size, dtype=bool)
    victims: list[int] = []
    for pod in pods:
        cand = bound.reclaimable & (bound.prio < prio) & ~removed
        idx = np.flatnonzero(cand)
        bn = bound.node[idx]
        rc = np.bincount(bn, weights=bound.cpu[idx], minlength=n)
        rm = np.bincount(bn, weights=bound.mem[idx], minlength=n)
        static = _static_ok(pod, snap)
        need_gpu = pod.num_gpu > 0 and pod.gpu_milli > 0
        fits_now = static & (cpu_free >= pod.cpu_milli) & (mem_free >= pod.mem_mib)
        ok = static & (cpu_free + rc >= pod.cpu_milli) & (mem_free + rm >= pod.mem_mib)
        if need_gpu:
            gi = idx[bound.gslot[idx] >= 0]
            rg = np.bincount(bound.node[gi] * MAX_GPUS + bound.gslot[gi],
                             weights=bound.gpu_milli[gi], minlength=n * MAX_GPUS
                             ).reshape(n, MAX_GPUS)
            fits_now &= (gpu_free >= pod.gpu_milli).sum(axis=1) >= pod.num_gpu
            ok &= ((gpu_free + rg) >= pod.gpu_milli).sum(axis=1) >= pod.num_gpu
        now = np.flatnonzero(fits_now)
        chosen: list[int]
        if now.size:
            node, chosen = int(now[0]), []
        else:
            cands = np.flatnonzero(ok)
            if cands.size == 0:
                return None
            # Cheap ranking before the exact greedy: fewest reclaimable pods on the node.
            counts = np.bincount(bn, minlength=n)[cands]
            cands = cands[np.argsort(counts, kind="stable")[:MAX_CANDIDATES]]
            best: tuple[int, int, int] | None = None
            chosen = []
            node = -1
            for c in cands:
                vs = _greedy(pod, int(c), idx[bn == c], bound, cpu_free, mem_free, gpu_free)
                if vs is None:
                    continue
                key = (int(bound.prio[vs].max()), len(vs), int(c))
                if best is None or key < best:
                    best, chosen, node = key, vs, int(c)
            if best is None:
                return None
        for v in chosen:
            removed[v] = True
            cpu_free[node] += bound.cpu[v]
            mem_free[node] += bound.mem[v]
            if bound.gslot[v] >= 0:
                gpu_free[node, bound.gslot[v]] += bound.gpu_milli[v]
        victims.extend(chosen)
        cpu_free[node] -= pod.cpu_milli
        mem_free[node] -= pod.mem_mib
        if need_gpu:
            order = np.argsort(np.where(gpu_free[node] >= pod.gpu_milli, gpu_free[node], 10**9),
                               kind="stable")[: pod.num_gpu]
            gpu_free[node, order] -= pod.gpu_milli
    return victims


def _greedy(pod: PodSpec, node: int, on_node: I64, bound: Bound, cpu_free: F64, mem_free: F64,
            gpu_free: npt.NDArray[np.int64]) -> list[int] | None:
    """Evict lowest priority, then most recently started, until ``pod`` fits on ``node``."""
    order = on_node[np.lexsort((-bound.start[on_node], bound.prio[on_node]))]
    c, m = cpu_free[node], mem_free[node]
    g = gpu_free[node].copy()
    out: list[int] = []
    for v in order:
        if _fits(pod, c, m, g):
            break
        out.append(int(v))
        c += bound.cpu[v]
        m += bound.mem[v]
        if bound.gslot[v] >= 0:
            g[bound.gslot[v]] += bound.gpu_milli[v]
    else:
        if not _fits(pod, c, m, g):
            return None
    return out if out else None
