"""The scoring engine's answers from what is cached per pod class: raw scores (FGD,
k8s-default) or a model's held logits (DSAN, :func:`score_held`).

:class:`~sidecar.scoring.ScoringEngine` tries :func:`score_class` first for a scorer with a
``cache_key`` (a :class:`~sidecar.scorecache.ScoreCache` entry of raw scores over every node,
NaN where infeasible, plus a sentinel row for unknown names: no masks at all), and
:func:`score_cached` from its general path once the names are resolved (the class's vectors
instead of the scorer). Both give the engine's uncached answer exactly
(tests/unit/sidecar/test_scorecache.py, test_scoring.py).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Hashable, Sequence

import numpy as np
import numpy.typing as npt

from dsan.policies.base import normalize
from dsan.policies.rowscale import scale_rows
from dsan.snapshot import ClusterSnapshot, PodSpec
from sidecar.candidates import NodeRows, NoKnownNodes, name_rows, unknown_message
from sidecar.published import Published
from sidecar.scorecache import ScoreCache
from sidecar.scoreresult import ScoreResult

__all__ = ["HeldScorer", "score_cached", "score_class", "score_held"]

#: A scorer's reply from what it holds for a pod's class (``DSANScorer.score_held``):
#: (pod, snapshot, candidate rows with -1 for unknown names, feasibility of every node,
#: max_score) -> (scores, position of the first feasible maximum, feasible count), or None.
HeldScorer = Callable[[PodSpec, ClusterSnapshot, npt.NDArray[np.int64], npt.NDArray[np.bool_],
                       int], tuple[npt.NDArray[np.int64], int, int] | None]


def score_class(classes: ScoreCache, pod: PodSpec, key: Hashable, pub: Published,
                names: Sequence[str] | NodeRows, given: npt.NDArray[np.int64] | None,
                max_score: int, strict: bool, t0: float) -> ScoreResult | None:
    """The class cache's answer with no masks (the hot path of FGD and k8s-default);
    None when the class holds non-finite scores of feasible nodes (general path).

    Unknown names map to the entry's sentinel row, whose raw score is NaN like an
    infeasible node's; the gather, the scaling (:func:`normalize`'s over the non-NaN
    scores, element for element; NaN scores 0) and the first maximum are one pass
    (:func:`dsan.policies.rowscale.scale_rows`). Infeasible nodes score 0 and the best
    feasible one ``max_score`` >= 1, so the winner is the first feasible maximum, as in
    the general path.
    """
    m = len(names)
    e = classes.entry(pod, key, pub)
    if e.bad:
        return None
    if given is not None:
        rows = given  # rows of this snapshot's table: all known
    else:
        assert not isinstance(names, NodeRows)
        rows = name_rows(pub.index, names, len(e.ok))[0]
    t1 = time.perf_counter()
    out, best, n_nan, n_unknown = scale_rows(e.rawx, rows, max_score)
    if n_unknown == m or (strict and n_unknown):
        assert not isinstance(names, NodeRows)
        raise NoKnownNodes(unknown_message(names, rows != len(e.ok)))
    t2 = time.perf_counter()
    return ScoreResult(
        scores=out, best=best, unknown=n_unknown, infeasible=n_nan - n_unknown,
        fallback=0, version=pub.version, table_epoch=pub.table_epoch, featurize_s=t1 - t0,
        model_s=t2 - t1, total_s=t2 - t0, rows=rows,
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
        model_s=t2 - t1, total_s=t3 - t0, rows=rows,
    )


def score_held(held: HeldScorer, pod: PodSpec, names: Sequence[str] | NodeRows,
               given: npt.NDArray[np.int64] | None, ok: npt.NDArray[np.bool_], max_score: int,
               pub: Published, t0: float) -> ScoreResult | None:
    """The scorer's reply from the logits it holds for ``pod``'s class
    (:mod:`dsan.model.heldreply`), ``ok`` the feasibility of every node; None whenever the
    scorer says the general path must answer (which then gives the same scores) or raises
    (the general path asks again, and degrades if need be)."""
    m = len(names)
    if given is not None:
        rows = given
    else:
        assert not isinstance(names, NodeRows)
        rows = name_rows(pub.index, names)[0]  # -1 for an unknown name: held says None
    t1 = time.perf_counter()
    try:
        got = held(pod, pub.snap, rows, ok, max_score)
    except Exception:
        return None
    if got is None:
        return None
    out, best, n_ok = got
    t2 = time.perf_counter()
    return ScoreResult(
        scores=out, best=best, unknown=0, infeasible=m - n_ok, fallback=0, version=pub.version,
        table_epoch=pub.table_epoch, featurize_s=t1 - t0, model_s=t2 - t1, total_s=t2 - t0,
        rows=rows,
    )
