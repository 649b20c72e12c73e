"""The GPU slots FGD gives a pod on the node it chose (DSAN binds pods to them): the first slot
with the highest *integer* FGD score for a sharing pod, the first fully free GPUs for a
whole-GPU pod. Not :func:`dsan.features.whatif.placement`'s slot (the untruncated
fragmentation's, for the features): the two differ on some pods.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

from dsan.core.filtering import best_fit_gpus
from dsan.core.snapshot import BOOL, MAX_GPUS, ClusterSnapshot, PodSpec
from dsan.features.frag import node_frag
from dsan.features.target import TargetWorkload

__all__ = ["fgd_select_gpus", "fgd_select_gpus_many"]


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
            before, after = frag[at : at + 1], frag[at + 1 : at + 1 + slots.size]
            at += 1 + slots.size
            # FGDScorer's float expression, so the truncation flips at the same points
            score = np.floor(1.0 / (1.0 + np.exp(-((before - after) / 1000.0))) * 100)
            out[i] = (int(slots[int(np.argmax(score))]),)
    return out
