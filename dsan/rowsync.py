"""A row tracker's sync on the few rows a caller's change log names.

The caches that keep per-node values (:class:`~dsan.snapshot.AllocationTracker` for the
placement what-ifs, :class:`~dsan.model.rowcache.RowTracker` for DSAN's class rows) keep a
copy of the snapshot columns their values read and an epoch per node. When the sidecar's
change log says which rows were written since the last sync (one or two after an
assumption), only those rows are compared: :func:`sync_rows_py` (the reference, Python
scalars) and ``dsan._rowsync.sync_rows`` (C, ~1 us where the Python costs 4-8 on a
settle's rows) do it with the same typed ``!=`` (a NaN differs from itself, -0.0 equals
0.0) and give the same epochs, tick and copies (``tests/unit/test_rowsync.py``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

from dsan.twins import compiled_twin

#: (tracked copy, current snapshot column) of one column: float64 or int32, (n,) or (n, w).
Pair = tuple[npt.NDArray[Any], npt.NDArray[Any]]


def sync_rows_py(pairs: tuple[Pair, ...], epoch: npt.NDArray[np.int64], tick: int,
                 rows: Sequence[int]) -> int:
    """Compare each of ``rows`` across every pair; if any row differs, the tick moves on by
    one, and each differing row gets it as its epoch and its current values copied into the
    tracked columns. Returns the tick (unchanged when no row differs)."""
    changed = [r for r in sorted(set(rows))
               if any(was[r].tolist() != now[r].tolist() for was, now in pairs)]
    if changed:
        tick += 1
        for r in changed:  # row by row: one or two rows, numpy index arrays cost more
            epoch[r] = tick
            for was, now in pairs:
                was[r] = now[r]
    return tick


def _sync_rows_c(pairs: tuple[Pair, ...], epoch: npt.NDArray[np.int64], tick: int,
                 rows: Sequence[int]) -> int:
    """``dsan._rowsync.sync_rows``; on arrays of another dtype or layout the Python twin
    (the C one writes nothing before it has every buffer)."""
    try:
        return int(_C.sync_rows(pairs, epoch, tick, rows))
    except TypeError:
        return sync_rows_py(pairs, epoch, tick, rows)


_C: Any = compiled_twin("dsan._rowsync")
#: The twin the trackers call.
sync_rows: Callable[[tuple[Pair, ...], npt.NDArray[np.int64], int, Sequence[int]], int] = (
    _sync_rows_c if _C is not None else sync_rows_py)

