"""Serving DSAN: node embeddings kept current, features and logits kept per pod class.

A request's logits are ``runtime.logits(featurize(pod, snap, nodes), nodes)``
(:meth:`ServingModel.reference` computes exactly that). What :meth:`ServingModel.logits`
keeps so that a request costs O(candidates) numpy passes instead of a featurization:

* **per cluster** (:class:`NodeEmbeddings`): the pod-independent node columns and both
  streams, refreshed when the snapshot's telemetry version says telemetry or static columns
  changed (at most every ``min_refresh_s``; the sidecar's default 1 s) or its node set did, at
  the cost of what changed: the LSTM and node columns of the nodes whose telemetry changed
  (everything when a static input's values change; compared against copies, as the sidecar
  writes its snapshot in place), the GNN over every node (it mixes every node's age columns
  into its neighbours); equal to a full recompute up to float32 rounding;
* **per pod class** (every pod field the featurizer reads, plus the two cluster-wide bits,
  :func:`dsan.features.room_factor` and :func:`dsan.features.cpu_bound_factor`): every node's
  pod-dependent feature row and the 7 quantities its candidate-relative columns are scaled from
  (:func:`dsan.features.pod_rows`), recomputed only for nodes whose allocation changed since
  (:class:`~dsan.core.snapshot.AllocationTracker`);
* **per class and candidate-set extremes** (:func:`dsan.features.extremes`): every node's
  logit and the class row and telemetry age it was computed from. A node's logit depends
  only on its own row, its age, the extremes and the embeddings, so a request recomputes
  only the candidates whose row or age moved (usually none, or the node the previous pod
  went to), and all of them after an embedding refresh.

kube-scheduler sends rotations and subsets of the same feasible nodes, whose extremes rarely
move. :meth:`ServingModel.prepare` brings a class up to date off the request path (the
sidecar calls it once the winner is charged). The feature rows assembled for a candidate are
``featurize``'s own bits, so the cached logits equal the reference up to the float32
rounding of a matrix product over a different set of rows.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Hashable
from dataclasses import dataclass, field
from operator import is_
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from dsan.core.snapshot import AllocationTracker, ClusterSnapshot, PodSpec
from dsan.features import (
    AGE_COLUMNS,
    N_FEATURES,
    N_NODE_FEATURES,
    RELATIVE_COLUMNS,
    PlacementCache,
    TargetWorkload,
    age_columns,
    cpu_bound_factor,
    default_workload,
    extremes,
    featurize,
    node_block,
    pod_rows,
    relative_columns,
    room_factor,
    telemetry_of,
)
from dsan.model.artifact import DEFAULT_DIR
from dsan.model.graph import Graph
from dsan.model.runtime import Runtime, load_runtime

F32 = npt.NDArray[np.float32]
F64 = npt.NDArray[np.float64]
I64 = npt.NDArray[np.int64]

#: The allocation columns a class row reads (static ones change the embeddings' epoch).
ROW_COLUMNS = ("cpu_used", "mem_used", "gpu_free", "pod_count")
#: Pod classes kept at once (each ~ n x 330 bytes); the oldest is dropped beyond.
MAX_CLASSES = 16
#: Candidate-set extremes kept per class: as many sets (SET_NODE_BYTES per node each) as fit
#: in SET_BYTES, at least MIN_SETS and at most MAX_SETS; the oldest is dropped beyond.
SET_BYTES = 1 << 20
SET_NODE_BYTES = 24  # logit (float64), class-row tick (int64), age (float64)
MIN_SETS, MAX_SETS = 4, 64


#: The snapshot columns node_block's non-telemetry, non-age columns are made of.
_STATIC = ("cpu_cap", "mem_cap", "gpu_count", "gpu_model", "zone", "rack", "nvlink",
           "hourly_cost", "taint_mask")


def _copy(a: Any) -> Any:
    return None if a is None else a.copy()


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, np.ndarray) and isinstance(b, np.ndarray):
        return np.array_equal(a, b)
    return bool(a == b)


class NodeEmbeddings:
    """Every node's pod-independent columns and both streams, as of the last refresh."""

    def __init__(self, runtime: Runtime) -> None:
        self.runtime = runtime
        #: node_block of every node as last computed (a new array per refresh).
        self.node_cols: F32 = np.zeros((0, N_NODE_FEATURES), dtype=np.float32)
        #: Bumped by every refresh: logits computed before it are stale.
        self.version = 0
        #: Bumped when the node set or a static column changed: per-node rows computed
        #: before it (features, not only logits) are stale.
        self.epoch = 0
        self._ht: F32 = np.zeros((0, 0), dtype=np.float32)
        self._tel: F32 | None = None
        self._static: tuple[Any, ...] | None = None
        #: The topology graph, rebuilt by every full recompute (the topology is static columns).
        self._graph: Graph | None = None

    def refresh(self, snap: ClusterSnapshot) -> None:
        """Bring the node columns and streams to ``snap``."""
        n = len(snap)
        nodes = np.arange(n, dtype=np.int64)
        tel = telemetry_of(snap, nodes)
        static = self._static_key(snap)
        rt = self.runtime
        old = self._tel
        if old is None or old.shape != tel.shape or not all(
                map(_same, static, self._static or ())):
            cols = node_block(snap, nodes)
            ht = rt.temporal(tel)
            self._graph = Graph.of(snap)
            self.epoch += 1
        else:
            # NaN readings compare unequal: such rows are simply recomputed every time.
            changed = np.flatnonzero((tel != old).any(axis=(1, 2)))
            cols, ht = self.node_cols.copy(), self._ht.copy()
            if changed.size:
                cols[changed] = node_block(snap, changed)
                ht[changed] = rt.temporal(tel[changed])
            cols[:, AGE_COLUMNS] = age_columns(snap, nodes)
        assert self._graph is not None
        rt.set_streams(ht, rt.spatial(cols, self._graph))
        self.node_cols, self._ht, self._tel, self._static = cols, ht, tel, static
        self.version += 1

    @staticmethod
    def _static_key(snap: ClusterSnapshot) -> tuple[Any, ...]:
        # node_block reads only how many images a node holds: counts, not copies of the sets
        images = (None if snap.images is None
                  else np.fromiter(map(len, snap.images), dtype=np.int64, count=len(snap)))
        return (len(snap), list(snap.names), images,
                *(_copy(getattr(snap, c)) for c in _STATIC))


def class_key(pod: PodSpec) -> Hashable:
    """Every pod field :func:`dsan.features.featurize` reads (not the name)."""
    return (pod.cpu_milli, pod.mem_mib, pod.num_gpu, pod.gpu_milli, pod.gpu_models,
            pod.priority, pod.task_type, pod.gang_size, pod.image)


def sets_kept(n: int) -> int:
    """How many candidate-set extremes a class keeps on a cluster of ``n`` nodes."""
    return max(MIN_SETS, min(MAX_SETS, SET_BYTES // (SET_NODE_BYTES * max(n, 1))))


@dataclass(slots=True)
class _Set:
    """One class's logits under one candidate-set extremes."""

    lo: F64
    hi: F64
    logit: F64
    at: I64  # the class row's tick each logit was computed from (-1: never)
    age: F64  # the telemetry age each was computed with (NaN never equals: recomputed)
    version: int  # the embeddings' version they were computed with


@dataclass(slots=True)
class _Class:
    x: F32  # (n, 72) pod-dependent feature rows, relative columns 0
    v: F64  # (7, n) the relative columns' quantities (gathered with np.take: C order, so
    # the reductions over a candidate set run along contiguous rows)
    at: I64  # (n,) tracker tick each row was computed at (-1: never)
    sets: dict[bytes, _Set] = field(default_factory=dict)
    #: The candidates of the class's last request: what its next one most likely sends
    #: (kube-scheduler sends rotations of the same feasible nodes).
    last: I64 | None = None


class ServingModel:
    """A DSAN runtime, the embeddings of the last snapshot seen, and the per-class caches."""

    def __init__(
        self,
        runtime: Runtime,
        workload: TargetWorkload | None = None,
        manifest: dict[str, Any] | None = None,
        min_refresh_s: float = 0.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.runtime = runtime
        self.workload = workload or default_workload()
        #: The model directory's manifest (version, schema, training), empty for a bare model.
        self.manifest = manifest or {}
        #: Telemetry and static columns reach the embeddings at most this late (0: at once,
        #: as the simulator needs).
        self.min_refresh_s = min_refresh_s
        self._clock = clock
        self._refreshed_at = -math.inf
        self.embeddings = NodeEmbeddings(runtime)
        self._inputs: tuple[Any, ...] | None = None
        self._tver = -1
        self._placements = PlacementCache(self.workload)
        self._models: list[str] = []
        self._rows = AllocationTracker(ROW_COLUMNS)
        self._classes: dict[Hashable, _Class] = {}
        self._epoch = -1

    @classmethod
    def from_dir(cls, model_dir: str | Path = DEFAULT_DIR, runtime: str = "numpy",
                 workload: TargetWorkload | None = None,
                 min_refresh_s: float = 0.0) -> ServingModel:
        rt, manifest = load_runtime(model_dir, runtime)
        return cls(rt, workload, manifest, min_refresh_s=min_refresh_s)

    # --- per cluster -------------------------------------------------------------------------
    def refresh(self, snap: ClusterSnapshot, due: bool = True) -> None:
        """Recompute the embeddings if ``snap``'s node set or column objects changed, or
        (``due``, and ``min_refresh_s`` since the last refresh) its telemetry version did.
        Allocations are not in the embeddings: the class rows follow them at every call."""
        inputs = _inputs(snap)
        same = self._inputs is not None and all(map(is_, self._inputs, inputs))
        if same and self._tver == snap.telemetry_version:
            return
        now = self._clock()
        if same and (not due or now - self._refreshed_at < self.min_refresh_s):
            return
        self._refreshed_at = now
        self.embeddings.refresh(snap)
        self._inputs, self._tver = inputs, snap.telemetry_version

    def _sync(self, snap: ClusterSnapshot, due: bool) -> None:
        self.refresh(snap, due)
        if self._models != snap.gpu_models:  # placements resolve shapes by GPU model name
            self._placements, self._models = PlacementCache(self.workload), list(snap.gpu_models)
            self._classes.clear()
        if self._epoch != self.embeddings.epoch:  # node set or static columns changed
            self._epoch = self.embeddings.epoch
            self._classes.clear()
            self._rows.reset(snap)
        else:
            self._rows.sync(snap)

    # --- per class -----------------------------------------------------------------------------
    def _class(self, key: tuple[Hashable, float, float], snap: ClusterSnapshot) -> _Class:
        c = self._classes.pop(key, None)  # re-inserted: most recently used last
        if c is None:
            n = len(snap)
            c = _Class(np.zeros((n, N_FEATURES - N_NODE_FEATURES), dtype=np.float32),
                       np.zeros((7, n)), np.full(n, -1, dtype=np.int64))
            if len(self._classes) >= MAX_CLASSES:
                del self._classes[next(iter(self._classes))]
        self._classes[key] = c
        return c

    def _update_rows(self, c: _Class, pod: PodSpec, snap: ClusterSnapshot, nodes: I64,
                     factors: tuple[float, float]) -> None:
        stale = self._rows.stale(c.at, nodes)
        if stale.size:
            stale = _unique(stale)
            c.x[stale], c.v[:, stale] = pod_rows(pod, snap, stale, self.workload,
                                                 self._placements, factors)
            c.at[stale] = self._rows.tick

    def _set(self, c: _Class, lo: F64, hi: F64, n: int) -> _Set:
        key = lo.tobytes() + hi.tobytes()
        s = c.sets.get(key)
        if s is None:
            s = _Set(lo, hi, np.zeros(n), np.full(n, -1, dtype=np.int64), np.full(n, np.nan),
                     self.embeddings.version)
            if len(c.sets) >= sets_kept(n):
                del c.sets[next(iter(c.sets))]
            c.sets[key] = s
        elif s.version != self.embeddings.version:
            s.at[:] = -1
            s.version = self.embeddings.version
        return s

    def _compute(self, c: _Class, s: _Set, snap: ClusterSnapshot, nodes: I64,
                 ages: F64) -> None:
        """The logits of ``nodes`` under ``s``'s extremes, into ``s``."""
        x = np.empty((len(nodes), N_FEATURES), dtype=np.float32)
        x[:, :N_NODE_FEATURES] = self.embeddings.node_cols[nodes]
        x[:, AGE_COLUMNS] = age_columns(snap, nodes)
        x[:, N_NODE_FEATURES:] = c.x[nodes]
        x[:, RELATIVE_COLUMNS] = relative_columns(np.take(c.v, nodes, axis=1), s.lo, s.hi).T
        s.logit[nodes] = self.runtime.logits(x, nodes)
        s.at[nodes] = c.at[nodes]
        s.age[nodes] = ages[nodes]

    # --- the two entry points ------------------------------------------------------------------
    def logits(self, pod: PodSpec, snap: ClusterSnapshot, nodes: I64) -> F64:
        """One logit per entry of ``nodes`` (all assumed feasible), as :meth:`reference`."""
        nodes = np.asarray(nodes, dtype=np.int64)
        if len(nodes) == 0:
            return np.zeros(0)
        self._sync(snap, due=self._inputs is None or self.min_refresh_s == 0)
        return self._logits(pod, snap, nodes, _key(pod, snap))

    def _logits(self, pod: PodSpec, snap: ClusterSnapshot, nodes: I64,
                key: tuple[Hashable, float, float]) -> F64:
        """:meth:`logits` once synced, with the class key (it holds the cluster-wide factors
        the rows are featurized with)."""
        c = self._class(key, snap)
        self._update_rows(c, pod, snap, nodes, key[1:])
        lo, hi = extremes(np.take(c.v, nodes, axis=1))
        s = self._set(c, lo, hi, len(snap))
        ages = np.zeros(len(snap)) if snap.telemetry_age_s is None else snap.telemetry_age_s
        at = np.take(c.at, nodes)
        redo = nodes[(np.take(s.at, nodes) != at) | (np.take(s.age, nodes) != np.take(ages, nodes))]
        if redo.size:
            self._compute(c, s, snap, _unique(redo), ages)
        c.last = nodes
        return np.take(s.logit, nodes)

    def prepare(self, pod: PodSpec, snap: ClusterSnapshot) -> None:
        """Off the request path: refresh the embeddings if due and serve ``pod``'s class its
        last candidates again, discarding the answer: the rows that changed are featurized
        and the logits under the candidate set's new extremes computed, so the next request
        of the class, if it sends the same nodes, only gathers."""
        self._sync(snap, due=True)
        key = _key(pod, snap)
        c = self._classes.get(key)
        if c is not None and c.last is not None:
            self._logits(pod, snap, c.last, key)

    def features(self, pod: PodSpec, snap: ClusterSnapshot, nodes: I64,
                 node_cols: F32 | None = None) -> F32:
        """``featurize(pod, snap, nodes)`` with the nodes' embedding columns, without the
        caches: the rows :meth:`logits` scores (explanations, tests). ``node_cols``: those
        columns as copied earlier (the sidecar copies them under its lock); default: the
        current embeddings', refreshed for ``snap``."""
        nodes = np.asarray(nodes, dtype=np.int64)
        if node_cols is None:
            self.refresh(snap)
            cols = self.embeddings.node_cols[nodes]
        else:
            cols = node_cols.copy()
        cols[:, AGE_COLUMNS] = age_columns(snap, nodes)
        return featurize(pod, snap, nodes, self.workload, node_cols=cols)

    def reference(self, pod: PodSpec, snap: ClusterSnapshot, nodes: I64) -> F64:
        """What :meth:`logits` returns, without its caches (tests)."""
        return self.runtime.logits(self.features(pod, snap, nodes), np.asarray(nodes, np.int64))


def _unique(a: I64) -> I64:
    """``np.unique(a)`` (sorted, each once); for more than a few rows by a sort and a
    neighbour comparison, ~7x cheaper than numpy's hash-based unique on a candidate set."""
    if a.size < 2:
        return a
    if a.size <= 16:
        return np.unique(a)
    a = np.sort(a)
    keep = np.empty(a.size, dtype=bool)
    keep[0] = True
    np.not_equal(a[1:], a[:-1], out=keep[1:])
    return a if keep.all() else a[keep]


def _key(pod: PodSpec, snap: ClusterSnapshot) -> tuple[Hashable, float, float]:
    """The pod's class: :func:`class_key` and the two cluster-wide factors, in
    :func:`dsan.features.pod_rows`' order."""
    return (class_key(pod), room_factor(pod, snap), cpu_bound_factor(pod, snap))


def _inputs(snap: ClusterSnapshot) -> tuple[Any, ...]:
    """The objects the embeddings were computed from: replaced objects mean new inputs."""
    return (snap.names, snap.cpu_cap, snap.mem_cap, snap.gpu_count, snap.gpu_model, snap.zone,
            snap.rack, snap.nvlink, snap.hourly_cost, snap.taint_mask, snap.images,
            snap.telemetry)
