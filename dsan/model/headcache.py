"""DSAN's head, split so a pod class's per-node work is done once: exact, and per request
O(candidates) only when the candidate set's extremes moved.

The first layer's absolute-column terms live per pod class and node in
:mod:`dsan.model.rowcache`. Per request, the 9 :data:`REQUEST_COLUMNS` are added: the 7
candidate-relative ones are min-max ranks and "ties with the winner" flags, so a node's value
depends only on its own cached quantities and the candidate set's per-column minimum and
maximum (``lo``, ``hi``); the 2 age columns only on the node's telemetry age. A node's logit
is therefore a function of (its class row, its age, ``lo``, ``hi``): :class:`SetLogits` keeps,
per class and ``(lo, hi)``, every node's logit and what it was computed from, and a request
recomputes only the nodes whose row or age moved since (usually the one or two nodes the
previous assumption changed). kube-scheduler sends rotations and subsets of the same feasible
nodes, whose extremes rarely move: a new ``(lo, hi)`` (or a clock tick that moves every age)
costs one pass over the candidates, as before.

The rest of the head (attention over the two cached streams, ReLU, the 3H -> 2H -> 1 MLP)
runs in numpy on the rows a request needs: :class:`dsan.model.headmirror.HeadMirror`, which
also reads the weights. No torch on the request path.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt
import torch

from dsan.features import PlacementCache
from dsan.filtering import feasible
from dsan.model import headscan
from dsan.model.headmirror import HeadMirror
from dsan.model.headscan import unique_rows
from dsan.model.heldreply import Held
from dsan.model.net import DSANNet
from dsan.model.rowcache import ClassRows, Hint, RowTracker, class_key
from dsan.rowfeatures import REQUEST_COLUMNS
from dsan.snapshot import ClusterSnapshot, PodSpec

F32 = npt.NDArray[np.float32]
F64 = npt.NDArray[np.float64]
I64 = npt.NDArray[np.int64]
BOOL = npt.NDArray[np.bool_]

__all__ = ["MAX_CLASSES", "MAX_SETS", "MIN_SETS", "REQUEST_COLUMNS", "SET_BYTES",
           "SET_NODE_BYTES", "HeadCache", "SetLogits", "class_key", "follow", "sets_kept",
           "unique_rows"]

#: Up to this many stale rows are sorted as a Python set (a settle's one or two: np.unique's
#: sort machinery costs ~5 us), more by :func:`unique_rows`.
FEW_ROWS = 4
#: Pod classes kept at once (each ~ n x (3H + 8) numbers); the oldest is dropped beyond.
MAX_CLASSES = 32
#: Candidate-set extremes kept per class: as many sets (each SET_NODE_BYTES x n bytes) as
#: fit in SET_BYTES, at least MIN_SETS and at most MAX_SETS; the oldest is dropped beyond.
#: A count alone had to be sized for 5,000 nodes (4 sets, 480 KB) and so missed at 100 nodes,
#: where a class's candidates keep returning to extremes it saw more than 4 sets ago (the
#: latency bench's rotation: ~12, docs/sidecar.md "The set cache by bytes").
SET_BYTES = 1 << 20
#: Bytes a :class:`SetLogits` holds per node: its logit (float64), tick (int64) and age
#: (float64).
SET_NODE_BYTES = 24
MIN_SETS = 4
MAX_SETS = 64


def sets_kept(n: int, set_bytes: int = SET_BYTES) -> int:
    """How many candidate-set extremes a class keeps on a cluster of ``n`` nodes."""
    return max(MIN_SETS, min(MAX_SETS, set_bytes // (SET_NODE_BYTES * max(n, 1))))


def _class_of(pod: PodSpec, snap: ClusterSnapshot, placements: PlacementCache) -> Hashable:
    """The cache's class of ``pod``: :func:`class_key`, marked when the cluster-wide bit of
    ``shape1_room_gpu_bound`` (:func:`dsan.clusterwide.room_factor`) is set or, for a
    CPU-only pod, that of ``cpu_bound_cpu_per_gpu`` (:func:`dsan.clusterwide.cpu_bound_factor`),
    so a class's rows are all computed under one value of each and a flip never leaves stale
    rows."""
    key = class_key(pod)
    if placements.room_factor(pod, snap):
        return (key, "gpu-bound")
    if placements.cpu_bound_factor(pod, snap):  # 0 for any pod asking for GPUs
        return (key, "cpu-bound")
    return key


def follow(last: I64, changed: I64, pod: PodSpec, snap: ClusterSnapshot,
           ok: BOOL | None = None) -> I64:
    """The candidates a pod class's next request will most likely send, given those of its
    last request (``last``) and the nodes whose allocation ``changed`` since: ``last``
    less the changed nodes that no longer fit ``pod``, plus the changed ones that now do
    (on our view, as the sidecar filters). ``last`` itself (the same object) when that
    moves nothing. ``ok``: ``feasible(pod, snap)`` over every node when the caller has it
    (the sidecar's feasibility cache), else the changed rows are checked here.
    (:func:`dsan.model.headscan.followed` is this with ``ok`` and the stale rows in one
    pass.)"""
    if not changed.size:
        return last
    fits = feasible(pod, snap, changed) if ok is None else ok[changed]
    return headscan.follow_fits(last, changed, fits, len(snap))


@dataclass(slots=True)
class SetLogits:
    """Logits of one class's nodes under one ``(lo, hi)``, and what each was computed from."""

    logit: F64  # (n,)
    at: I64  # (n,) the class row's tick (ClassRows.at) used; -2 never
    age: F64  # (n,) the telemetry age used (NaN never equals: recomputed every time)
    lo: F64  # (5, 1) the extremes the logits are computed under
    hi: F64  # (7, 1)

    @classmethod
    def empty(cls, n: int, lo: F64, hi: F64) -> SetLogits:
        return cls(np.zeros(n), np.full(n, -2, dtype=np.int64), np.full(n, np.nan), lo, hi)


class HeadCache:
    """Per-pod-class first-layer cache plus a numpy mirror of the rest of the head."""

    def __init__(self, model: DSANNet, max_classes: int = MAX_CLASSES,
                 max_sets: int | None = None) -> None:
        self.max_classes = max_classes
        #: Sets kept per class; None: :func:`sets_kept` of the cluster's size.
        self.max_sets = max_sets
        self._classes: dict[Hashable, ClassRows] = {}
        self._tracker: RowTracker | None = None
        #: Snapshots passed in bump their version on every in-place write
        #: (:class:`~dsan.model.rowcache.RowTracker`); set by ``trust_snapshot_versions``.
        self.trust_versions = False
        #: The caller's record of the rows written to a snapshot between two versions
        #: (:meth:`note_changes`), read by the next row sync.
        self._hint: Hint | None = None
        #: Rows featurized into the cache (observability and tests).
        self.rows_computed = 0
        #: The rest of the head, in numpy, over the current embeddings.
        self._mirror = HeadMirror(model)

    @property
    def rows_scored(self) -> int:
        """Rows sent through the head (observability and tests)."""
        return self._mirror.rows_scored

    def set_embeddings(self, emb: torch.Tensor, moved: I64 | None = None) -> None:
        """New node embeddings (N, 2, H): the streams' keys and values.

        ``moved=None`` (new weights, a new node set, a full refresh): the weights are read
        again and every class's rows are recomputed from now on. Otherwise the weights are
        the same and only the nodes ``moved`` have new absolute feature columns (their
        telemetry changed; every node's embedding still moved, through the GNN): each class
        keeps its first-layer rows and only re-derives their attention term from its stored
        query (O(nH) per class, no featurizing), drops its cached logits, and recomputes
        the ``moved`` rows at its next request, as after an allocation change."""
        if moved is None:
            self._mirror.load_weights()
        self._mirror.set_embeddings(emb)
        t = self._tracker
        if moved is None or t is None or len(t.epoch) != len(emb):
            self.clear()
            return
        for c in self._classes.values():
            c.rederive(self._mirror.layer)
        t.touch(moved)

    def trust_snapshot_versions(self) -> None:
        """From now on every snapshot passed in bumps ``version`` on each in-place write (the
        sidecar's cache promises it): an unchanged (snapshot, version) skips the row diff."""
        self.trust_versions = True
        if self._tracker is not None:
            self._tracker.trust_version = True

    def note_changes(self, since: int, version: int, rows: Sequence[int]) -> None:
        """The caller's record (with :meth:`trust_snapshot_versions`) that the snapshot the
        next call passes went from version ``since`` to ``version`` by writes to ``rows``
        alone: the row sync then compares only those rows. A record that does not span
        exactly from the last sync to that snapshot's version is ignored."""
        self._hint = (since, version, rows)

    def clear(self) -> None:
        self._classes.clear()
        self._tracker = None

    def logits(
        self,
        pod: PodSpec,
        snap: ClusterSnapshot,
        nodes: I64,
        node_cols: F32,
        placements: PlacementCache,
    ) -> F64:
        """The model's logits of ``pod`` on feasible ``nodes``; ``node_cols`` is the current
        :func:`dsan.features.node_block` of all nodes, ``placements`` the what-if cache."""
        c, _ = self._update(pod, snap, nodes, node_cols, placements)
        return self._set_logits(c, snap, nodes)

    def _update(self, pod: PodSpec, snap: ClusterSnapshot, nodes: I64, node_cols: F32,
                placements: PlacementCache) -> tuple[ClassRows, I64 | None]:
        """Sync the row tracker; ``pod``'s class with the rows of ``nodes`` whose node
        changed recomputed (returned, None if none)."""
        return self._class_rows(self._sync(snap), pod, snap, nodes, node_cols, placements)

    def _sync(self, snap: ClusterSnapshot) -> RowTracker:
        n = len(snap)
        t = self._tracker
        if t is None or len(t.epoch) != n:
            t = self._tracker = RowTracker(snap, self.trust_versions)
            self._classes.clear()
        else:
            t.sync(snap, self._hint)
        self._hint = None
        return t

    def _class_rows(self, t: RowTracker, pod: PodSpec, snap: ClusterSnapshot, nodes: I64,
                    node_cols: F32, placements: PlacementCache, key: Hashable = None
                    ) -> tuple[ClassRows, I64 | None]:
        """``key``: ``pod``'s :func:`_class_of`, when the caller has it."""
        n = len(snap)
        if key is None:
            key = _class_of(pod, snap, placements)
        c = self._classes.get(key)
        if c is None:
            if len(self._classes) >= self.max_classes:
                del self._classes[next(iter(self._classes))]
            c = self._classes[key] = ClassRows.empty(n, self._mirror.h)
        stale = headscan.stale(nodes, c.at, t.epoch)
        rows = None
        if stale.size:
            # np.unique's sort machinery costs ~5 us; a settle's one or two rows need none
            rows = (np.array(sorted(set(stale.tolist())), dtype=np.int64)
                    if stale.size <= FEW_ROWS else unique_rows(stale))
        self._recompute(c, t, pod, snap, nodes, rows, node_cols, placements)
        return c, rows

    def _recompute(self, c: ClassRows, t: RowTracker, pod: PodSpec, snap: ClusterSnapshot,
                   nodes: I64, rows: I64 | None, node_cols: F32,
                   placements: PlacementCache) -> None:
        """Recompute class ``c``'s ``rows`` (unique; None: none) and record ``nodes`` as the
        candidates it last served."""
        if rows is not None:
            c.update(self._mirror.layer, pod, snap, rows, node_cols, placements, t.tick)
            self.rows_computed += len(rows)
        c.last, c.seen = nodes, t.tick

    def held(self, pod: PodSpec, snap: ClusterSnapshot, placements: PlacementCache) -> Held | None:
        """What ``pod``'s class holds for a request on ``snap`` (the tracker synced to it):
        its logits under the extremes it last served, for :mod:`dsan.model.heldreply` to
        check against the request's candidates and scale. None if the class holds none."""
        t = self._tracker
        if t is None or len(t.epoch) != len(snap):
            return None
        t = self._sync(snap)
        c = self._classes.get(_class_of(pod, snap, placements))
        if c is None or c.held_key is None or c.held_key[2] != (snap.telemetry is None):
            return None
        e = c.sets.get(c.held_key)  # gone when the embeddings moved (rederive) or evicted
        if not isinstance(e, SetLogits):
            return None
        return Held(c.quant, e.lo, e.hi, c.at, t.epoch, e.at, e.age, snap.telemetry_age_s,
                    e.logit)

    def prefetch(self, pod: PodSpec, snap: ClusterSnapshot, node_cols: F32,
                 placements: PlacementCache, ok: BOOL | None = None) -> bool:
        """Bring ``pod``'s class up to date with ``snap`` by serving what its next request
        will most likely ask: its last candidates, less those that changed and no longer
        fit the pod, plus those that changed and now do (an assumption fills one node, and
        the assumption it replaced frees another). Their changed rows are recomputed and
        their logits set under the candidates' extremes: work the next request of the class
        then finds done. False if the class has no last request. ``ok``: as for
        :func:`follow`."""
        key = _class_of(pod, snap, placements)
        c = self._classes.get(key)
        t = self._tracker
        # Classes live only while the node count does (logits() starts over when it
        # changes), so an unchanged count means every row of c.last is in range.
        if c is None or c.last is None or t is None or len(t.epoch) != len(snap):
            return False
        t = self._sync(snap)
        last = c.last
        if ok is None:
            nodes = follow(last, np.flatnonzero(t.epoch > c.seen), pod, snap)
            c, rows = self._class_rows(t, pod, snap, nodes, node_cols, placements, key)
        else:  # the sidecar's settle: the candidates and their stale rows in one pass
            nodes, rows = headscan.followed(last, t.epoch, c.seen, ok, c.at)
            self._recompute(c, t, pod, snap, nodes, rows, node_cols, placements)
        # Every logit the next request reads, as it would find them: under the candidates'
        # extremes, which may be a set held from before, whose logits of rows that changed
        # under other extremes since are old too (not just ``rows``).
        # (none when every last candidate stopped fitting and none joined: no extremes)
        if nodes.size and (nodes is not last or rows is not None):
            self._set_logits(c, snap, nodes)
        # else nothing changed: the class is as its last request left it
        return True

    def _set_logits(self, c: ClassRows, snap: ClusterSnapshot, nodes: I64) -> F64:
        """Logits from the class's :class:`SetLogits` of the candidates' extremes; only the
        nodes whose row or age moved since go through the head. The passes over the
        candidates (extremes, what to recompute, the gather) are :mod:`dsan.model.headscan`'s."""
        lo, hi = headscan.extremes(c.quant, nodes)
        ages = snap.telemetry_age_s
        key = (lo.tobytes(), hi.tobytes(), snap.telemetry is None)
        e = c.sets.get(key)
        if not isinstance(e, SetLogits):
            keep = max(1, self.max_sets if self.max_sets is not None else sets_kept(len(snap)))
            while len(c.sets) >= keep:
                del c.sets[next(iter(c.sets))]
            e = c.sets[key] = SetLogits.empty(len(snap), lo, hi)
        c.held_key = key
        todo, out = headscan.lookup(nodes, c.at, e.at, e.age, ages, e.logit)
        if todo.size:
            self._mirror.set_logits(c, snap, nodes, todo, lo, hi, e.logit, e.at, e.age, out)
        return out
