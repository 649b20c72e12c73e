"""What placing a pod on each candidate node would do: FGD's fragmentation before and after
(:func:`placement`), or just the free share per slot afterwards (:func:`free_after`, cheaper).
Pure functions; every row's value is independent of its batch, so
:class:`~dsan.features.placementcache.PlacementCache` keeps and batches them (:func:`whatif`).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from dsan.core.snapshot import BOOL, F64, I64, ClusterSnapshot, PodSpec
from dsan.features.frag import node_frag
from dsan.features.target import TargetWorkload

__all__ = ["Placement", "free_after", "placement", "whatif"]


def whatif(sharing: bool, free: I64, present: BOOL, cpu_after: F64, num_gpu: I64, gpu_milli: I64,
           acc: BOOL, w: TargetWorkload, before: F64) -> tuple[F64, I64, I64]:
    """Fragmentation after placing, per row: (after, slot, free_after). Each row is one
    (pod, node) pair, so rows of several pods of one kind (sharing or not) go in one call."""
    if sharing:
        return _sharing_whatif(gpu_milli, present, free, cpu_after, acc, w, before)
    free_after = _whole_gpus_taken(free, np.where(gpu_milli > 0, num_gpu, 0)[:, None])
    after = node_frag(cpu_after, free_after, acc, w)
    return after, np.full(len(free), -1, dtype=np.int64), free_after


def _whole_gpus_taken(free: I64, k: npt.ArrayLike) -> I64:
    """``free`` with the first ``k`` fully free GPUs of each row taken (best fit)."""
    full = free == 1000
    return np.where(full & (np.cumsum(full, axis=1) <= k), 0, free)


def _sharing_whatif(gpu_milli: I64, present: BOOL, free: I64, cpu_after: F64, acc: BOOL,
                    w: TargetWorkload, before: F64) -> tuple[F64, I64, I64]:
    """Fragmentation after a sharing pod (share ``gpu_milli`` per row) takes each GPU slot:
    (K, m, 8) corrections of :func:`~dsan.features.frag.node_frag`'s terms, 8x less work
    than evaluating every (node, slot) variant from scratch."""
    m = len(free)
    # once per distinct GPU share (U <= K), then spread to the K shapes (integers: exact)
    milli = w.milli_unique[:, None, None].astype(np.int64)
    f = free[None, :, :]
    small = f < milli  # (U, m, 8)
    kept = np.where(small, f, 0)
    frag_small = kept.sum(axis=2)  # (U, m)
    fit = (~small).sum(axis=2)
    new = f - gpu_milli[None, :, None]
    small_new = new < milli
    frag_new = (frag_small[:, :, None] - kept + np.where(small_new, new, 0))[w.milli_index]
    fit_new = (fit[:, :, None] - (~small) + (~small_new))[w.milli_index]  # (K, m, 8)
    hosts = acc & (w.num_gpu[:, None] > 0) & (cpu_after[None, :] >= w.cpu_milli[:, None])
    host = hosts[:, :, None] & (fit_new >= w.num_gpu[:, None, None])
    total_new = (free.sum(axis=1) - gpu_milli).astype(np.float64)[None, :, None]
    f_after = np.einsum("k,kmg->mg", w.freq, np.where(host, frag_new, total_new))
    valid = (free >= gpu_milli[:, None]) & present
    slot = np.argmin(np.where(valid, f_after + free * 1e-6, np.inf), axis=1).astype(np.int64)
    has: BOOL = np.asarray(valid.any(axis=1), dtype=bool)
    after = np.where(has, f_after[np.arange(m), slot], before)
    slot = np.where(has, slot, -1)
    free_after = free.copy()
    rows = np.flatnonzero(has)
    free_after[rows, slot[rows]] -= gpu_milli[rows]
    return after, slot, free_after


@dataclass(frozen=True, slots=True)
class Placement:
    """What placing a pod on each candidate would do (the FGD GPU choice for sharing pods)."""

    frag_before: F64  # (m,)
    frag_after: F64  # (m,)
    free_after: I64  # (m, 8)
    slot: I64  # (m,) chosen slot for a sharing pod, -1 otherwise


def placement(pod: PodSpec, snap: ClusterSnapshot, nodes: I64, w: TargetWorkload,
              access: BOOL | None = None, before: F64 | None = None) -> Placement:
    """Fragmentation before and after placing ``pod`` on each candidate node. A sharing pod
    takes the GPU with the least fragmentation after (ties: best fit), as FGD does; whole-GPU
    pods the first fully free GPUs. ``access`` may pass ``w.access(snap)`` and ``before`` the
    nodes' current fragmentation, precomputed."""
    free = snap.gpu_free[nodes].astype(np.int64)
    m, _g = free.shape
    cpu_free = snap.cpu_cap[nodes] - snap.cpu_used[nodes]
    acc = (w.access(snap) if access is None else access)[:, nodes]
    if before is None:
        before = node_frag(cpu_free, free, acc, w)
    after, slot, free_after = whatif(
        pod.is_sharing, free, snap.gpu_present[nodes], cpu_free - pod.cpu_milli,
        np.full(m, pod.num_gpu, dtype=np.int64), np.full(m, pod.gpu_milli, dtype=np.int64),
        acc, w, before)
    return Placement(before, after, free_after, slot)


def free_after(pod: PodSpec, snap: ClusterSnapshot, nodes: I64, w: TargetWorkload, access: BOOL,
               shares: npt.ArrayLike) -> I64:
    """Free GPU share per slot after placing ``pod`` on each of ``nodes``: :func:`placement`'s
    ``free_after`` wherever it matters for counting GPUs that still fit each share in
    ``shares`` (``free // share`` per slot). Where every fitting GPU loses as many pieces for
    every share, the (costly) slot choice cannot change the counts and the first slot stands in.
    """
    free = snap.gpu_free[nodes].astype(np.int64)
    if not pod.is_sharing:
        return _whole_gpus_taken(free, pod.num_gpu if pod.gpu_milli > 0 else 0)
    g = pod.gpu_milli
    valid = (free >= g) & snap.gpu_present[nodes]
    has: BOOL = np.asarray(valid.any(axis=1), dtype=bool)
    out = free.copy()
    rows = np.flatnonzero(has)
    out[rows, np.argmax(valid, axis=1)[rows]] -= g
    milli = np.maximum(np.asarray(shares, dtype=np.int64), 1)[:, None, None]
    if milli.size == 0:
        return out
    lost = free[None] // milli - (free[None] - g) // milli  # (S, m, 8) on fitting slots
    hi = np.where(valid[None], lost, -1).max(axis=2)
    lo = np.where(valid[None], lost, np.iinfo(np.int64).max).min(axis=2)
    differ = np.not_equal(hi, lo) & has[None, :]
    amb = np.flatnonzero(differ.any(axis=0))
    if amb.size:
        sub = nodes[amb]
        cpu_after = snap.cpu_cap[sub] - snap.cpu_used[sub] - pod.cpu_milli
        _, _, fa = _sharing_whatif(np.full(amb.size, g, dtype=np.int64), snap.gpu_present[sub],
                                   free[amb], cpu_after, access[:, sub], w, np.zeros(amb.size))
        out[amb] = fa
    return out
