"""The scoring engine's answers from the per-pod-class score cache (FGD, k8s-default).

:class:`~sidecar.scoring.ScoringEngine` tries :func:`score_class` first for a scorer with a
``cache_key`` (a :class:`~sidecar.scorecache.ScoreCache` entry of raw scores over every node,
NaN where infeasible, plus a sentinel row for unknown names: no masks at all), and
:func:`score_cached` from its general path once the names are resolved (the class's vectors
instead of the scorer). Both give the engine's uncached answer exactly
(tests/unit/sidecar/test_scorecache.py, test_scoring.py).
"""

from __future__ import annotations

import time
from collections.abc import Hashable, Sequence
from itertools import repeat

import numpy as np
import numpy.typing as npt

from dsan.policies.base import normalize
from dsan.snapshot import PodSpec
from sidecar.candidates import NodeRows, NoKnownNodes, unknown_message
from sidecar.published import Published
from sidecar.scorecache import ScoreCache
from sidecar.scoreresult import ScoreResult

__all__ = ["score_cached", "score_class"]


def score_class(classes: ScoreCache, pod: PodSpec, key: Hashable, pub: Published,
                names: Sequence[str] | NodeRows, given: npt.NDArray[np.int64] | None,
                max_score: int, strict: bool, t0: float) -> ScoreResult | None:
    """The class cache's answer with no masks (the hot path of FGD and k8s-default);
    None when the class holds non-finite scores of feasible nodes (general path).

    Unknown names map to the entry's sentinel row, whose raw score is NaN like an
    infeasible node's; min/max skip NaN (``fmin``/``fmax``) and ``fmax(x, 0)`` turns
    NaN into score 0. The scaling is :func:`normalize`'s, element for element, and the
    winner is the first maximum: infeasible nodes score 0 and the best feasible one
    ``max_score`` >= 1, so it is the first feasible maximum, as in the general path.
    """
    m = len(names)
    e = classes.entry(pod, key, pub)
    if e.bad:
        return None
    sentinel = len(e.ok)
    if given is not None:
        rows = given  # rows of this snapshot's table: all known
    else:
        assert not isinstance(names, NodeRows)
        rows = np.fromiter(map(pub.index.get, names, repeat(sentinel)), dtype=np.int64,
                           count=m)
    t1 = time.perf_counter()
    r = e.rawx[rows]
    n_nan = int(np.count_nonzero(np.isnan(r)))  # infeasible or unknown
    n_unknown = 0
    if n_nan and rows.max() == sentinel:  # one reduction when every name is known
        n_unknown = int(np.count_nonzero(rows == sentinel))
        if n_unknown == m or (strict and n_unknown):
            assert not isinstance(names, NodeRows)
            raise NoKnownNodes(unknown_message(names, rows != sentinel))
    t2 = time.perf_counter()
    best = -1
    if n_nan == m:
        out = np.zeros(m, dtype=np.int64)
    else:
        lo, hi = np.fmin.reduce(r), np.fmax.reduce(r)
        span = hi - lo
        if 0 < span < np.inf:
            f = r - lo
            f *= max_score / span
            np.rint(f, out=f)
            if n_nan:
                np.fmax(f, 0.0, out=f)
            best = int(np.argmax(f))  # float argmax: same first maximum, cheaper
            out = f.astype(np.int64)
        else:  # all equal, or a span past float64: normalize's own cases
            fit = ~np.isnan(r)
            out = np.zeros(m, dtype=np.int64)
            out[fit] = normalize(r[fit], max_score)
            best = int(np.argmax(out))
    return ScoreResult(
        scores=out, best=best, unknown=n_unknown, infeasible=n_nan - n_unknown,
        fallback=0, version=pub.version, table_epoch=pub.table_epoch, featurize_s=t1 - t0,
        model_s=t2 - t1,
        total_s=time.perf_counter() - t0,
    )


def score_cached(classes: ScoreCache, pod: PodSpec, key: Hashable, pub: Published,
                 rows: npt.NDArray[np.int64], known: npt.NDArray[np.bool_], n_unknown: int,
                 max_score: int, t0: float) -> ScoreResult:
    """The same result as the uncached path, from the class's cached vectors."""
    t1 = time.perf_counter()
    raw_all, ok_all = classes.lookup(pod, key, pub)  # "model": changed rows only
    m = len(rows)
    ok = ok_all[np.where(known, rows, 0)] & known if n_unknown else ok_all[rows]
    n_ok = int(np.count_nonzero(ok))
    t2 = time.perf_counter()
    if n_ok == m:
        out = normalize(raw_all[rows], max_score)
        best = int(np.argmax(out))
    else:
        out = np.zeros(m, dtype=np.int64)
        best = -1
        if n_ok:
            out[ok] = normalize(raw_all[rows[ok]], max_score)
            best = int(np.argmax(np.where(ok, out, -1)))
    t3 = time.perf_counter()
    return ScoreResult(
        scores=out, best=best, unknown=n_unknown, infeasible=m - n_unknown - n_ok,
        fallback=0, version=pub.version, table_epoch=pub.table_epoch, featurize_s=t1 - t0,
        model_s=t2 - t1,
        total_s=t3 - t0,
    )
