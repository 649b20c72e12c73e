"""GPU fragmentation of nodes against a target workload (Weng et al., ATC'23, §3).

For target shape k (frequency f_k) and node i: if the node can host the shape (GPU model,
CPU, ``num_gpu`` GPUs with ``gpu_milli`` free each), the idle share of every GPU too small
for it is fragment, ``sum_g free[i,g] * [free[i,g] < gpu_milli_k]``; otherwise (or for a
CPU-only shape) all its idle GPU share is. ``F_i = sum_k f_k * frag_ik``, in GPU milli.

Also the GPU slots FGD gives a pod on the node it chose (DSAN binds pods to them too): the first
slot with the highest *integer* FGD score for a sharing pod, the first fully free GPUs for a
whole-GPU pod. Not :func:`dsan.features.whatif.placement`'s slot (the untruncated
fragmentation's, for the features): the two differ on some pods.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

from dsan.core.filtering import best_fit_gpus
from dsan.core.snapshot import BOOL, F64, MAX_GPUS, ClusterSnapshot, PodSpec
from dsan.features.target import TargetWorkload

#: Fixed-point scale of shape frequencies (1e-9 resolution; sums stay far below 2**63).
FREQ_SCALE = 1_000_000_000


def node_frag(cpu_free: npt.NDArray[np.floating], gpu_free: npt.NDArray[np.integer],
              access: BOOL, target: TargetWorkload) -> F64:
    """Expected fragment (GPU milli) per row: ``cpu_free`` (m,), ``gpu_free`` (m, G) (absent
    GPUs hold 0), ``access`` (K, m) from :meth:`TargetWorkload.access`."""
    free = gpu_free.astype(np.int32, copy=False)
    milli, need_gpu, num_gpu, cpu_milli, weights = _constants(target)
    total = free.sum(axis=1)  # (m,)
    small = free[None, :, :] < milli  # (U,m,G): distinct shares, U <= K
    frag_small = np.where(small, free[None, :, :], 0).sum(axis=2)[target.milli_index]  # (K,m)
    fit = (free.shape[1] - small.sum(axis=2))[target.milli_index]  # GPUs that take the share
    host = access & need_gpu & (fit >= num_gpu) & (cpu_free[None, :] >= cpu_milli)
    per = np.where(host, frag_small, total[None, :]).astype(np.float64)
    # Integer weights make the sum exact in any order, so a row's value does not depend on
    # its batch (else FGD's truncated "before - after" of an unchanged node can flip).
    return np.asarray(weights @ per, dtype=np.float64) / FREQ_SCALE


_CONSTANTS: dict[int, tuple[TargetWorkload, tuple[npt.NDArray[Any], ...]]] = {}


def _constants(target: TargetWorkload) -> tuple[npt.NDArray[Any], ...]:
    """The target's broadcast-ready columns and integer weights, built once per target (hot
    path: several small :func:`node_frag` calls per decision)."""
    hit = _CONSTANTS.get(id(target))
    if hit is not None and hit[0] is target:
        return hit[1]
    c = (target.milli_unique[:, None, None], (target.num_gpu > 0)[:, None],
         target.num_gpu[:, None], target.cpu_milli[:, None], np.rint(target.freq * FREQ_SCALE))
    if len(_CONSTANTS) > 64:  # never grow without bound
        _CONSTANTS.clear()
    _CONSTANTS[id(target)] = (target, c)
    return c


class FragTracker:
    """Per-node fragment of a snapshot, kept current by refreshing the nodes that changed."""

    def __init__(self, snap: ClusterSnapshot, target: TargetWorkload) -> None:
        self.target = target
        self.access = target.access(snap)
        self.frag = node_frag(snap.cpu_cap - snap.cpu_used, snap.gpu_free, self.access, target)

    def refresh(self, snap: ClusterSnapshot, nodes: npt.NDArray[np.int64] | list[int]) -> None:
        idx = np.asarray(nodes, dtype=np.int64)
        self.frag[idx] = node_frag(snap.cpu_cap[idx] - snap.cpu_used[idx], snap.gpu_free[idx],
                                   self.access[:, idx], self.target)

    def amount(self) -> float:
        """Cluster fragment, GPU milli."""
        return float(self.frag.sum())


def fgd_select_gpus(pod: PodSpec, snap: ClusterSnapshot, node: int, w: TargetWorkload,
                    access: BOOL | None = None) -> tuple[int, ...]:
    """GPU slots FGD gives ``pod`` on ``node``, exactly as :class:`dsan.policies.fgd.FGDScorer`.
    ``access`` may pass ``w.access(snap)`` precomputed (a FragTracker's): the full mask is an
    object-array ``isin`` per constrained shape, most of this call's cost."""
    if not pod.is_sharing:
        return best_fit_gpus(pod, snap, node)
    acc = w.access(snap) if access is None else access
    return fgd_select_gpus_many([pod], [snap], [node], w, [acc])[0]


def fgd_select_gpus_many(pods: Sequence[PodSpec], snaps: Sequence[ClusterSnapshot],
                         nodes: Sequence[int], w: TargetWorkload,
                         accesses: Sequence[BOOL]) -> list[tuple[int, ...]]:
    """:func:`fgd_select_gpus` of several (pod, snapshot, node, precomputed access): the sharing
    pods' fragmentation before and after each slot in ONE :func:`node_frag` call (numpy's
    per-call cost dominates; every row's value is independent of its batch)."""
    out: list[tuple[int, ...]] = [()] * len(pods)
    cpu: list[npt.NDArray[np.float64]] = []
    rows: list[npt.NDArray[np.int64]] = []
    accs: list[npt.NDArray[np.bool_]] = []
    picks: list[tuple[int, npt.NDArray[np.int64]]] = []  # (which pod, its slots)
    for i, (pod, snap, node) in enumerate(zip(pods, snaps, nodes, strict=True)):
        if not pod.is_sharing:
            out[i] = best_fit_gpus(pod, snap, node)
            continue
        free = snap.gpu_free[node].astype(np.int64)
        slots = np.flatnonzero(free >= pod.gpu_milli)
        if slots.size == 0:
            raise ValueError(f"node {snap.names[node]} cannot host {pod.name}'s GPU share")
        cpu_free = snap.cpu_cap[node] - snap.cpu_used[node]
        v = slots.size  # row 0: the node as it is; rows 1..v: the share on each slot
        cpu.append(np.concatenate([[cpu_free], np.full(v, cpu_free - pod.cpu_milli)]))
        after = free[None, :] - pod.gpu_milli * np.eye(MAX_GPUS, dtype=np.int64)[slots]
        rows.append(np.concatenate([free[None, :], after]))
        accs.append(np.repeat(accesses[i][:, [node]], v + 1, axis=1))
        picks.append((i, slots))
    if picks:
        frag = node_frag(np.concatenate(cpu), np.concatenate(rows), np.concatenate(accs, 1), w)
        at = 0
        for i, slots in picks:
            score = fgd_score(frag[at : at + 1], frag[at + 1 : at + 1 + slots.size])
            at += 1 + slots.size
            out[i] = (int(slots[int(np.argmax(score))]),)
    return out


def fgd_score(before: F64, after: F64) -> F64:
    """FGD's integer node score, ``floor(100 sigmoid((before - after) / 1000))``, from the
    fragmentation before and after a placement: one float expression for the scorer and the
    GPU choice, so the truncation flips at the same points."""
    return np.floor(1.0 / (1.0 + np.exp(-((before - after) / 1000.0))) * 100)
