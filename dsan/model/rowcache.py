"""Per pod class and node, the DSAN head's first-layer terms of the absolute feature columns.

Every place the model reads the (m, 128) features is linear first: ``fusion.query(x)``,
``head.proj(x)``, ``head.skip(x)``, ``head.gpu_skip(x) * (1 - pod_is_cpu_only)`` and the
residual prior ``x[:, fgd_score_int] * 100 * softplus(prior_scale)``. Of the 128 columns only
:data:`~dsan.rowfeatures.REQUEST_COLUMNS` depend on the candidate set or the clock; the rest
are a function of the pod's class (:func:`class_key`: every pod field the featurizer reads)
and the node's state. So each first-layer output is ``W[:, abs] x_abs + b``, kept here per
class and node, ``+ W[:, req] x_req``, added per request by :mod:`dsan.model.headmirror`.
A class keeps, per node, those pre-activations and the float64 quantities the relative
columns are computed from, and recomputes a node's row only after its allocation changed
(CPU, memory, GPUs, pod count: :class:`RowTracker`); usually one or two rows per request,
through the few-row featurizer :func:`dsan.rowfeatures.featurize_rows`, or for rows whose
placements are in the memo in one call (:func:`dsan.model.memorows.update_few`).
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt

from dsan.features import PlacementCache
from dsan.model.classrows import FEW, first, store
from dsan.model.memorows import update_few
from dsan.rowfeatures import REQUEST_COLUMNS, featurize_rows
from dsan.rowsync import Pair, sync_rows
from dsan.snapshot import ClusterSnapshot, PodSpec, _rows_differ

F32 = npt.NDArray[np.float32]
F64 = npt.NDArray[np.float64]
I64 = npt.NDArray[np.int64]
BOOL = npt.NDArray[np.bool_]


def class_key(pod: PodSpec) -> Hashable:
    """Every pod field :func:`dsan.features.featurize` reads (not the name)."""
    return (pod.cpu_milli, pod.mem_mib, pod.num_gpu, pod.gpu_milli, pod.gpu_models,
            pod.priority, pod.task_type, pod.gang_size, pod.image)


class RowTracker:
    """Which nodes' allocation state (everything ``featurize`` reads that a placement changes)
    changed since a cached row was computed: one vectorised compare per request.

    ``trust_version``: the caller promises that every in-place write to a snapshot it passes
    bumps :attr:`~dsan.snapshot.ClusterSnapshot.version` (the sidecar's cache does; tests and
    parts of the simulator write columns without it), so the same snapshot object at the
    same version as the last sync cannot have changed and the compare is skipped: a reply
    that follows the settle which already synced this snapshot then costs O(1) here.
    """

    def __init__(self, snap: ClusterSnapshot, trust_version: bool = False) -> None:
        self.cpu_used = snap.cpu_used.copy()
        self.mem_used = snap.mem_used.copy()
        self.gpu_free = snap.gpu_free.copy()
        self.pod_count = None if snap.pod_count is None else snap.pod_count.copy()
        self.epoch = np.zeros(len(snap), dtype=np.int64)
        self.tick = 1
        self.trust_version = trust_version
        # The snapshot object itself is held, so a new one can never pass for it.
        self._seen: tuple[ClusterSnapshot, int] = (snap, snap.version)

    def sync(self, snap: ClusterSnapshot, hint: Hint | None = None) -> None:
        """Record ``snap``'s allocation state; bump the epoch of every row that changed.

        ``hint`` (used only with ``trust_version``): ``(since, version, rows)``, the
        caller's record that ``snap`` went from version ``since`` to ``version`` by writes
        to ``rows`` alone (the sidecar's row-change log). When it spans exactly from the
        last sync to now, only those rows are compared instead of every node."""
        seen, seen_version = self._seen
        if self.trust_version and seen is snap:
            if seen_version == snap.version:
                return
            if (hint is not None and hint[0] == seen_version and hint[1] == snap.version
                    and (self.pod_count is None) == (snap.pod_count is None)):
                self._seen = (snap, snap.version)
                self.tick = sync_rows(self._pairs(snap), self.epoch, self.tick, hint[2])
                return
        self._seen = (snap, snap.version)
        diff = (snap.cpu_used != self.cpu_used) | (snap.mem_used != self.mem_used)
        diff |= _rows_differ(snap.gpu_free, self.gpu_free)
        if self.pod_count is not None and snap.pod_count is not None:
            diff |= snap.pod_count != self.pod_count
        elif (self.pod_count is None) != (snap.pod_count is None):
            diff[:] = True  # pod counts appeared or vanished: every row's column moved
            self.pod_count = None if snap.pod_count is None else snap.pod_count.copy()
        self._record(snap, np.flatnonzero(diff))

    def _pairs(self, snap: ClusterSnapshot) -> tuple[Pair, ...]:
        """The columns the full diff compares, as :func:`dsan.rowsync.sync_rows` pairs
        (the pod counts when both sides have them, as there)."""
        pairs: tuple[Pair, ...] = ((self.cpu_used, snap.cpu_used),
                                   (self.mem_used, snap.mem_used),
                                   (self.gpu_free, snap.gpu_free))
        if self.pod_count is not None and snap.pod_count is not None:
            pairs += ((self.pod_count, snap.pod_count),)
        return pairs

    def touch(self, rows: I64) -> None:
        """Mark ``rows`` changed for every class (their absolute feature columns moved)."""
        if len(rows):
            self.tick += 1
            self.epoch[rows] = self.tick

    def _record(self, snap: ClusterSnapshot, changed: I64) -> None:
        if changed.size:
            self.tick += 1
            self.epoch[changed] = self.tick
            self.cpu_used[changed] = snap.cpu_used[changed]
            self.mem_used[changed] = snap.mem_used[changed]
            self.gpu_free[changed] = snap.gpu_free[changed]
            if self.pod_count is not None and snap.pod_count is not None:
                self.pod_count[changed] = snap.pod_count[changed]


#: (version since, version now, rows written in between) of one snapshot object.
Hint = tuple[int, int, Sequence[int]]


@dataclass(frozen=True, slots=True)
class FirstLayer:
    """The head's first linear maps as numpy, read from the module at each embedding refresh."""

    h: int
    w_first: F32  # (3H, F): fusion.query then head.proj
    b_query: F32  # (H,)
    bias: F32  # (2H + 1,): head.proj's bias, then the summed linear logit terms' biases
    w_skip: F64  # (F,) head.skip
    w_gpu: F64  # (F,) head.gpu_skip, for pods that ask for GPUs
    residual: bool
    prior: tuple[int, float]  # (fgd_score_int column, 100 softplus(prior_scale))
    cpu_only: int  # pod_is_cpu_only column
    key_diff: F32  # (n, H): (key_1 - key_0) / sqrt(H) of the two streams per node
    uses_z: bool = True  # False: the MLP ignores the attention output, ``att`` is unused

    def of_class(self, x_pod: F32) -> F32:
        """(3H + 1, F) weights of one class: query, proj, and the summed linear logit terms
        (the GPU skip and the prior depend on the pod only through ``pod_is_cpu_only``)."""
        w = self.w_skip.copy()
        if self.residual:
            w = w + (1.0 - float(x_pod[self.cpu_only])) * self.w_gpu
            w[self.prior[0]] += self.prior[1]
        return np.concatenate([self.w_first, w[None, :].astype(np.float32)], axis=0).astype(
            np.float32
        )


@dataclass(slots=True)
class ClassRows:
    """One pod class's cached rows, for all n nodes; :meth:`update` recomputes some."""

    pre: F32  # (n, 2H + 1): proj and linear logit terms of the absolute columns, biases in
    att: F32  # (n,): (key_1 - key_0) . query(x_abs) / sqrt(H), query bias in
    #: (n, H) query(x_abs) with its bias: what ``att`` is re-derived from when only the
    #: embeddings move (:meth:`rederive`); unused while the MLP ignores z
    qv: F32
    quant: F64  # (7, n): delta, bestfit, least, dot, cost, fgd_int, bestfit (as featurize)
    at: I64  # (n,) tracker tick each row was computed at; -1 never
    w_abs: F32 = field(default_factory=lambda: np.zeros(0, dtype=np.float32))  # (F, 3H + 1)
    req_w: F32 = field(default_factory=lambda: np.zeros(0, dtype=np.float32))  # (9, 2H + 1)
    #: (9,) req_w's last column (the linear logit terms), contiguous: the head's linear term
    #: is a product with it on every request
    req_lin: F32 = field(default_factory=lambda: np.zeros(0, dtype=np.float32))
    #: (2H,) the most the relative columns can add to a pre-activation (each lies in [0, 1])
    req_top: F32 = field(default_factory=lambda: np.zeros(0, dtype=np.float32))
    #: (2H,) req_w's last row (tel_present's weights) without the linear term, contiguous
    req_age: F32 = field(default_factory=lambda: np.zeros(0, dtype=np.float32))
    #: The row writer's call-wide values for the class (:func:`dsan.model.memorows.
    #: update_few` fills and reads it)
    few_plan: list[Any] = field(default_factory=list)
    #: (n,) the ReLU layer is zero whatever the relative and age columns (each in [0, 1])
    #: are, given ``present`` (tel_present when the row was computed)
    dead: BOOL = field(default_factory=lambda: np.zeros(0, dtype=np.bool_))
    present: F32 = field(default_factory=lambda: np.zeros(0, dtype=np.float32))
    #: The head's logits per candidate-set extremes (:class:`dsan.model.headcache.SetLogits`)
    sets: dict[Hashable, object] = field(default_factory=dict)
    #: Rows featurized into this class (observability and tests).
    computed: int = 0
    #: The candidates of the class's last request (re-served by ``HeadCache.prefetch``).
    last: I64 | None = None
    #: The tracker's tick when the class last synced: rows whose epoch is past it changed
    #: since (``HeadCache.prefetch`` re-checks whether they are candidates).
    seen: int = 0
    #: The key in ``sets`` of the extremes last served (``HeadCache.held`` offers them to
    #: the next request); None before the first
    held_key: tuple[bytes, bytes, bool] | None = None

    @classmethod
    def empty(cls, n: int, h: int) -> ClassRows:
        return cls(np.zeros((n, 2 * h + 1), dtype=np.float32), np.zeros(n, dtype=np.float32),
                   np.zeros((n, h), dtype=np.float32), np.zeros((7, n)),
                   np.full(n, -1, dtype=np.int64),
                   dead=np.zeros(n, dtype=np.bool_), present=np.zeros(n, dtype=np.float32))

    def update(self, layer: FirstLayer, pod: PodSpec, snap: ClusterSnapshot, rows: I64,
               node_cols: F32, placements: PlacementCache, tick: int) -> None:
        """Recompute ``rows`` (unique) from the current snapshot; ``node_cols`` is the node
        block of all nodes. Up to :data:`~dsan.model.classrows.FEW` rows whose placements
        the memo holds are done in one call (:func:`dsan.model.memorows.update_few`); the
        general path below gives the same bits."""
        h, m = layer.h, len(rows)
        # without z the query columns are read by nothing: the few-row sum skips them
        c0 = 0 if layer.uses_z else h
        ages = None if snap.telemetry is None else snap.telemetry_age_s
        if m <= FEW and self.w_abs.size:
            first_out = np.empty((m, self.w_abs.shape[1]), dtype=np.float32)
            if update_few(pod, snap, rows, node_cols, placements,
                          (self.w_abs, c0, h, layer.bias, self.req_top, self.req_age, ages,
                           self.pre, self.present, self.dead, self.quant, self.at, tick,
                           first_out), self.few_plan):
                self._query(layer, rows, first_out)
                self.computed += m
                return
        x, q = featurize_rows(pod, snap, rows, node_cols[rows], placements)
        if self.w_abs.size == 0:  # first rows of the class: its weights (pod columns known now)
            w = layer.of_class(x[0])
            self.req_w = np.ascontiguousarray(w[h:, REQUEST_COLUMNS].T)
            self.req_lin = np.ascontiguousarray(self.req_w[:, 2 * h])
            w[:, REQUEST_COLUMNS] = 0.0  # featurize_rows leaves them zero; belt and braces
            self.w_abs = np.ascontiguousarray(w.T)
            self.req_top = np.maximum(self.req_w[:-1, : 2 * h], 0.0).sum(0)
            self.req_age = np.ascontiguousarray(self.req_w[-1, : 2 * h])
        if m <= FEW:  # the same sum as update_few's, whichever path computes the row
            pre = np.empty((m, self.w_abs.shape[1]), dtype=np.float32)
            first(x, self.w_abs, c0, pre)
        else:
            pre = x @ self.w_abs
        self._query(layer, rows, pre)
        # The rest (biases, the rows stored, which are dead) in store_py or its C twin.
        store(pre, h, rows, layer.bias, self.req_top, self.req_age, ages, self.pre,
              self.present, self.dead, self.quant, q, self.at, tick)
        self.computed += m

    def _query(self, layer: FirstLayer, rows: I64, pre: F32) -> None:
        """The rows' queries and attention terms from their first-layer outputs ``pre``."""
        if layer.uses_z:
            qv = pre[:, : layer.h] + layer.b_query
            self.qv[rows] = qv
            self.att[rows] = np.einsum("mh,mh->m", qv, layer.key_diff[rows])

    def rederive(self, layer: FirstLayer) -> None:
        """New embeddings, same weights (``layer.key_diff`` moved): ``att`` from the stored
        queries, and no cached logits (they read the old keys and values). Rows never
        computed get garbage that their first :meth:`update` overwrites."""
        if layer.uses_z:
            self.att[:] = np.einsum("mh,mh->m", self.qv, layer.key_diff)
        self.sets.clear()
