"""dsan.model.classrows.store_py and its C twin (dsan/_classrows.c) store the same bits:
pre-activations, presence, the dead flags (float32 maxima at the -1e-5 margin, NaN rows),
quantities and ticks. The head cache served by either stays pinned to the model by
test_serving_headcache.py (DSAN_PURE_PYTHON=1 runs it on the numpy twin)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dsan.model import classrows

needs_c = pytest.mark.skipif(classrows._C is None, reason="dsan._classrows not built")


def _case(seed: int, n: int, m: int, h: int, ages: str) -> tuple[Any, ...]:
    rng = np.random.default_rng(seed)
    w = 2 * h + 1
    first = rng.standard_normal((m, h + w)).astype(np.float32) * 1e-5
    # rows right at the dead margin, and a NaN now and then
    first[:, h : h + 2 * h] -= np.float32(1e-5)
    if m and rng.random() < 0.3:
        first[rng.integers(m), h + rng.integers(2 * h)] = np.nan
    bias = (rng.standard_normal(w) * 1e-6).astype(np.float32)
    req_top = np.abs(rng.standard_normal(2 * h) * 1e-6).astype(np.float32)
    req_age = (rng.standard_normal(2 * h) * 1e-6).astype(np.float32)
    age = {"none": None, "mixed": rng.choice([0.5, np.inf, np.nan, 30.0], n)}[ages]
    rows = rng.permutation(n)[:m].astype(np.int64)
    q = rng.standard_normal((m, 7))
    return first, h, rows, bias, req_top, req_age, age, q


def _store(twin: Any, case: tuple[Any, ...], n: int) -> list[bytes]:
    first, h, rows, bias, req_top, req_age, age, q = case
    rng = np.random.default_rng(1)
    pre = rng.standard_normal((n, 2 * h + 1)).astype(np.float32)
    present = rng.standard_normal(n).astype(np.float32)
    dead = rng.random(n) < 0.5
    quant = rng.standard_normal((7, n))
    at = rng.integers(0, 9, n)
    twin(first.copy(), h, rows, bias, req_top, req_age, age, pre, present, dead, quant, q, at,
         42)
    return [a.tobytes() for a in (pre, present, dead, quant, at)]


@needs_c
@settings(max_examples=150, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), n=st.integers(1, 30), m=st.integers(0, 8),
       h=st.integers(1, 8), ages=st.sampled_from(["none", "mixed"]))
def test_the_twins_store_the_same_bits(seed: int, n: int, m: int, h: int, ages: str) -> None:
    case = _case(seed, n, min(m, n), h, ages)
    assert _store(classrows._store_c, case, n) == _store(classrows.store_py, case, n)


@needs_c
def test_the_dead_margin_is_compared_in_float32_as_numpy_does() -> None:
    """numpy compares a float32 maximum with -1e-5 as float32 (-1e-5 rounds to a float32
    above the double): a row whose bound is exactly float32(-1e-5) is dead in both."""
    h = 1
    first = np.zeros((1, h + 3), dtype=np.float32)
    first[0, h : h + 2] = np.float32(-1e-5)
    case = (first, h, np.array([0], dtype=np.int64), np.zeros(3, dtype=np.float32),
            np.zeros(2, dtype=np.float32), np.zeros(2, dtype=np.float32), None, np.zeros((1, 7)))
    got = _store(classrows._store_c, case, 1)
    assert got == _store(classrows.store_py, case, 1)
    assert got[2] == b"\x01"


@needs_c
def test_arrays_of_another_layout_take_the_numpy_twin() -> None:
    case = list(_case(3, 10, 4, 3, "mixed"))
    case[0] = np.asfortranarray(case[0])
    assert (_store(classrows._store_c, tuple(case), 10)
            == _store(classrows.store_py, tuple(case), 10))
    case[2] = np.array([0, 10], dtype=np.int64)  # out of range: IndexError in both
    case[0], case[7] = case[0][:2], case[7][:2]
    for twin in (classrows._store_c, classrows.store_py):
        with pytest.raises(IndexError):
            _store(twin, tuple(case), 10)


def test_pure_python_is_chosen_when_asked(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DSAN_PURE_PYTHON", "1")
    assert classrows._compiled() is None
