"""A class's raw scores at the candidates' rows to 0..max_score scores and the winner
(dsan.policies.rowscale): the reference is normalize over the scorable (non-NaN) scores, 0
for NaN, the first maximum, with the NaN and sentinel counts; the C twin gives exactly the
reference's integers, winner and counts on random scores with NaN, repeats, ties, signed
zeros, infinities and spans past float64, and rows with repeats and the sentinel; arrays of
another dtype or layout go to numpy. Run with DSAN_PURE_PYTHON=1 for the reference alone."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dsan.policies import rowscale
from dsan.policies.base import normalize
from dsan.policies.rowscale import scale_rows_py

needs_c = pytest.mark.skipif(not rowscale.compiled, reason="dsan._rowscale not built")


def _world(rnd: np.random.Generator, n: int, m: int) -> tuple[np.ndarray, np.ndarray]:
    """(rawx with its NaN sentinel last, rows): scores at the scorers' scales or odd ones,
    a share of NaN (infeasible), rows with repeats and unknown names (the sentinel)."""
    kind = rnd.integers(0, 5)
    if kind == 0:  # FGD: integers 0..100, many ties
        x = rnd.integers(0, 101, n).astype(np.float64)
    elif kind == 1:  # k8s-default: a few values only
        x = rnd.choice(rnd.normal(0, 3, 3), n)
    elif kind == 2:
        x = rnd.normal(0, 10.0 ** rnd.integers(-6, 6), n)
    elif kind == 3:  # signed zeros and tiny values
        x = rnd.choice([0.0, -0.0, 1e-300, -1e-300, 5e-324], n)
    else:  # odd cases: infinities, spans past float64
        x = rnd.choice([np.inf, -np.inf, 1e308, -1e308, 0.0, 1.0], n)
    x = np.asarray(x, dtype=np.float64)
    x[rnd.random(n) < rnd.choice([0.0, 0.1, 0.5, 1.0])] = np.nan
    rawx = np.append(x, np.nan)
    rows = rnd.integers(0, n + 1 if rnd.random() < 0.3 else n, m)
    return rawx, rows.astype(np.int64)


def test_the_reference_is_normalize_over_the_scorable_nodes() -> None:
    rawx = np.array([3.0, np.nan, 1.0, 2.0, np.nan])  # the last: the sentinel
    rows = np.array([1, 4, 0, 2, 3, 0], dtype=np.int64)
    out, best, n_nan, n_unknown = scale_rows_py(rawx, rows, 100)
    assert out.tolist() == [0, 0, 100, 0, 50, 100]
    assert (best, n_nan, n_unknown) == (2, 2, 1)
    fit = ~np.isnan(rawx[rows])
    assert out[fit].tolist() == normalize(rawx[rows][fit], 100).tolist()
    out, best, n_nan, _ = scale_rows_py(rawx, np.array([1, 4], dtype=np.int64), 10)
    assert out.tolist() == [0, 0] and best == -1 and n_nan == 2


@needs_c
@pytest.mark.filterwarnings("ignore:overflow encountered")  # normalize's span past float64
@pytest.mark.filterwarnings("ignore:invalid value encountered")  # inf - inf in the reference
@settings(max_examples=400, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), n=st.integers(1, 60), m=st.integers(1, 200),
       max_score=st.sampled_from([100, 10, 1, 7, 1000]))
def test_c_twin_gives_the_references_scores_winner_and_counts(seed: int, n: int, m: int,
                                                              max_score: int) -> None:
    rawx, rows = _world(np.random.default_rng(seed), n, m)
    out, best, n_nan, n_unknown = rowscale._scale_rows_c(rawx, rows, max_score)
    ref, ref_best, ref_nan, ref_unknown = scale_rows_py(rawx, rows, max_score)
    assert out.dtype == ref.dtype == np.int64
    assert out.tolist() == ref.tolist()
    assert (best, n_nan, n_unknown) == (ref_best, ref_nan, ref_unknown)


@needs_c
@pytest.mark.filterwarnings("ignore:overflow encountered")
@pytest.mark.parametrize("x", [
    [1.0, np.nan, 2.0], [np.inf, 1.0], [-np.inf, 1.0, 2.0], [np.nan, np.nan],
    [1e308, -1e308, 0.0],  # a span past float64
    [0.0, 1e-310, 5e-311], [5e-324, np.nan, 0.0],  # a subnormal span: max_score / span overflows
    [4.0, 4.0, 4.0], [4.0], [-0.0, 0.0], [0.0, -0.0, 1.0], [np.nan, 4.0, 4.0],
])
def test_c_twin_on_normalizes_own_cases(x: list[float]) -> None:
    rawx = np.array([*x, np.nan])
    rows = np.arange(len(rawx), dtype=np.int64)[::-1].copy()
    got = rowscale._scale_rows_c(rawx, rows, 100)
    ref = scale_rows_py(rawx, rows, 100)
    assert got[0].tolist() == ref[0].tolist() and got[1:] == ref[1:]
    assert all(0 <= v <= 100 for v in ref[0].tolist())


@needs_c
def test_arrays_of_another_dtype_or_layout_go_to_numpy_and_bad_rows_raise() -> None:
    rawx = np.append(np.arange(20, dtype=np.float64) % 7, np.nan)
    rows = np.arange(0, 21, dtype=np.int64)
    for x, r in ((rawx[::2], rows[:11]), (rawx.astype(np.float32), rows),
                 (rawx, rows.astype(np.int32)), (rawx, rows[::2])):
        got = rowscale._scale_rows_c(x, r, 100)
        ref = scale_rows_py(x, r, 100)
        assert got[0].tolist() == ref[0].tolist() and got[1:] == ref[1:]
    with pytest.raises(IndexError):
        rowscale._scale_rows_c(rawx, np.array([0, 21], dtype=np.int64), 100)
    with pytest.raises(IndexError):
        rowscale._scale_rows_c(rawx, np.array([-1], dtype=np.int64), 100)


def test_pure_python_is_chosen_when_asked(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DSAN_PURE_PYTHON", "1")
    assert rowscale._compiled() is None
