"""Per-pod-class score cache: every node's raw score and feasibility, kept current row by row.

Pods of one *class* (the same values of everything the served scorer and the feasibility
check read: :meth:`ScoreCache.key`) get the same raw score on a node as long as that node's
row did not change. So per class the cache keeps a raw-score vector and a feasibility mask
over *all* nodes, plus the position in the :class:`~sidecar.cache.GraphCache`'s row-change
log they reflect; a request recomputes only the rows written since (usually the one node the
previous pod was assumed onto) and gathers. The hot path is then lookup, gather, normalise.

Only scorers that say so are cached: a ``cache_key(pod)`` method returning a hashable key, or
None for a pod it cannot cache, and a score that reads only the scored node's own row (FGD
and k8s-default). Scorers whose score depends on the candidate set (DSAN's min-max feature
columns) or on telemetry ages have no ``cache_key`` and are scored in full on every request.
The result is exactly the uncached scorer's (tests/unit/sidecar/test_scorecache.py).

Those fully scored policies still get their feasibility check from the same log:
:class:`FeasibleCache` keeps every node's feasibility per class of the pod fields it reads.
"""

from __future__ import annotations

import math
from collections.abc import Hashable
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from dsan.filtering import feasible, feasible_rows
from dsan.policies.base import Scorer
from dsan.snapshot import ClusterSnapshot, PodSpec
from sidecar.cache import GraphCache
from sidecar.published import Published

#: Classes kept at once; the least recently created is dropped beyond it (a few MB at most).
MAX_CLASSES = 64
#: Rows written since a mask's last check that are rechecked one by one (an assumption and
#: the one it replaced write two); more go through the vectorised check.
_FEW_ROWS = 8


@dataclass(slots=True)
class Entry:
    """One class's vectors over the nodes of one node set."""

    index: Any  # the Published.index (node set) the vectors are laid out by
    changes: int  # change-log position they reflect
    #: Raw score per node plus one sentinel row (index n, always NaN) that unknown names
    #: map to; NaN where infeasible.
    rawx: npt.NDArray[np.float64]
    ok: npt.NDArray[np.bool_]  # feasibility per node
    #: Feasible nodes whose raw score is not finite (a scorer's bug): while any exist,
    #: NaN in ``rawx`` does not mean "infeasible or unknown" and the engine takes its
    #: general path.
    bad: int

    @property
    def raw(self) -> npt.NDArray[np.float64]:
        return self.rawx[:-1]


class ScoreCache:
    """Raw scores and feasibility per pod class for one row-separable scorer."""

    def __init__(self, cache: GraphCache, scorer: Scorer, max_classes: int = MAX_CLASSES) -> None:
        self.cache = cache
        self.scorer = scorer
        self._key_of = getattr(scorer, "cache_key", None)
        # A scorer may offer a stateless row scorer (FGD: no O(n) diff of its own cache).
        self._score = getattr(scorer, "score_rows", scorer.score)
        self._max = max_classes
        self._entries: dict[Hashable, Entry] = {}
        #: Rows recomputed and full rebuilds (observability and tests).
        self.rows_recomputed = 0
        self.rebuilds = 0

    @property
    def enabled(self) -> bool:
        return self._key_of is not None

    def key(self, pod: PodSpec) -> Hashable | None:
        """The scorer's key plus every pod field :func:`dsan.filtering.feasible` reads."""
        if self._key_of is None:
            return None
        k = self._key_of(pod)
        if k is None:
            return None
        return (k, pod.cpu_milli, pod.mem_mib, pod.num_gpu, pod.gpu_milli, pod.gpu_models,
                pod.toleration_mask)

    def lookup(
        self, pod: PodSpec, key: Hashable, pub: Published
    ) -> tuple[npt.NDArray[np.float64], npt.NDArray[np.bool_]]:
        """(raw, ok) over all nodes of ``pub`` for ``pod``'s class; read-only views.

        Call with the cache's scoring lock held (``pub`` is refreshed in place otherwise).
        A scorer exception propagates and the class is dropped, never left half updated.
        """
        e = self.entry(pod, key, pub)
        return e.raw, e.ok

    def entry(self, pod: PodSpec, key: Hashable, pub: Published) -> Entry:
        """:meth:`lookup`'s class entry itself (with the sentinel row)."""
        e = self._entries.get(key)
        if e is not None and e.index is pub.index and len(e.ok) == len(pub.snap):
            if e.changes != pub.changes:
                rows = self.cache.changed_rows(e.changes, pub.changes)
                if rows is None:
                    e = None  # the log was trimmed past this class: rebuild
                elif rows:
                    try:
                        self._update(pod, pub, e, rows)
                    except Exception:
                        del self._entries[key]
                        raise
                    self.rows_recomputed += len(rows)
                if e is not None:
                    e.changes = pub.changes
        else:
            e = None
        if e is None:
            e = self._build(pod, pub)
            self._entries.pop(key, None)
            if len(self._entries) >= self._max:
                del self._entries[next(iter(self._entries))]
            self._entries[key] = e
        return e

    def _build(self, pod: PodSpec, pub: Published) -> Entry:
        snap = pub.snap
        ok = feasible(pod, snap)
        rawx = np.full(len(snap) + 1, np.nan)
        fit = np.flatnonzero(ok)
        if fit.size:
            rawx[fit] = self._score(pod, snap, fit)
        self.rebuilds += 1
        return Entry(pub.index, pub.changes, rawx, ok, _nonfinite(rawx[fit]))

    def _update(self, pod: PodSpec, pub: Published, e: Entry, rows: list[int]) -> None:
        snap = pub.snap
        idx = np.array(sorted(set(rows)), dtype=np.int64)  # a few rows: no np.unique
        ok = feasible(pod, snap, idx)
        fit = idx[ok]
        new = self._score(pod, snap, fit) if fit.size else fit.astype(np.float64)
        # Written only once the scorer returned: an exception leaves the entry as it was.
        e.bad += _nonfinite(new) - _nonfinite(e.rawx[idx[e.ok[idx]]])
        e.ok[idx] = ok
        e.rawx[idx] = np.nan
        e.rawx[fit] = new

    def clear(self) -> None:
        self._entries.clear()


@dataclass(slots=True)
class _Mask:
    index: Any  # the Published.index the mask is laid out by
    changes: int  # change-log position it reflects
    ok: npt.NDArray[np.bool_]


class FeasibleCache:
    """Per feasibility class (every pod field :func:`dsan.filtering.feasible` reads), the
    feasibility of every node, kept current from the row-change log like a
    :class:`ScoreCache` entry: for a policy scored in full on every request (DSAN), the
    request's O(n) feasibility check becomes the check of the rows written since (usually
    the previous winner) and a gather. Exactly :func:`feasible`'s mask
    (tests/unit/sidecar/test_scorecache.py)."""

    def __init__(self, cache: GraphCache, max_classes: int = MAX_CLASSES) -> None:
        self.cache = cache
        self._max = max_classes
        self._masks: dict[Hashable, _Mask] = {}

    def mask(self, pod: PodSpec, pub: Published) -> npt.NDArray[np.bool_]:
        """Feasibility of every node of ``pub`` for ``pod`` (read-only; call with the
        scoring lock held)."""
        key = (pod.cpu_milli, pod.mem_mib, pod.num_gpu, pod.gpu_milli, pod.gpu_models,
               pod.toleration_mask)
        snap = pub.snap
        e = self._masks.get(key)
        if e is not None and e.index is pub.index and len(e.ok) == len(snap):
            if e.changes != pub.changes:
                rows = self.cache.changed_rows(e.changes, pub.changes)
                if rows is None:  # the log was trimmed past this mask: rebuild
                    e = None
                else:
                    if rows:
                        self._recheck(pod, snap, e.ok, sorted(set(rows)))
                    e.changes = pub.changes
        else:
            e = None
        if e is None:
            self._masks.pop(key, None)
            if len(self._masks) >= self._max:
                del self._masks[next(iter(self._masks))]
            e = self._masks[key] = _Mask(pub.index, pub.changes, feasible(pod, snap))
        return e.ok

    @staticmethod
    def _recheck(pod: PodSpec, snap: ClusterSnapshot, ok: npt.NDArray[np.bool_],
                 rows: list[int]) -> None:
        """``ok[rows] = feasible(pod, snap, rows)``; a few rows (an assumption's) as scalar
        writes of :func:`feasible_rows`, without index and result arrays."""
        if len(rows) <= _FEW_ROWS:
            for r, v in zip(rows, feasible_rows(pod, snap, rows), strict=True):
                ok[r] = v
        else:
            idx = np.array(rows, dtype=np.int64)
            ok[idx] = feasible(pod, snap, idx)

    def clear(self) -> None:
        self._masks.clear()


def _nonfinite(a: npt.NDArray[np.float64]) -> int:
    if a.size <= 8:  # the usual one or two rows: Python floats, no numpy calls
        return sum(not math.isfinite(x) for x in a.tolist())
    return int(a.size - np.count_nonzero(np.isfinite(a)))
