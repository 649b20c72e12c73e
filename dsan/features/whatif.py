"""What placing a pod on each candidate node would do: FGD's fragmentation before and after
(:func:`placement`).
Every row's value is independent of its batch, so :class:`PlacementCache` keeps them across
pods (per pod shape and node, recomputed only where the allocation changed) and
:func:`cached_placements` batches several decisions into one what-if call.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from dsan.core.snapshot import BOOL, F64, I64, MAX_GPUS, AllocationTracker, ClusterSnapshot, PodSpec
from dsan.features.frag import node_frag
from dsan.features.target import TargetWorkload

SLOTS = np.arange(MAX_GPUS)[None, :]


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


def placement(pod: PodSpec, snap: ClusterSnapshot, nodes: I64, w: TargetWorkload) -> Placement:
    """Fragmentation before and after placing ``pod`` on each candidate node. A sharing pod
    takes the GPU with the least fragmentation after (ties: best fit), as FGD does; whole-GPU
    pods the first fully free GPUs."""
    free = snap.gpu_free[nodes].astype(np.int64)
    m = len(free)
    cpu_free = snap.cpu_cap[nodes] - snap.cpu_used[nodes]
    acc = w.access(snap)[:, nodes]
    before = node_frag(cpu_free, free, acc, w)
    after, slot, free_after = whatif(
        pod.is_sharing, free, snap.gpu_present[nodes], cpu_free - pod.cpu_milli,
        np.full(m, pod.num_gpu, dtype=np.int64), np.full(m, pod.gpu_milli, dtype=np.int64),
        acc, w, before)
    return Placement(before, after, free_after, slot)


class PlacementCache:
    """Per pod shape, :func:`placement` results for every node, recomputed only for nodes
    whose CPU or GPU state changed (:class:`~dsan.core.snapshot.AllocationTracker`): a pod
    costs O(changed nodes) what-ifs, and cached and fresh results are the same numbers."""

    def __init__(self, workload: TargetWorkload) -> None:
        self.workload = workload
        self._names: list[str] = []
        self._names_of: list[str] | None = None
        self._track = AllocationTracker()
        self._entries: dict[tuple[float, int, int], _Entry] = {}
        # Current fragmentation per node, shared by all pod shapes (it is pod-independent).
        self._before = np.zeros(0)
        self._before_at = np.zeros(0, dtype=np.int64)
        self._adopted: F64 | None = None
        self._access: BOOL | None = None
        self._access_key: tuple[tuple[str, ...], bytes] = ((), b"")

    def access(self, snap: ClusterSnapshot) -> BOOL:
        """``workload.access(snap)`` (K, n), recomputed only when the nodes' GPU models change
        (an object-array ``isin`` per constrained shape)."""
        key = (tuple(snap.gpu_models), snap.gpu_model.tobytes())
        if self._access is None or key != self._access_key:
            self._access, self._access_key = self.workload.access(snap), key
        return self._access

    def adopt_fragmentation(self, frag: F64) -> None:
        """Take ``frag`` (a current :class:`~dsan.features.frag.FragTracker`'s, same workload)
        as every node's fragmentation at the next :meth:`get`."""
        self._adopted = frag

    def _sync(self, snap: ClusterSnapshot) -> None:
        # The names list is compared only when it is another object (a snapshot's names are
        # replaced, not edited, when the node set changes): 1,000 string compares per call.
        if snap.names is not self._names_of:
            same = len(snap) == len(self._names) and snap.names == self._names
            self._names_of = snap.names
            if not same:
                self._names = list(snap.names)
                self._track.reset(snap)
                self._entries = {}
                self._before = np.zeros(len(snap))
                self._before_at = np.full(len(snap), -1, dtype=np.int64)
                return
        self._track.sync(snap)

    def get(self, pod: PodSpec, snap: ClusterSnapshot, nodes: I64) -> Placement:
        return cached_placements([self], [pod], [snap], [nodes])[0]

    def _prepare(self, pod: PodSpec, snap: ClusterSnapshot, nodes: I64) -> tuple[_Entry, I64]:
        """Sync with ``snap``; the pod shape's entry and which of ``nodes`` it lacks, with
        their current fragmentation ("before") brought up to date."""
        self._sync(snap)
        if self._adopted is not None:
            self._before[:] = self._adopted
            self._before_at[:] = self._track.tick
            self._adopted = None
        key = (pod.cpu_milli, pod.num_gpu, pod.gpu_milli)  # all placement() depends on
        n = len(snap)
        if key not in self._entries:
            self._entries[key] = (np.zeros(n), np.zeros(n), np.full(n, -1, dtype=np.int64),
                                  np.zeros((n, MAX_GPUS), dtype=np.int64),
                                  np.full(n, -1, dtype=np.int64))
        entry = self._entries[key]
        stale = self._track.stale(entry[4], nodes)
        if stale.size:
            old = stale[self._before_at[stale] < self._track.epoch[stale]]
            if old.size:
                self._before[old] = node_frag(snap.cpu_cap[old] - snap.cpu_used[old],
                                              snap.gpu_free[old], self.access(snap)[:, old],
                                              self.workload)
                self._before_at[old] = self._track.tick
        return entry, stale


#: Per node: frag before, frag after, slot, free after, and the tick they were computed at.
_Entry = tuple[F64, F64, I64, I64, I64]


def cached_placements(caches: Sequence[PlacementCache], pods: Sequence[PodSpec],
                      snaps: Sequence[ClusterSnapshot], nodes: Sequence[I64]) -> list[Placement]:
    """:meth:`PlacementCache.get` for several (cache, pod, snapshot, candidates) at once: the
    missing what-ifs in one call per kind of pod (sharing or not) and workload, so numpy's
    per-call overhead is paid once per batch. Each row's value does not depend on the batch."""
    prep = [c._prepare(p, s, n) for c, p, s, n in zip(caches, pods, snaps, nodes, strict=True)]
    groups: dict[tuple[bool, int], list[int]] = {}
    for i, (_, stale) in enumerate(prep):
        if stale.size:
            groups.setdefault((pods[i].is_sharing, id(caches[i].workload)), []).append(i)
    for (sharing, _), idx in groups.items():
        pairs = [(i, prep[i][1]) for i in idx]
        sizes = [len(x) for _, x in pairs]

        def cat(parts: list[Any], axis: int = 0) -> Any:
            return parts[0] if len(parts) == 1 else np.concatenate(parts, axis=axis)

        free = cat([snaps[i].gpu_free[x].astype(np.int64) for i, x in pairs])
        present = cat([snaps[i].gpu_count[x][:, None] > SLOTS for i, x in pairs])
        cpu_after = cat([snaps[i].cpu_cap[x] - snaps[i].cpu_used[x] - pods[i].cpu_milli
                         for i, x in pairs])
        num_gpu = np.repeat([pods[i].num_gpu for i in idx], sizes).astype(np.int64)
        gpu_milli = np.repeat([pods[i].gpu_milli for i in idx], sizes).astype(np.int64)
        acc = cat([caches[i].access(snaps[i])[:, x] for i, x in pairs], axis=1)
        before = cat([caches[i]._before[x] for i, x in pairs])
        w = caches[idx[0]].workload
        after, slot, free_after = whatif(sharing, free, present, cpu_after, num_gpu, gpu_milli,
                                         acc, w, before)
        at = 0
        for i, x in pairs:
            e, c, sl = prep[i][0], caches[i], slice(at, at + len(x))
            e[0][x], e[1][x], e[2][x], e[3][x] = before[sl], after[sl], slot[sl], free_after[sl]
            e[4][x] = c._track.tick
            at += len(x)
    return [Placement(e[0][n], e[1][n], e[3][n], e[2][n])
            for (e, _), n in zip(prep, nodes, strict=True)]
