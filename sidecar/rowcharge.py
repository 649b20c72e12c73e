"""A pod's requests charged to (and released from) one node-table row, and rows copied out.

Every assumption the sidecar makes (after each reply, back to back with the next request)
uncharges the pod's previous assumption, charges the winner and copies both rows into the
published snapshot (:mod:`sidecar.allocations`, :meth:`sidecar.published.Publisher.patch`).
In Python those are a dozen numpy scalar reads and writes, a best-fit sort over the node's
GPUs and a row copy per column: compiled, every policy's settle after a reply is 7-11 us
shorter at 100 nodes (same-process A/B, session 23; docs/sidecar.md). So each has a Python
twin (the reference: :func:`charge_py`, :func:`uncharge_py`, :func:`copy_rows_py`)
and a C twin (``dsan._rowcharge``) that writes the same bits
(tests/unit/sidecar/test_rowcharge.py).

Columns, as :class:`sidecar.nodetable.NodeTable` holds them: ``cpu_used`` and ``mem_used``
float64 (n,), ``pod_count`` and ``gpu_count`` int32 (n,), ``gpu_free`` int32 (n, 8), each
GPU's free share in milli (1000 = whole), slots at or past the node's GPU count unused.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

from dsan.twins import compiled_twin

__all__ = ["Columns", "charge", "charge_py", "copy_rows", "copy_rows_py", "uncharge",
           "uncharge_py"]

#: (cpu_used, mem_used, pod_count, gpu_count, gpu_free) of one node table.
Columns = tuple[npt.NDArray[np.float64], npt.NDArray[np.float64], npt.NDArray[np.int32],
                npt.NDArray[np.int32], npt.NDArray[np.int32]]


def charge_py(cols: Columns, i: int, cpu_milli: float, mem_mib: float, num_gpu: int,
              gpu_milli: int) -> tuple[tuple[int, ...], bool]:
    """Add one pod's requests to row ``i``: CPU and memory, one pod, and ``num_gpu`` GPUs of
    ``gpu_milli`` each taken by best fit (the fullest GPUs that still fit, lowest slot first
    on equal shares, as :func:`dsan.policies.base.best_fit_gpus`). Returns (the GPU slots
    taken, ascending; whether the row had too few GPUs that fit, in which case the freest
    are taken and no share goes below 0)."""
    cpu_used, mem_used, pod_count, gpu_count, gpu_free = cols
    # Python scalars in and out (.item(), scalar writes): the same float64 and integer
    # arithmetic as numpy's scalar ops, without a numpy scalar object per operation.
    cpu_used[i] = cpu_used.item(i) + cpu_milli
    mem_used[i] = mem_used.item(i) + mem_mib
    pod_count[i] = pod_count.item(i) + 1
    if num_gpu == 0 or gpu_milli == 0:
        return (), False
    # At most 8 GPUs: Python on a list beats a dozen numpy calls.
    free: list[int] = gpu_free[i, :gpu_count.item(i)].tolist()
    fits = sorted([(f, g) for g, f in enumerate(free) if f >= gpu_milli])  # (free, slot)
    over = len(fits) < num_gpu
    if over:  # a stale view or an over-sharing device plugin: the freest GPUs
        fits = sorted([(-f, g) for g, f in enumerate(free)])
    gpus = tuple(sorted([g for _, g in fits[:num_gpu]]))
    for g in gpus:  # only these slots change
        gpu_free[i, g] = max(0, free[g] - gpu_milli)
    return gpus, over


def uncharge_py(cols: Columns, i: int, cpu_milli: float, mem_mib: float, gpu_milli: int,
                gpus: Sequence[int]) -> None:
    """Take one pod's requests back off row ``i`` (``gpus``: the slots :func:`charge_py`
    gave it, each in 0..7), never below 0 and no GPU above 1000; slots at or past the row's
    GPU count (the node shrank since) are left alone."""
    cpu_used, mem_used, pod_count, gpu_count, gpu_free = cols
    cpu_used[i] = max(0.0, cpu_used.item(i) - cpu_milli)
    mem_used[i] = max(0.0, mem_used.item(i) - mem_mib)
    pod_count[i] = max(0, pod_count.item(i) - 1)
    if gpus:
        count = gpu_count.item(i)
        for g in gpus:
            if g < count:
                gpu_free[i, g] = min(1000, gpu_free.item(i, g) + gpu_milli)


#: (destination, source) columns of one dtype, float64 or int32, (n,) or (n, w), the
#: source at least as long (a snapshot's columns from its table's, which hold spare rows).
Pair = tuple[npt.NDArray[Any], npt.NDArray[Any]]


def copy_rows_py(pairs: Sequence[Pair], rows: Sequence[int]) -> None:
    """``dst[r] = src[r]`` for every pair and every row in ``rows`` (rows of both)."""
    for dst, src in pairs:
        for r in rows:
            dst[r] = src[r]


def _charge_c(cols: Columns, i: int, cpu_milli: float, mem_mib: float, num_gpu: int,
              gpu_milli: int) -> tuple[tuple[int, ...], bool]:
    """``dsan._rowcharge.charge``; on columns of another dtype or layout the Python twin
    (the C one writes nothing before it holds every buffer)."""
    try:
        return _C.charge(cols, i, cpu_milli, mem_mib, num_gpu, gpu_milli)
    except TypeError:
        return charge_py(cols, i, cpu_milli, mem_mib, num_gpu, gpu_milli)


def _uncharge_c(cols: Columns, i: int, cpu_milli: float, mem_mib: float, gpu_milli: int,
                gpus: Sequence[int]) -> None:
    try:
        _C.uncharge(cols, i, cpu_milli, mem_mib, gpu_milli, gpus)
    except TypeError:
        uncharge_py(cols, i, cpu_milli, mem_mib, gpu_milli, gpus)


def _copy_rows_c(pairs: Sequence[Pair], rows: Sequence[int]) -> None:
    try:
        _C.copy_rows(pairs, rows)
    except TypeError:
        copy_rows_py(pairs, rows)


_C: Any = compiled_twin("dsan._rowcharge")
#: The twins the allocations and the publisher call.
charge: Callable[[Columns, int, float, float, int, int], tuple[tuple[int, ...], bool]] = (
    _charge_c if _C is not None else charge_py)
uncharge: Callable[[Columns, int, float, float, int, Sequence[int]], None] = (
    _uncharge_c if _C is not None else uncharge_py)
copy_rows: Callable[[Sequence[Pair], Sequence[int]], None] = (
    _copy_rows_c if _C is not None else copy_rows_py)
