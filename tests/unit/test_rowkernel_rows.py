"""dsan.rowkernel.fill_rows, the whole-row entry the few-row featurizer calls: its C twin
(dsan/_rowkernel.c) writes the Python twin's bits on random and hostile snapshot columns,
and defers (TypeError, then the Python twin) on arrays of another dtype or layout."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from dsan import rowkernel
from dsan.features import default_workload
from dsan.rowfeatures import SMALL_ROWS, _shape_divisors
from tests.unit.test_rowkernel import NT, SCALES, START, WIDTH, _same_bits, _value, pod_values

needs_c = pytest.mark.skipif(rowkernel._C is None, reason="dsan._rowkernel not built")
AGE0 = START - 2
N = 6
_AMOUNT = st.one_of(st.floats(0.0, 1e6), st.sampled_from([0.0, -0.0, np.inf, -np.inf, np.nan]))


@st.composite
def _case(draw: st.DrawFn) -> tuple[Any, ...]:
    pv, divs = pod_values(draw)
    shapes = len(divs[0])
    amount = hnp.arrays(np.float64, N, elements=_AMOUNT)
    cols = (draw(hnp.arrays(np.int32, N, elements=st.integers(0, 8))), draw(amount),
            draw(amount), draw(amount), draw(amount),
            draw(hnp.arrays(np.int32, (N, 8), elements=st.sampled_from([0, 250, 999, 1000]))),
            draw(st.one_of(st.none(), hnp.arrays(np.int32, N, elements=st.integers(0, 200)))),
            draw(st.one_of(st.none(), hnp.arrays(np.float64, N, elements=_AMOUNT))))
    rows = draw(st.lists(st.integers(-N, N - 1), min_size=1, max_size=SMALL_ROWS))
    extra = [(float(draw(st.booleans())), _value(draw, 0.0, 8000.0), _value(draw, 0.0, 8000.0),
              draw(st.integers(-1, 7)), [draw(st.sampled_from([0, -5, 500, 1000]))
                                         for _ in range(8)],
              _value(draw, 0.0, 1.0), [draw(st.booleans()) for _ in range(shapes)])
             for _ in rows]
    node = draw(hnp.arrays(np.float32, (len(rows), START), elements=st.floats(-2.0, 2.0,
                                                                              width=32)))
    return pv, divs, shapes, node, cols, rows, extra


def _run(twin: Any, case: tuple[Any, ...]) -> tuple[np.ndarray, np.ndarray]:
    pv, divs, shapes, node, cols, rows, extra = case
    x = np.full((len(rows), WIDTH), 7.0, dtype=np.float32)
    q = np.full((len(rows), 7), 7.0)
    with np.errstate(all="ignore"):
        twin(x, q, pv, NT, SCALES, divs, shapes, START, AGE0, node, cols, rows, extra)
    return x, q


@needs_c
@settings(max_examples=300, deadline=None)
@given(case=_case())
def test_the_c_twin_writes_the_python_twins_bits(case: tuple[Any, ...]) -> None:
    """Random columns with NaN, infinities and signed zeros, absent pod counts and prices,
    negative rows (read as numpy's .item reads them): the same values, NaNs in the same
    places, the same sign on every number (not on a NaN: see test_rowkernel.py's twin
    test), and the node block copied with its age columns zero."""
    out = []
    for twin in (rowkernel.fill_rows_py, rowkernel._C.fill_rows):
        try:
            out.append(_run(twin, case))
        except (ValueError, OverflowError):  # math.floor(NaN or inf): C gives NaN, inf
            return
    (xp, qp), (xc, qc) = out
    _same_bits(xc, xp)
    _same_bits(qc, qp)
    np.testing.assert_array_equal(xc[:, :AGE0], case[3][:, :AGE0])
    assert not xc[:, AGE0:START].any()


def _plain() -> tuple[Any, ...]:
    divs = _shape_divisors(default_workload(), 8)
    pv = [0.5] * (NT + 24)
    cols = (np.full(N, 4, np.int32), np.full(N, 64000.0), np.full(N, 1e5), np.zeros(N),
            np.zeros(N), np.full((N, 8), 1000, np.int32), None, None)
    extra = [(0.0, 10.0, 20.0, 0, [500] + [1000] * 7, 0.5, [True] * 8)]
    return pv, divs, 8, np.ones((1, START), np.float32), cols, [2], extra


@needs_c
def test_other_dtypes_or_layouts_defer_to_the_python_twin() -> None:
    pv, divs, shapes, node, cols, rows, extra = _plain()
    want = _run(rowkernel.fill_rows_py, _plain())
    odd = [
        ("int64 counts", node, (cols[0].astype(np.int64), *cols[1:])),
        ("float32 amounts", node, (cols[0], cols[1].astype(np.float32), *cols[2:])),
        ("strided shares", node, (*cols[:5], np.repeat(cols[5], 2, axis=1)[:, ::2], *cols[6:])),
        ("float64 node block", node.astype(np.float64), cols),
        ("int64 pod counts", node, (*cols[:6], np.zeros(N, np.int64), None)),
    ]
    for what, nb, c in odd:
        case = (pv, divs, shapes, nb, c, rows, extra)
        with pytest.raises(TypeError):
            _run(rowkernel._C.fill_rows, case)
        x, q = _run(rowkernel._fill_rows_c, case)
        if what != "int64 pod counts":
            np.testing.assert_array_equal(x, want[0], err_msg=what)
            np.testing.assert_array_equal(q, want[1], err_msg=what)


@needs_c
def test_bad_rows_and_extras_raise() -> None:
    pv, divs, shapes, node, cols, _, extra = _plain()
    bad = [
        ([N], extra),  # past the nodes
        ([-N - 1], extra),
        ([2], [extra[0][:-1]]),  # a short extra
        ([2], [(*extra[0][:3], 8, *extra[0][4:])]),  # slot past the slots
        ([2], [(*extra[0][:6], [True] * 3)]),  # access of the wrong size
    ]
    for r, e in bad:
        for twin in (rowkernel._C.fill_rows, rowkernel.fill_rows_py):
            with pytest.raises((ValueError, IndexError, TypeError)):
                _run(twin, (pv, divs, shapes, node, cols, r, e))
