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
:data:`extremes`, :data:`lookup` and :data:`request_rows` (the head's request columns, the
same float64 expressions in C) are the C ones when built and ``DSAN_PURE_PYTHON`` is unset,
as is :data:`followed` (a settle's next candidates of a class and their stale rows: ~10
numpy calls, ~12 us of a settle at 100 nodes, in one pass over the nodes),
and so is :data:`head_logits` (the whole head on a set's changed candidates: request columns,
MLP, linear term and the stores in one call; 1 row ~3 us, 50 rows ~22), the one twin pair
that agrees to float32 rounding only: its MLP's sums run in another order than BLAS's
(:func:`few_head_py` is its numpy MLP). ``tests/unit/model/test_headscan.py`` pins the twins
to each other.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from types import ModuleType
from typing import Any, cast

import numpy as np
import numpy.typing as npt

from dsan.twins import compiled_twin

F32 = npt.NDArray[np.float32]
F64 = npt.NDArray[np.float64]
I64 = npt.NDArray[np.int64]
BOOL = npt.NDArray[np.bool_]


def stale_py(nodes: I64, at: I64, epoch: I64) -> I64:
    """The nodes whose class row was computed before their last change, in order."""
    return nodes[at[nodes] < epoch[nodes]]


def unique_rows(rows: I64) -> I64:
    """``np.unique(rows)`` of a 1-d int64 array: sorted, each value once. numpy 2.4's
    ``np.unique`` goes through its general machinery, ~10 us at 50 rows and ~80 us at 1,000
    on the development machine; a sort and a mask of each run's first value are ~6 and
    ~15 (a reply whose candidates' extremes or ages moved sends every row here)."""
    s = np.sort(rows)
    keep = np.empty(len(s), dtype=bool)
    keep[:1] = True
    np.not_equal(s[1:], s[:-1], out=keep[1:])
    return s[keep]


def follow_fits(last: I64, changed: I64, fits: BOOL, n: int) -> I64:
    """``last`` (candidate rows of n nodes) less the ``changed`` rows in it that no longer
    fit (``fits``, aligned with ``changed``; every occurrence dropped), plus the changed rows
    outside it that now fit, appended in the order of ``changed``: ``last`` itself (the
    same object) when that moves nothing."""
    if not changed.size:
        return last
    # membership through a mask over all nodes: O(n + m), no sort (np.isin sorts)
    member = np.zeros(n, dtype=bool)
    member[last] = True
    inside = member[changed]
    drop, add = changed[inside & ~fits], changed[~inside & fits]
    if not drop.size and not add.size:
        return last
    if drop.size:
        member[drop] = False
        last = last[member[last]]
    return np.concatenate([last, add]) if add.size else last


def followed_py(last: I64, epoch: I64, seen: int, ok: BOOL, at: I64) -> tuple[I64, I64 | None]:
    """``(nodes, rows)``: a pod class's next candidates after its last ones (``last``) given
    which nodes changed since the class synced (``epoch > seen``) and which fit the pod
    (``ok``, over all n nodes): :func:`follow_fits`; then the candidates whose class row
    is older than their change (``at < epoch``), sorted, each once, or None if none."""
    changed = np.flatnonzero(epoch > seen)
    nodes = follow_fits(last, changed, ok[changed], len(epoch))
    stale = stale_py(nodes, at, epoch)
    return nodes, (unique_rows(stale) if stale.size else None)


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
                    present: F32, dead: BOOL, nodes: I64) -> tuple[F32, BOOL]:
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
    return xr, np.array(out, dtype=np.bool_)


#: The few-row head's hidden layers with z: (att (n,), gq (n, 9), u1 (n, 2H), ud (n, 2H)), as
#: :class:`dsan.model.headmirror.HeadMirror` keeps them; None for a head whose MLP ignores z.
Z = tuple[F32, F32, F32, F32]


def few_head_py(xr: F32, dead: BOOL, nodes: I64, req_w: F32, pre: F32, w1g: F32, b1: F32,
                w2: F32, dead_out: float, z: Z | None) -> F32:
    """The head's MLP on ``nodes`` ((m,) float32, before the linear term and the last bias;
    :func:`head_logits_py`'s, ``mlp_row`` in dsan/_headrows.h), as
    :meth:`dsan.model.headmirror.HeadMirror.logits` computes it: with ``xr``
    (m, 9) the request columns and ``pre`` (n, 2H + 1) the class's first-layer rows,
    g = relu(xr req_w[:, :2H] + pre[:, :2H]); with z (``z``), the 2-way attention
    alpha_0 = sigmoid(-(att + xr . gq)) and relu(u1 + alpha_0 ud + g w1g) . w2, a dead row
    adding no g term; without z, relu(g w1g + b1) . w2, a dead row ``dead_out``."""
    h2 = len(b1)
    m = len(nodes)
    t_all = xr @ req_w  # (m, 2H + 1): the request columns' share of every output
    t_all += pre[nodes]
    g = t_all[:, :h2]
    np.maximum(g, 0.0, out=g)
    live = np.flatnonzero(~dead)
    if z is not None:
        att, gq, u1, ud = z
        d = att[nodes] + np.einsum("mr,mr->m", xr, gq[nodes])
        a0 = 1.0 / (1.0 + np.exp(np.clip(d, -80.0, 80.0)))
        hid = u1[nodes]
        hid += a0[:, None] * ud[nodes]
        if live.size == m:
            hid += g @ w1g
        elif live.size:
            hid[live] += g[live] @ w1g
        np.maximum(hid, 0.0, out=hid)
        with_z: F32 = hid @ w2
        return with_z
    hl = g @ w1g
    hl += b1
    np.maximum(hl, 0.0, out=hl)
    out = cast(F32, hl @ w2)  # float32 in, float32 out (the stubs say float64)
    if live.size < m:
        out[dead] = dead_out
    return out


def head_logits_py(nodes: I64, todo: I64, quant: F64, lo: F64, hi: F64, hib: BOOL,
                   ages: F64 | None, log1p_hour: float, tel: bool, present: F32, dead: BOOL,
                   req_w: F32,
                   pre: F32, w1g: F32, b1: F32, w2: F32, dead_out: float, b2: float,
                   c_at: I64, e_logit: F64, e_at: I64, e_age: F64, out: F64,
                   z: Z | None) -> None:
    """The whole head on the candidates ``nodes[todo]`` of a class, written where the head
    cache keeps it: :func:`request_rows_py` on the class's quantities ``quant`` (7, n) and
    the rows' telemetry ages (``ages``, n; None without telemetry: inf) transformed as
    :func:`dsan.features.age_columns` does (``log1p_hour``: its scale), :func:`few_head_py`,
    then the linear term
    ``pre[:, 2H] + xr . req_w[:, 2H]`` and the last bias ``b2`` in float32; each logit at its
    row of ``e_logit`` (float64) with the class row's tick ``c_at`` in ``e_at`` and its age
    in ``e_age``, and ``out[todo]`` read back from ``e_logit`` (a node listed twice reads
    what was kept)."""
    if not len(todo):
        return
    sub = nodes[todo]
    h2 = len(b1)
    age = np.full(len(sub), np.inf) if ages is None else ages[sub]
    tel_age = np.log1p(np.where(age == age, np.minimum(age, 1e9), 0.0)) / log1p_hour
    xr, is_dead = request_rows_py(quant.take(sub, axis=1), lo, hi, hib, tel_age, age, tel,
                                  present, dead, sub)
    logit = few_head_py(xr, is_dead, sub, req_w, pre, w1g, b1, w2, dead_out, z)
    dot = np.zeros(len(sub), dtype=np.float32)
    for i in range(9):  # the 9-term dot in C's order: i ascending, float32 adds
        dot += xr[:, i] * req_w[i, h2]
    logit += pre[sub, h2] + dot
    logit += np.float32(b2)
    e_logit[sub] = logit.astype(np.float64)
    e_at[sub] = c_at[sub]
    e_age[sub] = age
    out[todo] = e_logit[sub]


def _request_rows_c(q: F64, lo: F64, hi: F64, hib: BOOL, tel_age: F64, ages: F64, tel: bool,
                    present: F32, dead: BOOL, nodes: I64) -> tuple[F32, BOOL]:
    m = len(nodes)
    xr, out = np.empty((m, 9), dtype=np.float32), np.empty(m, dtype=np.bool_)
    try:
        _C.request_rows(q, lo, hi, hib, tel_age, ages, tel, present, dead, nodes, xr, out)
    except TypeError:
        return request_rows_py(q, lo, hi, hib, tel_age, ages, tel, present, dead, nodes)
    return xr, out


def _head_logits_c(nodes: I64, todo: I64, quant: F64, lo: F64, hi: F64, hib: BOOL,
                   ages: F64 | None, log1p_hour: float, tel: bool, present: F32, dead: BOOL,
                   req_w: F32,
                   pre: F32, w1g: F32, b1: F32, w2: F32, dead_out: float, b2: float,
                   c_at: I64, e_logit: F64, e_at: I64, e_age: F64, out: F64,
                   z: Z | None) -> None:
    zs = (None, None, None, None) if z is None else z
    try:
        _C.head_logits(nodes, todo, quant, lo, hi, hib, ages, log1p_hour, tel, present, dead,
                       req_w, pre, w1g, b1, w2, dead_out, b2, c_at, e_logit, e_at, e_age, out,
                       *zs)
    except TypeError:
        head_logits_py(nodes, todo, quant, lo, hi, hib, ages, log1p_hour, tel, present, dead,
                       req_w, pre, w1g, b1, w2, dead_out, b2, c_at, e_logit, e_at, e_age, out,
                       z)


def _stale_c(nodes: I64, at: I64, epoch: I64) -> I64:
    out = np.empty(len(nodes), dtype=np.int64)
    try:
        k = _C.stale(nodes, at, epoch, out)
    except TypeError:
        return stale_py(nodes, at, epoch)
    return out[:k]


def _followed_c(last: I64, epoch: I64, seen: int, ok: BOOL, at: I64
                ) -> tuple[I64, I64 | None]:
    n = len(epoch)
    nodes, rows = np.empty(len(last) + n, dtype=np.int64), np.empty(n, dtype=np.int64)
    try:
        count, k, moved = _C.followed(last, epoch, seen, ok, at, nodes, rows)
    except (TypeError, OverflowError):  # another layout, a negative row, a huge tick
        return followed_py(last, epoch, seen, ok, at)
    return (nodes[:count] if moved else last), (rows[:k] if k else None)


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
    """``dsan._headscan``, or None (:func:`dsan.twins.compiled_twin`)."""
    return compiled_twin("dsan._headscan")


_C: Any = _compiled()
compiled = _C is not None
#: The twins :class:`dsan.model.headcache.HeadCache` calls (``request_rows``: its
#: :class:`~dsan.model.headmirror.HeadMirror`).
stale: Callable[[I64, I64, I64], I64] = _stale_c if compiled else stale_py
followed: Callable[[I64, I64, int, BOOL, I64], tuple[I64, I64 | None]] = (
    _followed_c if compiled else followed_py)
extremes: Callable[[F64, I64], tuple[F64, F64]] = _extremes_c if compiled else extremes_py
lookup: Callable[[I64, I64, I64, F64, F64 | None, F64], tuple[I64, F64]] = (
    _lookup_c if compiled else lookup_py)
request_rows: Callable[..., tuple[F32, BOOL]] = (
    _request_rows_c if compiled else request_rows_py)
head_logits: Callable[..., None] = _head_logits_c if compiled else head_logits_py
