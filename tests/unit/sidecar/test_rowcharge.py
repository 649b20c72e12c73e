"""sidecar.rowcharge: a pod charged to and released from one row, and rows copied out. The C
twin writes the same bits as the Python one on random rows (GPU shares that fit, do not fit,
or over-share), and the Python twin's own semantics are pinned by hand-computed cases; the
cache-level behaviour stays pinned by test_cache.py, run both ways by the tiers."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from sidecar import rowcharge

needs_c = pytest.mark.skipif(rowcharge._C is None, reason="dsan._rowcharge not built")
N, W = 5, 8


def _cols(cpu: float = 0.0, mem: float = 0.0, pods: int = 0, count: int = 8,
          free: list[int] | None = None) -> rowcharge.Columns:
    g = np.zeros((N, W), dtype=np.int32)
    g[1, :len(free or [])] = free or []
    return (np.full(N, cpu), np.full(N, mem), np.full(N, pods, dtype=np.int32),
            np.full(N, count, dtype=np.int32), g)


@st.composite
def _table(draw: st.DrawFn) -> rowcharge.Columns:
    f64 = st.sampled_from([0.0, -0.0, 0.5, 1000.0, 4096.5, 1e18, np.nan])
    return (draw(hnp.arrays(np.float64, N, elements=f64)),
            draw(hnp.arrays(np.float64, N, elements=f64)),
            draw(hnp.arrays(np.int32, N, elements=st.integers(0, 50))),
            draw(hnp.arrays(np.int32, N, elements=st.integers(-9, 9))),
            draw(hnp.arrays(np.int32, (N, W), elements=st.sampled_from(
                [0, 1, 250, 499, 500, 750, 999, 1000]))))


def _copy(cols: rowcharge.Columns) -> Any:
    return tuple(c.copy() for c in cols)


def _bits(cols: rowcharge.Columns) -> list[bytes]:
    return [c.tobytes() for c in cols]


_ROW = st.integers(-N, N - 1)
_REQ = st.tuples(st.sampled_from([0, 0.5, 250, 4000.0, 1e18]),
                 st.sampled_from([0, 1024, 0.25, 16384.0]), st.integers(-1, 9),
                 st.sampled_from([0, 1, 250, 500, 999, 1000]))


@needs_c
@settings(max_examples=400, deadline=None)
@given(cols=_table(), i=_ROW, req=_REQ)
def test_the_twins_charge_alike(cols: rowcharge.Columns, i: int,
                                req: tuple[float, float, int, int]) -> None:
    a, b = _copy(cols), _copy(cols)
    got_c = rowcharge._C.charge(a, i, *req)
    got_py = rowcharge.charge_py(b, i, *req)
    assert got_c == got_py
    assert _bits(a) == _bits(b)


@needs_c
@settings(max_examples=400, deadline=None)
@given(cols=_table(), i=_ROW, req=_REQ,
       gpus=st.lists(st.integers(0, W - 1), max_size=W, unique=True).map(sorted))
def test_the_twins_uncharge_alike(cols: rowcharge.Columns, i: int,
                                  req: tuple[float, float, int, int], gpus: list[int]) -> None:
    cpu, mem, _, milli = req
    a, b = _copy(cols), _copy(cols)
    rowcharge._C.uncharge(a, i, cpu, mem, milli, tuple(gpus))
    rowcharge.uncharge_py(b, i, cpu, mem, milli, tuple(gpus))
    assert _bits(a) == _bits(b)


@needs_c
@settings(max_examples=200, deadline=None)
@given(src=_table(), dst=_table(), rows=st.lists(st.integers(0, N - 1), max_size=4))
def test_the_twins_copy_alike(src: rowcharge.Columns, dst: rowcharge.Columns,
                              rows: list[int]) -> None:
    # a snapshot's columns (N rows) from a table that holds spare rows (N + 3)
    big = tuple(np.concatenate([s, s[:3]]) for s in src)
    a, b = _copy(dst), _copy(dst)
    rowcharge._C.copy_rows([(x, y) for x, y in zip(a, big, strict=True)], rows)
    rowcharge.copy_rows_py([(x, y) for x, y in zip(b, big, strict=True)], rows)
    assert _bits(a) == _bits(b)


@needs_c
def test_the_c_twin_refuses_before_writing() -> None:
    """Out-of-range rows and foreign dtypes raise before any write (TypeError sends the
    caller to the Python twin, which must then find the row untouched)."""
    cols = _cols(free=[1000] * 8)
    before = _bits(cols)
    with pytest.raises(IndexError):
        rowcharge._C.charge(cols, N, 1.0, 1.0, 1, 1000)
    with pytest.raises(TypeError):
        rowcharge._C.charge((*cols[:4], cols[4].astype(np.int64)), 1, 1.0, 1.0, 1, 1000)
    with pytest.raises(TypeError):
        rowcharge._C.uncharge(cols, 1, 1.0, 1.0, 1000, (W,))
    with pytest.raises(TypeError):
        rowcharge._C.copy_rows([(cols[0].copy(), cols[0]), (cols[2].copy(), cols[2])], [-1])
    assert _bits(cols) == before
    # the selected twin falls back on a foreign dtype and charges as the Python twin does
    wide = (*cols[:4], cols[4].astype(np.int64))
    assert rowcharge.charge(wide, 1, 1.0, 1.0, 1, 500) == ((0,), False)
    assert wide[4][1, 0] == 500


def test_best_fit_takes_the_fullest_gpus_that_fit() -> None:
    cols = _cols(cpu=100.0, mem=10.0, pods=2, count=4, free=[1000, 250, 500, 500])
    assert rowcharge.charge_py(cols, 1, 500, 1024, 2, 500) == ((2, 3), False)
    assert cols[0][1] == 600.0 and cols[1][1] == 1034.0 and cols[2][1] == 3
    assert cols[4][1].tolist() == [1000, 250, 0, 0, 0, 0, 0, 0]
    # a share: the fullest that fits (250 free fits 250 exactly)
    assert rowcharge.charge_py(cols, 1, 0, 0, 1, 250) == ((1,), False)
    assert cols[4][1, 1] == 0


def test_too_few_gpus_that_fit_take_the_freest_and_say_so() -> None:
    cols = _cols(count=3, free=[250, 750, 500])
    assert rowcharge.charge_py(cols, 1, 0, 0, 2, 1000) == ((1, 2), True)
    assert cols[4][1, :3].tolist() == [250, 0, 0]  # never below 0


def test_cpu_only_pods_take_no_gpu() -> None:
    cols = _cols(count=2, free=[1000, 1000])
    assert rowcharge.charge_py(cols, 1, 250, 512, 0, 0) == ((), False)
    assert cols[4][1, :2].tolist() == [1000, 1000] and cols[2][1] == 1


def test_uncharge_clamps_and_skips_slots_past_the_gpu_count() -> None:
    cols = _cols(cpu=100.0, mem=10.0, pods=0, count=2, free=[900, 0, 0])
    rowcharge.uncharge_py(cols, 1, 500, 1024, 250, (0, 1, 2))
    assert cols[0][1] == 0.0 and cols[1][1] == 0.0 and cols[2][1] == 0
    assert cols[4][1, :3].tolist() == [1000, 250, 0]  # at most 1000; slot 2 is past count


def test_copy_rows_copies_the_named_rows_only() -> None:
    src = np.arange(8.0)
    dst = np.zeros(5)
    rowcharge.copy_rows([(dst, src)], [1, 3])
    assert dst.tolist() == [0.0, 1.0, 0.0, 3.0, 0.0]
