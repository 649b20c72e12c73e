"""dsan.rowsync: a tracker's sync on the rows a change log names. Both twins compare with the
same typed != (a NaN differs from itself, -0.0 equals 0.0) and give the same tick, epochs and
tracked copies on random and hostile columns; the trackers that use it stay pinned to their
full diffs by test_placement_hints.py (AllocationTracker) and test_serving_headcache.py
(RowTracker)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from dsan import rowsync

needs_c = pytest.mark.skipif(rowsync._C is None, reason="dsan._rowsync not built")
N = 6
_FLOAT = st.sampled_from([0.0, -0.0, 1.5, 2.0, np.inf, -np.inf, np.nan])


@st.composite
def _case(draw: st.DrawFn) -> tuple[Any, ...]:
    """Tracked copies and current columns (float64, int32, an (n, 8) int32 block) that
    differ in some rows, rows named with repeats and negative indices."""
    pairs = []
    for dtype, shape, elems in ((np.float64, N, _FLOAT), (np.int32, N, st.integers(0, 3)),
                                (np.int32, (N, 8), st.sampled_from([0, 500, 1000]))):
        now = draw(hnp.arrays(dtype, shape, elements=elems))
        was = now.copy()
        for r in draw(st.lists(st.integers(0, N - 1), max_size=3)):
            was[r] = draw(hnp.arrays(dtype, shape[1:] if isinstance(shape, tuple) else (),
                                     elements=elems))
        pairs.append((was, now))
    rows = draw(st.lists(st.integers(-N, N - 1), max_size=8))
    return tuple(pairs), draw(hnp.arrays(np.int64, N, elements=st.integers(0, 5))), \
        draw(st.integers(0, 9)), rows


def _run(twin: Any, case: tuple[Any, ...]) -> list[bytes | int]:
    pairs, epoch, tick, rows = case
    pairs = tuple((was.copy(), now) for was, now in pairs)
    epoch = epoch.copy()
    got = twin(pairs, epoch, tick, rows)
    return [got, epoch.tobytes(), *(was.tobytes() for was, _ in pairs)]


@needs_c
@settings(max_examples=300, deadline=None)
@given(case=_case())
def test_the_twins_sync_alike(case: tuple[Any, ...]) -> None:
    assert _run(rowsync._C.sync_rows, case) == _run(rowsync.sync_rows_py, case)


def test_only_the_named_rows_that_differ_move() -> None:
    """Python twin semantics (the C one is pinned to them above): one new tick for the call,
    on the rows that differ; NaN differs from NaN, -0.0 does not from 0.0."""
    was, now = np.array([1.0, np.nan, 0.0, 5.0]), np.array([2.0, np.nan, -0.0, 6.0])
    epoch = np.zeros(4, dtype=np.int64)
    for twin in [rowsync.sync_rows_py, *([rowsync._C.sync_rows] if rowsync._C else [])]:
        w, e = was.copy(), epoch.copy()
        assert twin(((w, now),), e, 3, [2, 1, 0, 0]) == 4
        assert e.tolist() == [4, 4, 0, 0]
        np.testing.assert_array_equal(w, [2.0, np.nan, 0.0, 5.0])  # row 3 not named
        assert twin(((w, now),), e, 4, [2]) == 4  # nothing differs: the tick stays


@needs_c
def test_the_c_twin_refuses_other_arrays_and_writes_nothing() -> None:
    was, now = np.zeros(4), np.ones(4)
    epoch = np.zeros(4, dtype=np.int64)
    for pairs, ep in ((((was, now.astype(np.float32)),), epoch),
                      (((was, now), (was[:2], now[:2])), epoch),
                      (((was, now),), epoch.astype(np.int32))):
        with pytest.raises(TypeError):
            rowsync._C.sync_rows(pairs, ep, 0, [1])
    with pytest.raises(IndexError):
        rowsync._C.sync_rows(((was, now),), epoch, 0, [1, 4])
    assert not was.any() and not epoch.any()
    f32 = np.zeros(4, dtype=np.float32)
    assert rowsync._sync_rows_c(((f32, now.astype(np.float32)),), epoch, 0, [1]) == 1
    assert f32.tolist() == [0.0, 1.0, 0.0, 0.0] and epoch.tolist() == [0, 1, 0, 0]
