"""The head cache's passes over a request's m candidates (:mod:`dsan.model.headcache`):
which rows are stale, the candidates' per-quantity extremes, and which logits must be
(re)computed under them, with the rest gathered.

Two twins each: the numpy functions here (``*_py``, the reference) and ``dsan._headscan``
(C, built by ``pip install -e .`` when a compiler is there): in numpy these passes are ~15
calls of gathers, compares and reductions (~30 us of a reply at 1,000 nodes, ~90 us at
5,000), in C three loops (the extremes only up to :data:`C_EXTREMES_MAX` candidates: numpy's
vectorised reductions win above). Gathers, comparisons, minima and maxima have one answer in any
order, so both give the same bits; where numpy's choice could show (a NaN among the values,
or a zero extreme: which signed zero), the C extremes defer to numpy. A C call that is
handed arrays of another layout or dtype also defers to numpy. :data:`stale`,
:data:`extremes`, :data:`lookup` and :data:`request_rows` (the few-row head's request
columns, the same float64 expressions in C) are the C ones when built and
``DSAN_PURE_PYTHON`` is unset. ``tests/unit/model/test_headscan.py`` pins the twins to each other.
"""

from __future__ import annotations

import importlib
import math
import os
from collections.abc import Callable
from types import ModuleType
from typing import Any

import numpy as np
import numpy.typing as npt

F32 = npt.NDArray[np.float32]
F64 = npt.NDArray[np.float64]
I64 = npt.NDArray[np.int64]
BOOL = npt.NDArray[np.bool_]


def stale_py(nodes: I64, at: I64, epoch: I64) -> I64:
    """The nodes whose class row was computed before their last change, in order."""
    return nodes[at[nodes] < epoch[nodes]]


def extremes_py(quant: F64, nodes: I64) -> tuple[F64, F64]:
    """``(lo, hi)``: the minimum of the first 5 quantities (5, 1) and the maximum of all 7
    (7, 1) over ``nodes`` of ``quant`` (7, n)."""
    q = quant.take(nodes, axis=1)  # (7, m), C order: fast row reductions
    return q[:5].min(axis=1, keepdims=True), q.max(axis=1, keepdims=True)


def lookup_py(nodes: I64, at: I64, e_at: I64, e_age: F64, ages: F64 | None,
              e_logit: F64) -> tuple[I64, F64]:
    """``(todo, logits)``: the positions in ``nodes`` whose held logit was computed from
    another class row (``e_at`` vs ``at``) or telemetry age (``e_age`` vs ``ages``, inf
    without telemetry; NaN never equals), and the held logits of ``nodes`` (a new array)."""
    age = np.full(len(nodes), np.inf) if ages is None else ages[nodes]
    todo = np.flatnonzero((e_at[nodes] != at[nodes]) | (e_age[nodes] != age))
    return todo, e_logit[nodes]


def request_rows_py(q: F64, lo: F64, hi: F64, hib: BOOL, tel_age: F64, ages: F64, tel: bool,
                    present: F32, dead: BOOL, nodes: I64) -> tuple[F32, list[bool]]:
    """The few-row head's 9 request columns of ``nodes`` ((m, 9) float32) and which of them
    are dead, as :meth:`dsan.model.headmirror.HeadMirror.logits` decides both: the min-max
    ranks of quantities ``q`` (7, m) within ``lo`` / ``hi`` (``hib``: higher is better), the
    two "ties with the best" flags, the telemetry age column ``tel_age`` (m,) clipped at 1
    and presence (finite ``ages``, with telemetry); a row is dead when it was cached dead
    (``dead``, n), every request column lies in [0, 1] and its presence is the cached one
    (``present``, n). The same float64 expressions on Python floats as ``_minmax_rows``."""
    lo_, hi_, hib_ = lo.ravel().tolist(), hi.ravel().tolist(), hib.tolist()
    qs, ta, ag = q.tolist(), tel_age.tolist(), ages.tolist()
    rows: list[list[float]] = []
    for k in range(len(nodes)):
        row = [1.0] * 5
        for j in range(5):
            lj, hj = lo_[j], hi_[j]
            if hj > lj:
                row[j] = ((qs[j][k] - lj) if hib_[j] else (hj - qs[j][k])) / (hj - lj)
        t = ta[k]
        rows.append([row[0], row[1], row[2], row[3], float(qs[5][k] >= hi_[5]),
                     float(qs[6][k] >= hi_[6] - 1e-9), row[4], t if not t > 1.0 else 1.0,
                     float(tel and math.isfinite(ag[k]))])
    xr = np.array(rows, dtype=np.float32).reshape(len(nodes), 9)
    out = [False] * len(nodes)
    if xr.min(initial=0.0) >= 0.0 and xr.max(initial=1.0) <= 1.0:
        was = present[nodes].tolist()
        out = [d and float(xr[k, -1]) == was[k] for k, d in enumerate(dead[nodes].tolist())]
    return xr, out


def _request_rows_c(q: F64, lo: F64, hi: F64, hib: BOOL, tel_age: F64, ages: F64, tel: bool,
                    present: F32, dead: BOOL, nodes: I64) -> tuple[F32, list[bool]]:
    m = len(nodes)
    xr, out = np.empty((m, 9), dtype=np.float32), np.empty(m, dtype=np.bool_)
    try:
        _C.request_rows(q, lo, hi, hib, tel_age, ages, tel, present, dead, nodes, xr, out)
    except TypeError:
        return request_rows_py(q, lo, hi, hib, tel_age, ages, tel, present, dead, nodes)
    return xr, out.tolist()


def _stale_c(nodes: I64, at: I64, epoch: I64) -> I64:
    out = np.empty(len(nodes), dtype=np.int64)
    try:
        k = _C.stale(nodes, at, epoch, out)
    except TypeError:
        return stale_py(nodes, at, epoch)
    return out[:k]


#: Above this many candidates numpy's extremes are as fast or faster (its take and SIMD
#: reductions against the C twin's scalar loops; min of 15 timings, 1,000 nodes: 8.6 vs
#: 9.0 us, 5,000: 29 vs 42; 100: 3.9 vs 1.5, 500: 6.2 vs 4.8).
C_EXTREMES_MAX = 512


def _extremes_c(quant: F64, nodes: I64) -> tuple[F64, F64]:
    if len(nodes) > C_EXTREMES_MAX:
        return extremes_py(quant, nodes)
    lo, hi = np.empty((5, 1)), np.empty((7, 1))
    try:
        if _C.extremes(quant, nodes, lo, hi):
            return lo, hi
    except TypeError:
        pass
    return extremes_py(quant, nodes)


def _lookup_c(nodes: I64, at: I64, e_at: I64, e_age: F64, ages: F64 | None,
              e_logit: F64) -> tuple[I64, F64]:
    m = len(nodes)
    out, todo = np.empty(m), np.empty(m, dtype=np.int64)
    try:
        k = _C.lookup(nodes, at, e_at, e_age, ages, e_logit, out, todo)
    except TypeError:
        return lookup_py(nodes, at, e_at, e_age, ages, e_logit)
    return todo[:k], out


def _compiled() -> ModuleType | None:
    """``dsan._headscan``, or None when it was not built (no compiler at install time) or
    ``DSAN_PURE_PYTHON`` is set."""
    if os.environ.get("DSAN_PURE_PYTHON"):
        return None
    try:
        return importlib.import_module("dsan._headscan")
    except ImportError:
        return None


_C: Any = _compiled()
compiled = _C is not None
#: The twins :class:`dsan.model.headcache.HeadCache` calls (``request_rows``: its
#: :class:`~dsan.model.headmirror.HeadMirror`).
stale: Callable[[I64, I64, I64], I64] = _stale_c if compiled else stale_py
extremes: Callable[[F64, I64], tuple[F64, F64]] = _extremes_c if compiled else extremes_py
lookup: Callable[[I64, I64, I64, F64, F64 | None, F64], tuple[I64, F64]] = (
    _lookup_c if compiled else lookup_py)
request_rows: Callable[..., tuple[F32, list[bool]]] = (
    _request_rows_c if compiled else request_rows_py)
