"""Serving DSAN: cached node embeddings, a small per-pod head.

The LSTM + GNN embeddings of all nodes depend only on static node columns, telemetry and
topology, never on the pod or on allocations, so :class:`ServingModel` keeps them and
recomputes them only when the snapshot says those inputs changed: a different node set or
column objects, or a new :attr:`~dsan.snapshot.ClusterSnapshot.telemetry_version` (bumped by
the sidecar's cache and the simulator whenever they write telemetry, static columns or
topology). An explicit counter costs O(1) per pod where hashing the columns cost O(n).

Telemetry *age* grows on every request in the sidecar; it does not invalidate embeddings
(nodes whose telemetry is too old are scored by the sidecar's fallback instead), but the
per-pod features carry the current age. Per pod the hot path is the exact per-pod-class
head cache (:mod:`dsan.model.rowcache`: featurize only the rows whose node changed, few at a
time through :mod:`dsan.rowfeatures`; :mod:`dsan.model.headcache`: logits kept per candidate
set extremes, the head run only on rows whose inputs moved); :meth:`ServingModel.prefetch`
does a class's changed rows after the sidecar's reply (``DSANScorer.after_assume``).
``fast=False`` keeps the reference path (featurize every candidate, gather the cached
embeddings, run the torch head). No per-node Python loop over candidates, no logging.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from operator import attrgetter, is_
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import torch

from dsan.features import (
    AGE_COLUMNS,
    PlacementCache,
    TargetWorkload,
    age_columns,
    default_workload,
    featurize,
)
from dsan.model.embeddings import NodeEmbeddings
from dsan.model.export import DEFAULT_DIR, load
from dsan.model.headcache import HeadCache
from dsan.model.heldreply import Held
from dsan.model.net import DSANNet
from dsan.snapshot import ClusterSnapshot, PodSpec

_VERSION = attrgetter("_version")  # a tensor's in-place write counter


def _inputs(snap: ClusterSnapshot) -> tuple[Any, ...]:
    """The objects the embeddings were computed from: replaced objects mean new inputs."""
    return (
        snap.names,
        snap.cpu_cap,
        snap.mem_cap,
        snap.gpu_count,
        snap.gpu_model,
        snap.zone,
        snap.rack,
        snap.nvlink,
        snap.hourly_cost,
        snap.taint_mask,
        snap.images,
        snap.telemetry,
    )


class ServingModel:
    """A DSAN model plus the node-embedding cache of the last snapshot seen."""

    def __init__(
        self,
        model: DSANNet,
        workload: TargetWorkload | None = None,
        manifest: dict[str, Any] | None = None,
        fast: bool = True,
        min_refresh_s: float = 0.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.model = model.eval()
        #: Telemetry and static columns reach the embeddings at most this late (0: at once,
        #: as the simulator needs). See :meth:`refresh`.
        self.min_refresh_s = min_refresh_s
        self._clock = clock
        self._refreshed_at = -math.inf
        #: Per-pod-class head cache (exact, :mod:`dsan.model.headcache`); None = the plain
        #: torch head over freshly featurized rows on every request (the reference).
        self.head: HeadCache | None = HeadCache(self.model) if fast else None
        self._params = list(self.model.parameters())
        self._wver = -1
        #: fix_weights() was called: per call, the weights are not checked for writes.
        self._fixed_weights = False
        self.workload = workload
        #: The model directory's manifest (version, schema, training), empty for a bare model.
        self.manifest = manifest or {}
        # Holding the objects themselves (not their ids) means an id can never be reused.
        self._inputs: tuple[Any, ...] | None = None
        self._tver = -1
        self._len = -1
        self.embeddings = NodeEmbeddings(self.model)
        #: How many times the embeddings were recomputed (observability and tests).
        self.embed_count = 0
        self._cache: PlacementCache | None = None
        #: trust_snapshot_versions() was called (applies to every PlacementCache made).
        self._trust = False
        # PlacementCache keeps fragmentation per node across pods, computed against shapes
        # resolved by GPU model *name*: renamed models start it over.
        self._models: list[str] = []

    @classmethod
    def from_dir(
        cls,
        model_dir: str | Path = DEFAULT_DIR,
        workload: TargetWorkload | None = None,
        min_refresh_s: float = 0.0,
    ) -> ServingModel:
        model, manifest = load(model_dir)
        return cls(model, workload, manifest, min_refresh_s=min_refresh_s)

    def _weights_version(self) -> int:
        """Bumped by any in-place write to a parameter (an optimiser step, load_state_dict):
        the cached embeddings and head weights are then recomputed. ~20 attribute reads."""
        return sum(map(_VERSION, self._params))

    def fix_weights(self) -> None:
        """The caller promises never to write the weights in place from now on (the sidecar
        loads the model once and only serves it): :meth:`refresh` then stops summing the
        parameters' write counters on every call (~2.2 us for the shipped model's 29
        tensors, on every reply and every settle). A write after this goes unnoticed until
        the node set or a column object changes, so training and the simulator never call
        it."""
        self._fixed_weights = True

    def _same_inputs(self, snap: ClusterSnapshot) -> bool:
        """Same weights (unless fixed), node count and column objects as the last refresh
        (the telemetry version aside)."""
        if self._len != len(snap) or self._inputs is None:
            return False
        if not self._fixed_weights and self._wver != self._weights_version():
            return False
        # identity, not equality, element by element in C (no generator frame per column)
        return all(map(is_, self._inputs, _inputs(snap)))

    def _fresh(self, snap: ClusterSnapshot) -> bool:
        return self._tver == snap.telemetry_version and self._same_inputs(snap)

    def refresh(self, snap: ClusterSnapshot) -> None:
        """Recompute node embeddings if telemetry, static columns or topology changed.

        With ``min_refresh_s`` > 0, a change of the snapshot's ``telemetry_version`` alone
        (same node set and column objects, same weights) waits until the last refresh is that
        old: a live cluster's GPUTelemetry objects bump it tens of times a second at 1,000
        nodes (each node adds a 10 s window), and each refresh costs ~3-4 ms there, so the
        sidecar (``embed_refresh_s``, default 1 s) bounds that to one per second. Allocations
        are not in the embeddings and are always current.
        """
        if self._fresh(snap):
            return
        now = self._clock()
        if now - self._refreshed_at < self.min_refresh_s and self._same_inputs(snap):
            return
        self._refreshed_at = now
        wver = self._weights_version()
        self.embeddings.refresh(snap, full=wver != self._wver)
        self._wver = wver
        if self.head is not None:
            self.head.set_embeddings(self.embeddings.emb, self.embeddings.moved)
        self._inputs, self._tver, self._len = _inputs(snap), snap.telemetry_version, len(snap)
        self.embed_count += 1

    def _placements(self, snap: ClusterSnapshot) -> PlacementCache:
        w = self.workload or default_workload()
        if self._cache is None or self._cache.workload is not w or self._models != snap.gpu_models:
            self._cache, self._models = PlacementCache(w), list(snap.gpu_models)
            if self._trust:
                self._cache.trust_snapshot_versions()
            if self.head is not None:
                self.head.clear()
        return self._cache

    def trust_snapshot_versions(self) -> None:
        """The caller bumps :attr:`ClusterSnapshot.version` on every in-place write to the
        snapshots it passes (the sidecar's cache does): the head cache then skips its row
        diff when the snapshot and its version are the ones it last synced with, and so does
        the placement cache."""
        self._trust = True
        if self._cache is not None:
            self._cache.trust_snapshot_versions()
        if self.head is not None:
            self.head.trust_snapshot_versions()

    def note_changes(self, since: int, version: int, rows: Sequence[int]) -> None:
        """With :meth:`trust_snapshot_versions`: the snapshot of the next call went from
        version ``since`` to ``version`` by writes to ``rows`` only (the sidecar's row-change
        log), so the head cache's and the placement cache's row syncs compare just those."""
        if self.head is not None:
            self.head.note_changes(since, version, rows)
        if self._cache is not None:
            self._cache.note_changes(since, version, rows)

    def prefetch(self, pod: PodSpec, snap: ClusterSnapshot,
                 feasible: npt.NDArray[np.bool_] | None = None) -> bool:
        """Off the request path (after the reply, e.g. right after an assumption): update
        ``pod``'s class to ``snap`` so its next request only gathers. Exact either way: the
        next request checks every row again. False if there was nothing to do.
        ``feasible``: ``pod``'s feasibility of every node of ``snap``, when the caller has
        it (:func:`dsan.model.headcache.follow` then reads it instead of checking again)."""
        if self.head is None:
            return False
        self.refresh(snap)
        return self.head.prefetch(pod, snap, self.embeddings.node_cols, self._placements(snap),
                                  feasible)

    def held(self, pod: PodSpec, snap: ClusterSnapshot) -> Held | None:
        """What ``pod``'s class holds for a request on ``snap`` (:meth:`HeadCache.held`),
        the embeddings refreshed first as for :meth:`logits`; None without a head cache."""
        if self.head is None:
            return None
        self.refresh(snap)
        return self.head.held(pod, snap, self._placements(snap))

    def logits(
        self, pod: PodSpec, snap: ClusterSnapshot, nodes: npt.NDArray[np.int64]
    ) -> npt.NDArray[np.float64]:
        """One logit per entry of ``nodes`` (all assumed feasible)."""
        if len(nodes) == 0:
            return np.zeros(0)
        self.refresh(snap)
        nodes = np.asarray(nodes, dtype=np.int64)
        cache = self._placements(snap)
        if self.head is not None:
            return self.head.logits(pod, snap, nodes, self.embeddings.node_cols, cache)
        cols = self.embeddings.node_cols[nodes]  # a fresh copy (fancy indexing): safe to update
        cols[:, AGE_COLUMNS] = age_columns(snap, nodes)
        x, _ = featurize(pod, snap, nodes, cache.workload, node_cols=cols, cache=cache)
        with torch.inference_mode():
            logit, _ = self.model.score(
                torch.from_numpy(x),
                self.embeddings.emb[torch.from_numpy(nodes)],
                torch.ones(len(nodes), dtype=torch.bool),
                torch.zeros(len(nodes), dtype=torch.long),
                1,
            )
        return logit.double().numpy()
