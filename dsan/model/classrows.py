"""The end of :meth:`dsan.model.rowcache.ClassRows.update`, each step with its C twin in
``dsan._classrows`` (dsan/_classrows.c): the first layer of a few rows (:func:`first_py`)
and the store of recomputed rows (:func:`store_py`).

**The first layer** (``x @ w_abs``) of up to :data:`FEW` rows is a float32 sum in one fixed
order. BLAS picks its kernel, and so its summation order and its fused multiply-adds, by
shape: a row computed alone (gemv) differs from the same row computed beside others (gemm)
in most of its entries, in the last bits. Every class row of up to :data:`FEW` rows (a
settle's, or a reply's few changed rows) is computed here instead, so its value depends only
on its features and the weights, never on which path or batch computed it, and the C twin
costs a few microseconds where numpy's matmul costs ~5-9 on a settle (most of it per-call
cost). Batches of more rows (a new class, new weights) keep BLAS. Both twins compute
``out[i, j]`` as ``x[i, 0] * w[0, j]``, then ``+ x[i, k] * w[k, j]`` for k = 1, 2, ... in
order, every product and every sum rounded to float32: numpy's float32 ``multiply`` and
``add.accumulate`` (whose running sum is sequential by definition) and C floats without
fused multiply-adds give the same bits (``tests/unit/model/test_classrows.py``; the sign of
a NaN aside, as in :mod:`dsan.rowkernel`).

**The store** writes the rows' pre-activations with their biases, whether each row's ReLU
layer is dead whatever the request columns, the quantities and the tick
(``tests/unit/model/test_rowcache_store.py``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import numpy.typing as npt

from dsan.rowfeatures import SMALL_ROWS
from dsan.twins import compiled_twin

F32 = npt.NDArray[np.float32]
F64 = npt.NDArray[np.float64]
I64 = npt.NDArray[np.int64]
BOOL = npt.NDArray[np.bool_]

#: Batches of up to this many rows take :data:`first`; more take BLAS (the few-row
#: featurizer's bound: the rows a settle or a reply's changed rows bring).
FEW = SMALL_ROWS


def first_py(x: F32, w: F32, c0: int, out: F32) -> None:
    """``out[:, c0:] = x @ w[:, c0:]`` for ``x`` (m, f), ``w`` (f, k), ``out`` (m, k), all
    float32, summed in the order above; ``out[:, :c0]`` is left as it is."""
    prod = np.multiply(x[:, :, None], w[None, :, c0:], dtype=np.float32)
    out[:, c0:] = np.add.accumulate(prod, axis=1, dtype=np.float32)[:, -1]


def _first_c(x: F32, w: F32, c0: int, out: F32) -> None:
    """``dsan._classrows.first``; on arrays of another dtype or layout the numpy twin."""
    try:
        _C.first(x, w, c0, out)
    except TypeError:
        first_py(x, w, c0, out)


def store_py(first: F32, h: int, rows: I64, bias: F32, req_top: F32, req_age: F32,
             ages: F64 | None, pre: F32, present: F32, dead: BOOL, quant: F64, q: F64,
             at: I64, tick: int) -> None:
    """Store recomputed ``rows`` of a class (the end of :meth:`~dsan.model.rowcache.
    ClassRows.update`): ``first``
    (m, H + 2H + 1) are their first-layer outputs without biases (query, then proj and the
    linear logit terms), ``q`` (m, 7) their quantities; ``ages`` the telemetry ages (None
    without telemetry). ``dsan._classrows.store`` is the C twin (same float32 operations:
    ~15 us of numpy calls on a settle's one or two rows, ~1 in C)."""
    p2 = first[:, h:]
    p2 += bias
    pre[rows] = p2
    # Largest pre-activation any request can give (relative and age columns lie in
    # [0, 1]; tel_present, a gate in trained models, as now); a small margin keeps float
    # rounding on the exact side.
    top = p2[:, : len(req_top)] + req_top
    # age_columns' tel_present without its tel_age (a log per row): absent telemetry or
    # an unknown age reads 0, as there (and adds nothing to the bound).
    if ages is None:
        present[rows] = 0.0
    else:
        now = np.isfinite(ages[rows])
        present[rows] = now
        top += now[:, None] * req_age
    dead[rows] = top.max(axis=1) <= -1e-5
    quant[:, rows] = q.T
    at[rows] = tick


def _store_c(first: F32, h: int, rows: I64, bias: F32, req_top: F32, req_age: F32,
             ages: F64 | None, pre: F32, present: F32, dead: BOOL, quant: F64, q: F64,
             at: I64, tick: int) -> None:
    try:
        _C.store(first, h, rows, bias, req_top, req_age, ages, pre, present, dead, quant, q,
                 at, tick)
    except TypeError:  # arrays of another layout or dtype: the numpy twin
        store_py(first, h, rows, bias, req_top, req_age, ages, pre, present, dead, quant, q,
                 at, tick)


def _compiled() -> Any:
    """``dsan._classrows``, or None (:func:`dsan.twins.compiled_twin`)."""
    return compiled_twin("dsan._classrows")


_C = _compiled()
#: The twins :meth:`~dsan.model.rowcache.ClassRows.update` calls.
first: Callable[[F32, F32, int, F32], None] = _first_c if _C is not None else first_py
store = _store_c if _C is not None else store_py
