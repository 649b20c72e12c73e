"""dsan.model.classrows.first (the first layer of up to FEW class rows): both twins sum in
one fixed order, rounding every product and every partial sum to float32, so they give the
same bits as each other and as that order written out, and a row's value does not depend on
the rows computed beside it (BLAS's does). The store's twins: test_rowcache_store.py."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from dsan.model import classrows

needs_c = pytest.mark.skipif(classrows._C is None, reason="dsan._classrows not built")
TWINS = [pytest.param(classrows.first_py, id="python"),
         pytest.param(classrows._first_c, id="c", marks=needs_c)]
_F32 = st.one_of(st.floats(-4.0, 4.0, width=32),
                 st.sampled_from([0.0, -0.0, 1e-30, 3e38, np.inf, -np.inf, np.nan]))


def _written_out(x: np.ndarray, w: np.ndarray, c0: int) -> np.ndarray:
    """The order, one float32 operation at a time."""
    f32 = np.float32
    out = np.zeros((x.shape[0], w.shape[1]), dtype=np.float32)
    for i in range(x.shape[0]):
        for j in range(c0, w.shape[1]):
            acc = f32(x[i, 0]) * f32(w[0, j])
            for k in range(1, x.shape[1]):
                acc = f32(acc + f32(x[i, k]) * f32(w[k, j]))
            out[i, j] = acc
    return out


def _same_bits(got: np.ndarray, want: np.ndarray) -> None:
    """Equal values, NaNs in the same places, the same sign on every non-NaN entry."""
    np.testing.assert_array_equal(got, want)
    num = ~np.isnan(want)
    assert (np.signbit(got[num]) == np.signbit(want[num])).all()


@st.composite
def _case(draw: st.DrawFn) -> tuple[Any, ...]:
    m, f, k = draw(st.integers(1, classrows.FEW)), draw(st.integers(1, 12)), draw(
        st.integers(1, 20))
    x = draw(hnp.arrays(np.float32, (m, f), elements=_F32))
    w = draw(hnp.arrays(np.float32, (f, k), elements=_F32))
    return x, w, draw(st.integers(0, k))


@pytest.mark.parametrize("twin", TWINS)
@settings(max_examples=150, deadline=None)
@given(case=_case())
def test_each_twin_sums_in_the_written_order(twin: Any, case: tuple[Any, ...]) -> None:
    """Random weights and features with zeros of both signs, huge, tiny and non-finite
    values: each twin's columns from c0 on are the order written out; those before c0
    are left as they were."""
    x, w, c0 = case
    out = np.full((len(x), w.shape[1]), 7.0, dtype=np.float32)
    with np.errstate(all="ignore"):
        twin(x, w, c0, out)
        want = _written_out(x, w, c0)
    _same_bits(out[:, c0:], want[:, c0:])
    assert (out[:, :c0] == 7.0).all()


@pytest.mark.parametrize("twin", TWINS)
def test_each_partial_sum_is_rounded_to_float32(twin: Any) -> None:
    """1 + 2**-24 + 2**-24: 1 in float32 steps (each addition ties to even), 1 + 2**-23
    if the sum were carried in float64 and rounded once; and a product that float64 would
    keep exact."""
    x = np.ones((1, 3), dtype=np.float32)
    w = np.array([[1.0], [2.0**-24], [2.0**-24]], dtype=np.float32)
    out = np.zeros((1, 1), dtype=np.float32)
    twin(x, w, 0, out)
    assert out[0, 0] == np.float32(1.0)
    x = np.array([[1.0 + 2.0**-23]], dtype=np.float32)
    w = np.array([[1.0 + 2.0**-23]], dtype=np.float32)
    twin(x, w, 0, out)
    assert out[0, 0] == np.float32((1.0 + 2.0**-23) ** 2)  # float32's rounding of it
    assert float(out[0, 0]) != (1.0 + 2.0**-23) ** 2  # not the exact product


@pytest.mark.parametrize("twin", TWINS)
def test_a_row_does_not_depend_on_its_batch(twin: Any) -> None:
    """Each row summed alone equals the same row in a batch of FEW (numpy's matmul does not
    promise it: gemv and gemm sum in other orders)."""
    rng = np.random.default_rng(4)
    x = rng.standard_normal((classrows.FEW, 128)).astype(np.float32)
    w = rng.standard_normal((128, 97)).astype(np.float32)
    batch = np.empty((len(x), 97), dtype=np.float32)
    twin(x, w, 0, batch)
    for i in range(len(x)):
        one = np.empty((1, 97), dtype=np.float32)
        twin(x[i : i + 1], w, 0, one)
        assert one.tobytes() == batch[i].tobytes()


@needs_c
def test_the_c_twin_refuses_other_arrays_and_the_python_twin_serves() -> None:
    x, w = np.ones((2, 3), dtype=np.float32), np.ones((3, 4), dtype=np.float32)
    out = np.zeros((2, 4), dtype=np.float32)
    for args in ((x.astype(np.float64), w, 0, out), (x, w[:, ::2], 0, out[:, :2]),
                 (x, w, 0, out.T.copy()), (x, w, 5, out)):
        with pytest.raises(TypeError):
            classrows._C.first(*args)
    classrows._first_c(x.astype(np.float64), w, 1, out)  # the numpy twin, float32 result
    assert (out[:, 1:] == 3.0).all()
