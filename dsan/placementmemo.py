"""The few-row walk of :class:`dsan.placement.PlacementCache`'s memo: each row's state key
and, for rows whose placement the current entry lacks, its values from the memos.

The memos are keyed by everything a node's what-if reads (:func:`_key_of`); the walk
(:func:`recall_py`) serves :meth:`PlacementCache.few` and is the first step of
:func:`dsan.model.memorows.update_py`, whose C twin (``dsan/_memorows.c``) builds the same
keys and does the same walk.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt

from dsan.snapshot import ClusterSnapshot

F64 = npt.NDArray[np.float64]


def state_key(snap: ClusterSnapshot, r: int) -> tuple[float, int, int, bytes]:
    """Everything node ``r``'s fragmentation reads: free CPU (the same float64 subtraction
    as the vectorised one), GPU count, GPU model, the free share of every slot."""
    return _key_of(*key_columns(snap), r)


def key_columns(snap: ClusterSnapshot) -> tuple[Any, Any, Any, Any, Any]:
    """The columns :func:`_key_of` reads, in its order."""
    return snap.cpu_cap, snap.cpu_used, snap.gpu_count, snap.gpu_model, snap.gpu_free


def _key_of(cpu_cap: Any, cpu_used: Any, gpu_count: Any, gpu_model: Any, gpu_free: Any,
            r: int) -> tuple[float, int, int, bytes]:
    """:func:`state_key` from the columns (``dsan/_memorows.c`` builds the same tuple)."""
    return (cpu_cap.item(r) - cpu_used.item(r), gpu_count.item(r), gpu_model.item(r),
            gpu_free[r].tobytes())


#: :meth:`PlacementCache.memo`: the pod's shape, its entry (frag before, after, slot, free
#: after, tick computed), the nodes' epochs, the current fragmentation and its tick per node,
#: the tracker's tick, and the two memos (state -> fragmentation; (shape, state) -> what-if).
Memo = tuple[tuple[float, int, int], F64, F64, npt.NDArray[np.int64], npt.NDArray[np.int64],
             npt.NDArray[np.int64], npt.NDArray[np.int64], F64, npt.NDArray[np.int64], int,
             dict[Any, float], dict[Any, tuple[float, int, npt.NDArray[np.int64]]]]


def recall_py(memo: Memo, key_cols: tuple[Any, Any, Any, Any, Any], rows: list[int]) -> bool:
    """Bring the memo's entry up to date on ``rows`` (a few): current rows are left as they
    are, the others are filled from the memos. False at the first row the memos lack (the
    rows before it stay filled; the caller takes :meth:`PlacementCache.get`). ``key_cols``:
    the snapshot's columns that the state key reads, in :func:`_key_of`'s order."""
    (shape, e_before, e_after, e_slot, e_free, e_at, epoch, before, before_at, tick,
     memo_before, memo_after) = memo
    for r in rows:
        if e_at.item(r) >= epoch.item(r):
            continue  # current
        key = _key_of(*key_cols, r)
        if before_at.item(r) < epoch.item(r):
            b = memo_before.get(key)
            if b is None:
                return False
            before[r], before_at[r] = b, tick
        got = memo_after.get((shape, key))
        if got is None:
            return False
        e_before[r] = before[r]
        e_after[r], e_slot[r], e_free[r] = got
        e_at[r] = tick
    return True
