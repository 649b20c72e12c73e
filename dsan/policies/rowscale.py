"""A pod class's cached raw scores to a reply: gathered at the candidates' rows, min-max
scaled onto 0..max_score, and the winner, in one pass.

The sidecar keeps, per pod class of a row-separable scorer (FGD, k8s-default), every node's
raw score with NaN where the node is infeasible and one more NaN entry, the sentinel row,
that unknown names map to (:mod:`sidecar.scorecache`). A reply is then: gather, count the
NaN, scale the others as :func:`dsan.policies.base.normalize` does, NaN to 0, first maximum:
a dozen numpy calls of 0.4-1.5 us each whatever their size (~9 us of a ~20 us reply at 100
nodes). Two twins, as in :mod:`dsan.policies.logitscale`: :func:`scale_rows_py` (the
reference, numpy) and ``dsan._rowscale`` (C, one loop for the extremes and one for the
scores, built by ``pip install -e .`` when a compiler is there), which does the same float64
operations in the same order, so both give the same integers; it defers to the reference on
an infinite score, a span past float64 or one so small that ``max_score / span`` overflows
(``normalize``'s answer is then whatever its casts give), and on arrays of another dtype or
layout.
:data:`scale_rows` is the C one when built and ``DSAN_PURE_PYTHON`` is unset;
``tests/unit/policies/test_rowscale.py`` pins the twins to each other and to ``normalize``.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt

from dsan.policies.base import TINY_SPAN, normalize
from dsan.twins import compiled_twin

__all__ = ["compiled", "scale_rows", "scale_rows_py"]

#: (scores, best, n_nan, n_unknown): see :func:`scale_rows_py`.
Scaled = tuple[npt.NDArray[np.int64], int, int, int]


def scale_rows_py(rawx: npt.NDArray[np.float64], rows: npt.NDArray[np.int64],
                  max_score: int) -> Scaled:
    """``rawx`` (NaN where infeasible; its last entry, the sentinel, unknown names map to)
    at ``rows``: the scores (:func:`normalize` over the non-NaN ones, 0 for NaN), the
    position of their first maximum (-1 when all are NaN), how many are NaN and how many
    rows are the sentinel. ``max_score`` >= 1 (the sidecar's replies: 10 or 100)."""
    m = len(rows)
    sentinel = len(rawx) - 1
    r = rawx[rows]
    n_nan = int(np.count_nonzero(np.isnan(r)))  # infeasible or unknown
    n_unknown = 0
    if n_nan and rows.max() == sentinel:  # one reduction when every name is known
        n_unknown = int(np.count_nonzero(rows == sentinel))
    if n_nan == m:
        return np.zeros(m, dtype=np.int64), -1, n_nan, n_unknown
    lo, hi = np.fmin.reduce(r), np.fmax.reduce(r)
    span = hi - lo
    if np.inf > span > max_score * TINY_SPAN:
        f = r - lo
        f *= max_score / span
        np.rint(f, out=f)
        if n_nan:
            np.fmax(f, 0.0, out=f)  # NaN scores 0
        best = int(np.argmax(f))  # float argmax: same first maximum, cheaper
        return f.astype(np.int64), best, n_nan, n_unknown
    # all equal, an infinite score, a span past float64 or a subnormal one: normalize's
    fit = ~np.isnan(r)
    out = np.zeros(m, dtype=np.int64)
    out[fit] = normalize(r[fit], max_score)
    return out, int(np.argmax(out)), n_nan, n_unknown


def _scale_rows_c(rawx: npt.NDArray[np.float64], rows: npt.NDArray[np.int64],
                  max_score: int) -> Scaled:
    out = np.empty(len(rows), dtype=np.int64)
    try:
        got = _C.scale_rows(rawx, rows, max_score, out)
    except TypeError:  # not C-contiguous 1-d arrays of these dtypes: numpy
        return scale_rows_py(rawx, rows, max_score)
    if got is None:  # an infinite score, a span past float64 or a tiny one: numpy decides
        return scale_rows_py(rawx, rows, max_score)
    best, n_nan, n_unknown = got
    return out, best, n_nan, n_unknown


def _compiled() -> Any:
    """``dsan._rowscale``, or None (:func:`dsan.twins.compiled_twin`)."""
    return compiled_twin("dsan._rowscale")


_C = _compiled()
compiled = _C is not None
#: The twin the sidecar's class path calls (:func:`sidecar.classpaths.score_class`).
scale_rows = _scale_rows_c if compiled else scale_rows_py
