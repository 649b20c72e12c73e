"""FGD's placement what-ifs kept across pods: :class:`PlacementCache` and its batch form.

The what-ifs themselves (:func:`~dsan.whatif.placement`: fragmentation before and after
placing a pod on each candidate) are :mod:`dsan.whatif`'s pure functions. The cache keeps
their results per pod shape for every node, recomputes only the nodes whose allocation
changed (with a memo for the few-row case, walked by :mod:`dsan.placementmemo`), and
:func:`cached_placements` batches several decisions into one what-if call. One
implementation for the featurizer (:mod:`dsan.features`), DSAN's serving caches and the
simulator's rollouts. This module also exports :mod:`dsan.whatif`'s names and
:func:`~dsan.gpuchoice.fgd_select_gpus`, which lived here before: :mod:`dsan.features`
re-exports all of them from here.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

from dsan.clusterwide import (
    cluster_cpu_bound,
    cluster_gpu_bound,
    cpu_bound_factor,
    room_factor,
    takes_cpu_only,
    takes_several_gpus,
)
from dsan.gpuchoice import fgd_select_gpus
from dsan.placementmemo import Memo, key_columns, recall_py, state_key
from dsan.policies.frag import node_frag
from dsan.policies.target import TargetWorkload
from dsan.snapshot import MAX_GPUS, AllocationTracker, ClusterSnapshot, PodSpec
from dsan.whatif import Placement, free_after, placement, whatif

__all__ = ["Placement", "PlacementCache", "cached_placements", "fgd_select_gpus", "free_after",
           "placement"]

F64 = npt.NDArray[np.float64]

_SLOTS = np.arange(MAX_GPUS)[None, :]
#: PlacementCache memo: used for up to this many changed rows; entries kept at most.
_MEMO_ROWS = 8
_MEMO_SIZE = 16_384
#: Rows a chain of :meth:`PlacementCache.note_changes` records may list before the sync
#: compares every node instead (the records of one sync interval are usually a few rows).
_HINT_ROWS = 64


class PlacementCache:
    """Per pod shape, :func:`placement` results for every node, recomputed only for nodes
    whose CPU or GPU state changed since (:class:`~dsan.snapshot.AllocationTracker`, shared
    with the FGD scorer). One placement changes one node, so on the simulator's and the
    sidecar's hot path a pod costs O(changed nodes) what-ifs instead of O(N).

    When only a few nodes changed (the usual step: one placement), their results come from a
    memo of the pure functions (node state -> fragmentation; node state, pod shape ->
    what-if), keyed by everything they read: free CPU, GPU count, GPU model (the workload's
    access column) and the free share of every slot. Nodes go back and forth between a few
    states as pods come and go, and numpy's per-call overhead, not arithmetic, is the cost
    of a what-if on a handful of rows. A memo value is what the same rows computed before,
    so results do not change (every row's value is independent of its batch).
    """

    def __init__(self, workload: TargetWorkload) -> None:
        self.workload = workload
        self._names: list[str] = []
        self._track = AllocationTracker()
        self._entries: dict[
            tuple[float, int, int],
            tuple[F64, F64, npt.NDArray[np.int64], npt.NDArray[np.int64], npt.NDArray[np.int64]],
        ] = {}
        # Current fragmentation per node, shared by all pod shapes (it is pod-independent).
        self._before = np.zeros(0)
        self._before_at = np.zeros(0, dtype=np.int64)
        self._adopted: F64 | None = None
        self._access: npt.NDArray[np.bool_] | None = None
        self._access_key: tuple[tuple[str, ...], bytes] = ((), b"")
        self._memo_before: dict[tuple[Any, ...], float] = {}
        self._memo_after: dict[tuple[Any, ...], tuple[float, int, npt.NDArray[np.int64]]] = {}
        #: See :meth:`trust_snapshot_versions`: the snapshot object and version last synced.
        self._trust = False
        self._seen: tuple[ClusterSnapshot | None, int] = (None, -1)
        #: With trust, per cluster bit (its function): (snapshot, version, telemetry
        #: version, bit) last computed.
        self._bits: dict[Callable[[ClusterSnapshot], bool],
                         tuple[ClusterSnapshot, int, int, bool]] = {}
        self._hint: tuple[int, int, Sequence[int]] | None = None

    def trust_snapshot_versions(self) -> None:
        """The caller bumps :attr:`~dsan.snapshot.ClusterSnapshot.version` on every in-place
        write to the snapshots it passes and publishes a new snapshot object for a new node
        set (the sidecar's cache does): the same object at the version last synced is then
        not diffed again, and a :meth:`note_changes` record spares the O(n) diff."""
        self._trust = True

    def room_factor(self, pod: PodSpec, snap: ClusterSnapshot) -> float:
        """:func:`dsan.clusterwide.room_factor`: its cluster sums (O(n), taken for pods asking
        for several whole GPUs) computed once per snapshot object and version when the
        caller bumps versions on every write (:meth:`trust_snapshot_versions`): a sidecar
        request reads the bit in its reply, its settle's head-cache key and its settle's
        featurizer, all on one version."""
        if not self._trust or not takes_several_gpus(pod):
            return room_factor(pod, snap)
        return 1.0 if self._bit(cluster_gpu_bound, snap) else 0.0

    def cpu_bound_factor(self, pod: PodSpec, snap: ClusterSnapshot) -> float:
        """:func:`dsan.clusterwide.cpu_bound_factor`, its cluster sums (taken for CPU-only
        pods) cached as :meth:`room_factor`'s."""
        if not self._trust or not takes_cpu_only(pod):
            return cpu_bound_factor(pod, snap)
        return 1.0 if self._bit(cluster_cpu_bound, snap) else 0.0

    def _bit(self, compute: Callable[[ClusterSnapshot], bool], snap: ClusterSnapshot) -> bool:
        """``compute(snap)``, once per snapshot object and (telemetry) version."""
        got = self._bits.get(compute)
        if (got is None or got[0] is not snap or got[1] != snap.version
                or got[2] != snap.telemetry_version):
            got = (snap, snap.version, snap.telemetry_version, compute(snap))
            self._bits[compute] = got
        return got[3]

    def note_changes(self, since: int, version: int, rows: Sequence[int]) -> None:
        """With :meth:`trust_snapshot_versions`: the snapshot the next :meth:`get` passes
        went from version ``since`` to ``version`` by writes to ``rows`` alone (the sidecar's
        row-change log), so the sync compares only those rows. Read once, by the next sync;
        ignored unless it spans exactly from the version last synced to that snapshot's.

        A record that continues one not read yet (from its version on) extends it: a
        settle whose class had no changed row leaves this cache unsynced, and the next
        record alone would no longer reach back to its last sync (an O(n) diff)."""
        hint = self._hint
        if hint is not None and hint[1] == since and len(hint[2]) + len(rows) <= _HINT_ROWS:
            self._hint = (hint[0], version, [*hint[2], *rows])
        else:
            self._hint = (since, version, rows)

    def access(self, snap: ClusterSnapshot) -> npt.NDArray[np.bool_]:
        """``workload.access(snap)`` (K, n), recomputed only when the nodes' GPU models change:
        it costs an object-array ``isin`` per constrained shape, too much for every pod."""
        key = (tuple(snap.gpu_models), snap.gpu_model.tobytes())
        if self._access is None or key != self._access_key:
            self._access, self._access_key = self.workload.access(snap), key
            self._forget()
        return self._access

    def _forget(self) -> None:
        self._memo_before.clear()
        self._memo_after.clear()

    def _state_keys(self, snap: ClusterSnapshot, rows: npt.NDArray[np.int64]) -> list[Any]:
        """:func:`state_key` of each of ``rows`` (a few)."""
        if len(self._memo_before) + len(self._memo_after) > _MEMO_SIZE:
            self._forget()  # bounded; states repeat, so it fills again quickly
        return [state_key(snap, r) for r in rows.tolist()]

    def adopt_fragmentation(self, frag: F64) -> None:
        """Take ``frag`` as every node's fragmentation at the next :meth:`get`: it must be
        :func:`dsan.policies.frag.node_frag` of the snapshot that call sees, against this
        cache's workload (a :class:`~dsan.policies.frag.FragTracker` kept current, as the
        simulator keeps one), so placements need not recompute it."""
        self._adopted = frag

    def _sync(self, snap: ClusterSnapshot) -> None:
        hint, self._hint = self._hint, None
        seen, seen_version = self._seen
        if self._trust and seen is snap and len(snap) == len(self._names):
            # The same object (its node set cannot have changed: see trust_snapshot_versions)
            if seen_version == snap.version:
                return  # nothing written since the last sync
            if hint is not None and hint[0] == seen_version and hint[1] == snap.version:
                self._seen = (snap, snap.version)
                self._track.sync_rows(snap, hint[2])
                return
        self._seen = (snap, snap.version)
        if len(snap) != len(self._names) or snap.names != self._names:
            self._names = list(snap.names)
            self._track.reset(snap)
            self._entries = {}
            self._before = np.zeros(len(snap))
            self._before_at = np.full(len(snap), -1, dtype=np.int64)
            self._forget()
            return
        self._track.sync(snap)

    def get(self, pod: PodSpec, snap: ClusterSnapshot, nodes: npt.NDArray[np.int64]) -> Placement:
        return cached_placements([self], [pod], [snap], [nodes])[0]

    def few(self, pod: PodSpec, snap: ClusterSnapshot,
            rows: list[int]) -> list[tuple[float, float, int, list[int]]]:
        """:meth:`get` of a few ``rows`` as Python values, per row (frag_before, frag_after,
        slot, free_after): the same entries, memo and so numbers as :meth:`get`. Rows that
        are current or whose states are in the memo cost a few scalar reads and writes
        (:func:`recall_py`) instead of ~20 numpy calls on one- or two-row arrays (a
        settle's rows); any other row sends the call through :meth:`get`."""
        memo = self.memo(pod, snap, len(rows))
        if memo is not None and recall_py(memo, key_columns(snap), rows):
            e_before, e_after, e_slot, e_free = memo[1:5]
            return [(e_before.item(r), e_after.item(r), e_slot.item(r), e_free[r].tolist())
                    for r in rows]
        pl = self.get(pod, snap, np.array(rows, dtype=np.int64))
        return [(pl.frag_before.item(i), pl.frag_after.item(i), pl.slot.item(i),
                 pl.free_after[i].tolist()) for i in range(len(rows))]

    def memo(self, pod: PodSpec, snap: ClusterSnapshot, m: int) -> Memo | None:
        """Synced with ``snap``: what :func:`recall_py` (or :mod:`dsan.model.memorows`) reads and
        writes to serve ``m`` rows of ``pod``'s shape from the memo, or None where the memo
        cannot serve (no entry for the shape yet, fragmentation to adopt, too many rows)."""
        self._sync(snap)
        shape = (pod.cpu_milli, pod.num_gpu, pod.gpu_milli)
        entry = self._entries.get(shape)
        if entry is None or self._adopted is not None or m > _MEMO_ROWS:
            return None
        if len(self._memo_before) + len(self._memo_after) > _MEMO_SIZE:
            self._forget()
        return (shape, *entry, self._track.epoch, self._before, self._before_at,
                self._track.tick, self._memo_before, self._memo_after)

    def _prepare(
        self, pod: PodSpec, snap: ClusterSnapshot, nodes: npt.NDArray[np.int64]
    ) -> tuple[_Entry, npt.NDArray[np.int64], list[Any] | None]:
        """Sync with ``snap``; the pod shape's entry and which of ``nodes`` it lacks, with
        their current fragmentation ("before") brought up to date, and those rows' memo state
        keys when they are few enough for the memo (None otherwise)."""
        self._sync(snap)
        if self._adopted is not None:
            self._before[:] = self._adopted
            self._before_at[:] = self._track.tick
            self._adopted = None
        key = (pod.cpu_milli, pod.num_gpu, pod.gpu_milli)  # all placement() depends on
        n = len(snap)
        if key not in self._entries:
            self._entries[key] = (
                np.zeros(n),
                np.zeros(n),
                np.full(n, -1, dtype=np.int64),
                np.zeros((n, MAX_GPUS), dtype=np.int64),
                np.full(n, -1, dtype=np.int64),
            )
        entry = self._entries[key]
        stale = self._track.stale(entry[4], nodes)
        stale_keys = self._state_keys(snap, stale) if 0 < stale.size <= _MEMO_ROWS else None
        if stale.size:
            behind = np.flatnonzero(self._before_at[stale] < self._track.epoch[stale])
            old = stale[behind]
            if old.size:
                keys = (None if stale_keys is None
                        else [stale_keys[i] for i in behind.tolist()])
                got = [] if keys is None else [self._memo_before.get(k) for k in keys]
                if keys is not None and None not in got:
                    self._before[old] = got
                else:
                    self._before[old] = node_frag(
                        snap.cpu_cap[old] - snap.cpu_used[old],
                        snap.gpu_free[old],
                        self.access(snap)[:, old],
                        self.workload,
                    )
                    if keys is not None:
                        self._memo_before.update(zip(keys, self._before[old].tolist(),
                                                     strict=True))
                self._before_at[old] = self._track.tick
        return entry, stale, stale_keys

    def _recall(self, pod: PodSpec, entry: _Entry, stale: npt.NDArray[np.int64],
                state_keys: list[Any]) -> tuple[npt.NDArray[np.int64], list[Any]]:
        """Fill ``entry`` for the memoised rows of ``stale`` (a few; ``state_keys`` are their
        :meth:`_state_keys`); the rest, and their memo keys, are left for the caller to
        compute and :meth:`_remember`."""
        shape = (pod.cpu_milli, pod.num_gpu, pod.gpu_milli)
        keys = [(shape, k) for k in state_keys]
        got = [self._memo_after.get(k) for k in keys]
        miss = [i for i, v in enumerate(got) if v is None]
        for x, v in zip(stale.tolist(), got, strict=True):
            if v is not None:
                entry[0][x], entry[1][x], entry[2][x], entry[3][x] = self._before[x], *v
                entry[4][x] = self._track.tick
        return stale[miss], [keys[i] for i in miss]

    def _remember(self, entry: _Entry, rows: npt.NDArray[np.int64], keys: list[Any]) -> None:
        for x, k in zip(rows.tolist(), keys, strict=True):
            self._memo_after[k] = (float(entry[1][x]), int(entry[2][x]), entry[3][x].copy())


_Entry = tuple[F64, F64, npt.NDArray[np.int64], npt.NDArray[np.int64], npt.NDArray[np.int64]]


def cached_placements(
    caches: Sequence[PlacementCache],
    pods: Sequence[PodSpec],
    snaps: Sequence[ClusterSnapshot],
    nodes: Sequence[npt.NDArray[np.int64]],
) -> list[Placement]:
    """:meth:`PlacementCache.get` for several (cache, pod, snapshot, candidates) at once: the
    what-ifs every cache lacks are computed in one call per kind of pod (sharing or not) and
    workload, rows of all decisions together, so numpy's per-call overhead is paid once per
    batch instead of once per decision. Each row's value does not depend on the batch."""
    prepared = [c._prepare(p, s, n)
                for c, p, s, n in zip(caches, pods, snaps, nodes, strict=True)]
    prep = [(entry, stale) for entry, stale, _ in prepared]
    memo: dict[int, list[Any]] = {}
    for i, (entry, stale, state_keys) in enumerate(prepared):
        if state_keys is not None:  # 0 < stale.size <= _MEMO_ROWS
            left, memo[i] = caches[i]._recall(pods[i], entry, stale, state_keys)
            prep[i] = (entry, left)
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
        present = cat([snaps[i].gpu_count[x][:, None] > _SLOTS for i, x in pairs])
        cpu_after = cat(
            [snaps[i].cpu_cap[x] - snaps[i].cpu_used[x] - pods[i].cpu_milli for i, x in pairs]
        )
        num_gpu = np.repeat([pods[i].num_gpu for i in idx], sizes).astype(np.int64)
        gpu_milli = np.repeat([pods[i].gpu_milli for i in idx], sizes).astype(np.int64)
        acc = cat([caches[i].access(snaps[i])[:, x] for i, x in pairs], axis=1)
        before = cat([caches[i]._before[x] for i, x in pairs])
        w = caches[idx[0]].workload
        after, slot, free_after = whatif(
            sharing, free, present, cpu_after, num_gpu, gpu_milli, acc, w, before
        )
        at = 0
        for i, x in pairs:
            e, c, sl = prep[i][0], caches[i], slice(at, at + len(x))
            e[0][x], e[1][x], e[2][x], e[3][x] = before[sl], after[sl], slot[sl], free_after[sl]
            e[4][x] = c._track.tick
            at += len(x)
    for i, keys in memo.items():
        if keys:
            caches[i]._remember(prep[i][0], prep[i][1], keys)
    return [
        Placement(e[0][n], e[1][n], e[3][n], e[2][n]) for (e, _), n in zip(prep, nodes, strict=True)
    ]
