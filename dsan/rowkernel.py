"""The per-row tail of the few-row featurizer (:func:`dsan.rowfeatures.featurize_rows`): the
pod, node-versus-pod and shape columns of one node's row, and its 7 float64 quantities.

Two twins with one signature: :func:`fill_py` (Python floats, the reference) and
``dsan._rowkernel.fill`` (C, built by ``pip install -e .`` when a compiler is there: a
settle's one or two rows cost ~25 us each in the interpreter, well under one in C). Both
evaluate the same IEEE double expressions in the same order, so they write the same bits;
:data:`fill` is the C one when it was built and ``DSAN_PURE_PYTHON`` is unset, else the
Python one. ``tests/unit/test_rowkernel.py`` pins both to :func:`dsan.features.featurize`.
(The sign of a NaN is not pinned: where two NaNs meet in a + or a *, which one the result
carries is the compiler's choice of operand order; no snapshot holds a NaN amount.)

:func:`fill_rows_py` and its C twin ``dsan._rowkernel.fill_rows`` are what the featurizer
calls: the whole rows, the node's values read from the snapshot's arrays (in C without a
Python object per value, ~10 ``.item()`` reads per row otherwise), then :func:`fill_py`'s
tail; the C one shares the row writer of ``fill``. ``tests/unit/test_rowkernel_rows.py``
pins the two to each other, ``tests/unit/test_rowkernel.py`` each to ``featurize``.

``items`` holds, per row, what the tail reads of the node and its what-if placement, in this
order: GPU count, CPU and memory capacity, CPU and memory used, the free GPU milli-slots
(list of ints), the pod count (None without that column), the hourly price (1.0 without),
the image-present and GPU-model-allowed columns, fragmentation before and after, the chosen
slot, the free slots after (list of ints), FGD's score (numpy's ``exp``, computed by the
caller: libm's may differ in the last bit) and the workload shapes' GPU-model access (bools).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

from dsan.snapshot import MAX_GPUS
from dsan.twins import compiled_twin

F32 = npt.NDArray[np.float32]
F64 = npt.NDArray[np.float64]

#: The workload's shape divisors (:func:`dsan.rowfeatures._shape_divisors`): CPU (float),
#: the distinct GPU shares (ints), each shape's index into them, GPU count (int), CPU-only.
Divisors = tuple[list[float], list[int], list[int], list[int], list[bool]]
#: The snapshot's columns a row reads: GPU count, CPU and memory capacity, CPU and memory
#: used, free GPU shares (n, 8), pod count and hourly price (each None when absent). The C
#: twin takes int32 counts and shares and float64 amounts, and defers on anything else.
Columns = tuple[Any, Any, Any, Any, Any, Any, Any, Any]
_SIX_ZEROS = (0.0,) * 6


def fill_py(x: F32, q: F64, pv: list[float], nt: int, scales: tuple[float, float, float],
            divs: Divisors, n_shapes: int, start: int, items: Sequence[tuple[Any, ...]]) -> None:
    """Write row ``r``'s tail into ``x[r, start:]`` (zeros after the shape columns) and its
    quantities into ``q[r]`` for each ``items[r]``. ``pv``: the pod's values
    (:func:`dsan.features.pod_values` as floats, ``nt`` task types first), then the
    decision's :func:`dsan.clusterwide.room_factor` and
    :func:`~dsan.clusterwide.cpu_bound_factor`."""
    cpu_scale, mem_scale, gpu_scale = scales
    head = [*pv[: nt + 13], 0.0, 0.0, 0.0, 0.0, 0.0, *pv[nt + 13 : nt + 15]]
    rc, rm, rg, k, gm_used, gm_min, sharing, room, cpu_bound = pv[nt + 15 :]
    rq0, rq1, rq2 = rc / cpu_scale, rm / mem_scale, rg / gpu_scale
    pad = [0.0] * (x.shape[1] - start - (nt + 60 + n_shapes))
    out: list[list[float]] = []
    qs: list[tuple[float, ...]] = []
    # Python floats and ints only (lists of at most 8 GPU slots); the three resources
    # unrolled, counts as list.count / filtered lengths (the same integers).
    for (cnt, c0, c1, cpu_used, mem_used, free, pods, price, image, _model_ok, before,
         frag_after, slot, fafter, fgd, access) in items:
        c2 = cnt * 1000.0
        gfree = float(sum(free))
        n0, n1, n2 = c0 - cpu_used, c1 - mem_used, gfree
        a0, a1, a2 = n0 - rc, n1 - rm, n2 - rg
        of0 = rc / c0 if c0 > 0 else 0.0
        of1 = rm / c1 if c1 > 0 else 0.0
        of2 = rg / c2 if c2 > 0 else 0.0
        fn0 = n0 / c0 if c0 > 0 else 0.0
        fn1 = n1 / c1 if c1 > 0 else 0.0
        fn2 = n2 / c2 if c2 > 0 else 0.0
        fa0 = a0 / c0 if c0 > 0 else 0.0
        fa1 = a1 / c1 if c1 > 0 else 0.0
        fa2 = a2 / c2 if c2 > 0 else 0.0
        cu, mu = 1 - fa0, 1 - fa1
        least = 0.5 * (fa0 + fa1)
        dot = rq0 * cu + rq1 * mu + rq2 * (1 - fa2)
        cl, gl = a0 / cpu_scale, a2 / gpu_scale
        bestfit = 1 - (0.5 * cl + 0.5 * gl)
        # cpu_bound_cpu_per_gpu: node_cpu_per_gpu times the factor, as featurize
        per_gpu = (c0 / cnt if cnt > 0 else 0.0) / cpu_scale * cpu_bound
        delta = frag_after - before
        fgd_int = math.floor(fgd * 100) / 100
        live = free[:cnt]  # present GPU slots
        shared = float(free[max(slot, 0)]) if slot >= 0 else 0.0
        chosen = shared if sharing > 0 else (1000.0 if k > 0 else 0.0)
        fitting = float(len([f for f in live if f >= gm_min]))
        cost = price * max(of0, of2)
        row = head.copy()
        row[nt + 11] = per_gpu
        row[nt + 13] = image
        row[nt + 14] = 0.0 if pods is None else pods / 64
        row[nt + 15 : nt + 18] = of0, of1, of2
        shapes = _hostable(a0, fafter, access, divs)
        row += (fn0, fa0, fn1, fa1, fn2, fa2, least, 1 - abs(cu - mu) / 2,
                rq0 * n0 / cpu_scale + rq1 * n1 / mem_scale + rq2 * gfree / gpu_scale,
                dot, cl, gl, bestfit, before / gpu_scale, frag_after / gpu_scale, delta / 1000,
                fgd, fgd_int, live.count(1000) / 8, fafter[:cnt].count(1000) / 8,
                len([f for f in live if 0 < f < 1000]) / 8, chosen / 1000,
                max(chosen - gm_used, 0.0) / 1000, max(free) / 1000,
                min(live + [1000] * (MAX_GPUS - len(live))) * (cnt > 0) / 1000,
                fitting / 8, (fitting - k) / 8, float(sharing > 0 and 0 < chosen < 1000),
                float(cpu_used == 0 and gfree == c2), float(0 < gfree < c2),
                # shape1_room_gpu_bound: shape 1's room times the factor, as featurize
                shapes[1] * room if n_shapes > 1 else 0.0,
                *_SIX_ZEROS, before / gfree if gfree > 0 else 0.0, cost / 4, 0.0)
        row += shapes
        row += pad
        out.append(row)
        qs.append((delta, bestfit, least, dot, cost, fgd_int, bestfit))
    x[:, start:] = out  # float64 values, rounded to float32 as featurize does
    q[:] = qs


def _hostable(cpu_after: float, free_after: list[int], access: list[bool],
              divs: Divisors) -> list[float]:
    """One row's ``shape{k}_hostable_after`` columns (the workload's first ``len(access)``
    shapes): the batch featurizer's expression ``min(copies / 8, 1)`` with ``copies`` the
    shape's copies by CPU, or for a GPU shape the fewer of those and of its whole GPU sets
    (summed ``floor(free / gpu_milli)`` per slot over ``num_gpu``) where its model is
    allowed. Every operand is an integer-valued float or an int, so Python's ``//`` on ints
    and ``x // 1.0`` (floor) give exactly numpy's values, in any order. The per-slot sums
    are taken once per distinct GPU share (the default workload's 7 GPU shapes have 3)."""
    cpu_div, shares, share_of, ng_div, cpu_only = divs
    ca = max(cpu_after, 0.0)  # np.maximum(x, 0): NaN stays NaN
    free = [f for f in free_after if f > 0]  # np.maximum(free, 0): the rest add 0
    per_share = [sum([f // g for f in free]) for g in shares] if free else [0] * len(shares)
    out = []
    for i, acc in enumerate(access):
        by_cpu = (ca / cpu_div[i]) // 1.0
        gpus = per_share[share_of[i]] // ng_div[i]
        copies = by_cpu if cpu_only[i] else min(by_cpu, gpus) * acc
        out.append(min(copies / 8, 1.0))
    return out


def fill_rows_py(x: F32, q: F64, pv: list[float], nt: int, scales: tuple[float, float, float],
                 divs: Divisors, n_shapes: int, start: int, age0: int, node_cols: F32,
                 cols: Columns, rows: list[int], extra: Sequence[tuple[Any, ...]]) -> None:
    """Whole rows: ``x[:, :start]`` is ``node_cols`` with its columns from ``age0`` on
    zeroed, the rest :func:`fill_py` of the items that ``cols`` (the snapshot's columns, see
    :data:`Columns`) and ``extra`` make: per row, the image-present column, fragmentation
    before and after, the slot, the free slots after, FGD's score and the shapes' access.
    What the node reads comes from the arrays here, so the C twin reads them without a
    Python object per value. (The GPU-model column of an item is read by neither twin.)"""
    gpu_count, cpu_cap, mem_cap, cpu_used, mem_used, gpu_free, pods, price = cols
    items = [(int(gpu_count.item(j)), cpu_cap.item(j), mem_cap.item(j), cpu_used.item(j),
              mem_used.item(j), gpu_free[j].tolist(), None if pods is None else pods.item(j),
              1.0 if price is None else price.item(j), image, 1.0, before, frag_after, slot,
              fafter, fgd, access)
             for j, (image, before, frag_after, slot, fafter, fgd, access)
             in zip(rows, extra, strict=True)]
    x[:, :start] = node_cols
    fill_py(x, q, pv, nt, scales, divs, n_shapes, start, items)
    x[:, age0:start] = 0.0


def _compiled() -> Any:
    """``dsan._rowkernel``, or None (:func:`dsan.twins.compiled_twin`)."""
    return compiled_twin("dsan._rowkernel")


_C = _compiled()
#: The C twin's ``fill``, or None.
compiled: Callable[..., None] | None = None if _C is None else _C.fill


def _fill_rows_c(*args: Any) -> None:
    """``dsan._rowkernel.fill_rows``; on arrays of another dtype or layout (TypeError) the
    Python twin, which rewrites every entry the C one may have written."""
    try:
        _C.fill_rows(*args)
    except TypeError:
        fill_rows_py(*args)


#: The item-level twin (the core of :func:`fill_rows_py`; its C twin pins the row writer
#: that ``fill_rows``'s C twin shares).
fill: Callable[..., None] = compiled or fill_py
#: The twin :func:`dsan.rowfeatures.featurize_rows` calls.
fill_rows: Callable[..., None] = _fill_rows_c if _C is not None else fill_rows_py
