"""dsan.rowkernel's two twins: the C one (dsan/_rowkernel.c) and the Python one write the
same bits, and each one, serving the few-row featurizer, gives featurize's rows
(tests/unit/test_rowkernel_rows.py pins ``fill_rows``, the whole-row entry, the same way).

The C twin is skipped where it was not built (no compiler at install time); the Python
twin is what serves there, and is pinned here either way."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dsan import rowkernel
from dsan.features import default_workload
from dsan.rowfeatures import SMALL_ROWS, _shape_divisors
from dsan.snapshot import PodSpec
from tests.unit.test_features_fast import _random_pod, _random_snapshot
from tests.unit.test_features_rows import _pin

needs_c = pytest.mark.skipif(rowkernel.compiled is None, reason="dsan._rowkernel not built")
NT, WIDTH, START = 4, 128, 56
SCALES = (128000.0, 1048576.0, 8000.0)


def _no_fallback(*args: Any) -> None:
    raise AssertionError("the C twin deferred to the Python one")


ROW_TWINS = [pytest.param(rowkernel.fill_rows_py, id="python"),
             pytest.param(rowkernel._fill_rows_c, id="c", marks=needs_c)]


@pytest.mark.parametrize("twin", ROW_TWINS)
def test_each_twin_serves_featurize_rows_bit_identically(
        twin: Callable[..., None], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(rowkernel, "fill_rows", twin)
    if twin is rowkernel._fill_rows_c:  # the C one itself, never its fallback
        monkeypatch.setattr(rowkernel, "fill_rows_py", _no_fallback)
    rng = np.random.default_rng(7)
    for n, extras in [(3, False), (12, True), (30, True)]:
        snap = _random_snapshot(rng, n, extras)
        for i in range(8):
            size = int(rng.integers(1, min(n, SMALL_ROWS) + 1))
            rows = rng.choice(n, size=size, replace=False).astype(np.int64)
            _pin(_random_pod(rng, i), snap, rows, default_workload())
    edge = _random_snapshot(rng, 3, True)
    edge.cpu_used[0] = 0.0
    edge.gpu_count[1] = 0
    edge.gpu_free[1] = 0
    edge.gpu_count[2] = 8
    edge.gpu_free[2] = 1000
    for pod in (PodSpec("c", 1000.0, 512.0), PodSpec("w", 8000.0, 4096.0, 2, 1000)):
        _pin(pod, edge, np.arange(3, dtype=np.int64), default_workload())


_ODD = [0.0, -0.0, 1.0, -1.0, 0.5, 1e-300, 1e300, math.inf, -math.inf, math.nan, 999.0,
        1000.0, 1001.0, 64000.0]


def _value(draw: st.DrawFn, lo: float, hi: float) -> float:
    """A plausible value, or now and then one the featurizer should never see (NaN,
    infinities, signed zeros, huge): both twins must still agree on it."""
    if draw(st.integers(0, 5)) == 0:
        return draw(st.sampled_from(_ODD))
    return draw(st.floats(lo, hi))


def pod_values(draw: st.DrawFn) -> tuple[list[float], Any]:
    """A row call's pod values and shape divisors (``pv``, ``divs``), now and then odd."""
    pv = [_value(draw, 0.0, 1.0) for _ in range(NT + 15)]
    pv += [_value(draw, 0.0, 64000.0), _value(draw, 0.0, 1e6), _value(draw, 0.0, 8000.0),
           float(draw(st.integers(0, 8))), _value(draw, 0.0, 1000.0),
           _value(draw, 0.0, 1000.0), float(draw(st.integers(0, 1))),
           _value(draw, 0.0, 1.0),  # the cluster-wide factor of shape1_room_gpu_bound
           _value(draw, 0.0, 1.0)]  # and that of cpu_bound_cpu_per_gpu
    shapes = draw(st.integers(0, 8))
    shares = sorted(set(draw(st.lists(st.integers(1, 1000), min_size=1, max_size=4))))
    divs = ([draw(st.floats(1.0, 64000.0)) for _ in range(shapes)], shares,
            [draw(st.integers(0, len(shares) - 1)) for _ in range(shapes)],
            [draw(st.integers(1, 8)) for _ in range(shapes)],
            [draw(st.booleans()) for _ in range(shapes)])
    return pv, divs


@st.composite
def _case(draw: st.DrawFn) -> tuple[list[float], Any, int, list[tuple[Any, ...]]]:
    pv, divs = pod_values(draw)
    shapes = len(divs[0])
    items = []
    for _ in range(draw(st.integers(1, SMALL_ROWS))):
        cnt = draw(st.integers(0, 8))
        free = [draw(st.sampled_from([0, 250, 500, 999, 1000, 1200])) for _ in range(8)]
        after = [draw(st.sampled_from([0, -5, 250, 500, 1000])) for _ in range(8)]
        items.append((
            cnt, _value(draw, 0.0, 128000.0), _value(draw, 0.0, 1e6),
            _value(draw, 0.0, 128000.0), _value(draw, 0.0, 1e6), free,
            draw(st.one_of(st.none(), st.integers(0, 200))), _value(draw, 0.0, 10.0),
            float(draw(st.booleans())), float(draw(st.booleans())),
            _value(draw, 0.0, 8000.0), _value(draw, 0.0, 8000.0),
            draw(st.integers(-1, max(cnt, 1) - 1)), after, _value(draw, 0.0, 1.0),
            [draw(st.booleans()) for _ in range(shapes)]))
    return pv, divs, shapes, items


@needs_c
@settings(max_examples=300, deadline=None)
@given(case=_case())
def test_the_c_twin_writes_the_python_twins_bits(
        case: tuple[list[float], Any, int, list[tuple[Any, ...]]]) -> None:
    """Random and hostile inputs (NaN, infinities, signed zeros, over-full slots): the same
    values, NaNs in the same places and the same signs of every number (zeros included).
    Not the sign of a NaN: where two NaNs meet in a + or a *, IEEE 754 leaves it open which
    one the result carries, and the compiler may swap either operation's operands (this
    build's CPython gives the second's; the C twin built before session 11 differed in 3
    of 3,000 such cases, the one after in 11). No snapshot holds a NaN amount."""
    pv, divs, shapes, items = case
    out = []
    for twin in (rowkernel.fill_py, rowkernel.compiled):
        assert twin is not None
        x = np.full((len(items), WIDTH), 7.0, dtype=np.float32)
        q = np.full((len(items), 7), 7.0)
        with np.errstate(all="ignore"):
            try:
                twin(x, q, pv, NT, SCALES, divs, shapes, START, items)
            except (ValueError, OverflowError):  # math.floor(NaN or inf): C gives NaN, inf
                assert any(not math.isfinite(v) for v in _flat(items))
                return
        out.append((x, q))
    (xp, qp), (xc, qc) = out
    _same_bits(xc, xp)
    _same_bits(qc, qp)
    assert (xc[:, :START] == 7.0).all()  # the node block is the caller's


def _same_bits(got: np.ndarray, want: np.ndarray) -> None:
    """Equal values, NaNs in the same places, the same sign on every non-NaN entry."""
    np.testing.assert_array_equal(got, want)
    num = ~np.isnan(want)
    assert (np.signbit(got[num]) == np.signbit(want[num])).all()


def _flat(items: list[tuple[Any, ...]]) -> list[float]:
    return [v for it in items for v in it if isinstance(v, float)]


@needs_c
def test_the_c_twin_refuses_wrong_buffers_and_layouts() -> None:
    divs = _shape_divisors(default_workload(), 8)
    pv = [0.0] * (NT + 24)
    item = (4, 1.0, 1.0, 0.0, 0.0, [1000] * 8, None, 1.0, 0.0, 1.0, 0.0, 0.0, 0, [0] * 8,
            0.5, [True] * 8)
    c = rowkernel.compiled
    assert c is not None
    ok = (np.zeros((1, WIDTH), dtype=np.float32), np.zeros((1, 7)))
    c(*ok, pv, NT, SCALES, divs, 8, START, [item])
    bad = [
        ((np.zeros((1, WIDTH)), ok[1]), pv, START, [item]),  # float64 x
        ((ok[0], np.zeros((2, 7))), pv, START, [item]),  # q's rows
        (ok, pv[:-1], START, [item]),  # pod values
        (ok, pv, WIDTH - 10, [item]),  # the tail does not fit
        (ok, pv, START, [item[:-1]]),  # a short item
        (ok, pv, START, [(*item[:12], 8, *item[13:])]),  # slot past the slots
        (ok, pv, START, [(*item[:15], [True] * 3)]),  # access of the wrong size
    ]
    for bufs, p, start, items in bad:
        with pytest.raises((ValueError, IndexError, TypeError)):
            c(*bufs, p, NT, SCALES, divs, 8, start, items)


def test_pure_python_is_chosen_when_asked(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DSAN_PURE_PYTHON", "1")
    assert rowkernel._compiled() is None
