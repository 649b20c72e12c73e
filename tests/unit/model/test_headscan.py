"""dsan.model.headscan's twins (numpy and dsan/_headscan.c) give the same bits: stale rows, a
class's followed candidates and their stale rows, candidate extremes (NaN and signed zeros
included: the C one defers to numpy there), and the held-logit lookup; arrays of another
dtype or layout go to numpy. The head cache served by either twin stays pinned to the model
by test_serving_headcache.py (run with DSAN_PURE_PYTHON=1 for the numpy twins); here both
serve the same cached head."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dsan.model import headscan

needs_c = pytest.mark.skipif(not headscan.compiled, reason="dsan._headscan not built")
C = (headscan._stale_c, headscan._extremes_c, headscan._lookup_c)
PY = (headscan.stale_py, headscan.extremes_py, headscan.lookup_py)


def _world(seed: int, n: int, m: int, odd: bool) -> dict[str, Any]:
    rng = np.random.default_rng(seed)
    # few distinct values: ties at the extremes, as the real quantities have
    quant = rng.choice([-407.5, -1.0, 0.25, 0.6, 3.0], size=(7, n))
    if odd:  # NaN, signed zeros and infinities where the extremes are taken
        for v in (np.nan, 0.0, -0.0, np.inf, -np.inf):
            quant[rng.integers(7), rng.integers(n)] = v
    at = rng.integers(0, 4, n)
    ages = None if rng.random() < 0.3 else rng.choice([0.5, 9.0, np.inf, np.nan], n)
    e_at = np.where(rng.random(n) < 0.7, at, at - 1)
    e_age = (np.full(n, np.inf) if ages is None
             else np.where(rng.random(n) < 0.7, ages, 1.0)).astype(np.float64)
    nodes = rng.integers(-n, n, m) if odd else rng.permutation(n)[:m]
    return dict(quant=quant, at=at, epoch=at + rng.integers(0, 2, n), ages=ages, e_at=e_at,
                e_age=e_age, e_logit=rng.standard_normal(n), nodes=nodes.astype(np.int64))


def _run(twins: tuple[Any, ...], w: dict[str, Any]) -> list[bytes]:
    stale, extremes, lookup = twins
    nodes = w["nodes"]
    got = [stale(nodes, w["at"], w["epoch"])]
    if len(nodes):
        got += list(extremes(w["quant"], nodes))
    got += list(lookup(nodes, w["at"], w["e_at"], w["e_age"], w["ages"],
                       w["e_logit"]))
    return [a.tobytes() + str(a.shape).encode() for a in got]


@needs_c
@settings(max_examples=200, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), n=st.integers(1, 40), m=st.integers(0, 60),
       odd=st.booleans())
def test_twins_give_the_same_bits(seed: int, n: int, m: int, odd: bool) -> None:
    w = _world(seed, n, m if odd else min(m, n), odd)
    assert _run(C, w) == _run(PY, w)


@needs_c
def test_the_c_extremes_defer_to_numpy_on_nan_and_zero_extremes() -> None:
    nodes = np.arange(4, dtype=np.int64)
    lo, hi = np.empty((5, 1)), np.empty((7, 1))
    q = np.ones((7, 4))
    assert headscan._C.extremes(q, nodes, lo, hi)
    for v in (np.nan, 0.0, -0.0):
        bad = q.copy()
        bad[2, 1] = v  # a NaN, or the minimum of row 2
        assert not headscan._C.extremes(bad, nodes, lo, hi)
        got, want = headscan._extremes_c(bad, nodes), headscan.extremes_py(bad, nodes)
        assert [a.tobytes() for a in got] == [a.tobytes() for a in want]
    assert not headscan._C.extremes(q, nodes[:0], lo, hi)  # no node: numpy raises there


@needs_c
def test_other_dtypes_and_layouts_take_the_numpy_twin() -> None:
    w = _world(3, 20, 12, False)
    for k, v in [("nodes", w["nodes"].astype(np.int32)),
                 ("quant", np.asfortranarray(w["quant"])),
                 ("at", w["at"][::-1][::-1].astype(np.int32))]:
        assert _run(C, {**w, k: v}) == _run(PY, {**w, k: v})


@needs_c
def test_out_of_range_nodes_raise_as_in_numpy() -> None:
    w = _world(4, 10, 5, False)
    w["nodes"] = np.array([1, 10], dtype=np.int64)
    for twins in (C, PY):
        with pytest.raises(IndexError):
            twins[0](w["nodes"], w["at"], w["epoch"])
        with pytest.raises(IndexError):
            twins[1](w["quant"], w["nodes"])
        with pytest.raises(IndexError):
            twins[2](w["nodes"], w["at"], w["e_at"], w["e_age"], w["ages"], w["e_logit"])


@needs_c
def test_many_candidates_take_numpys_extremes(monkeypatch: pytest.MonkeyPatch) -> None:
    w = _world(5, 40, 30, False)
    calls: list[int] = []

    def numpy_twin(quant: Any, nodes: Any) -> Any:
        calls.append(len(nodes))
        return quant, quant

    monkeypatch.setattr(headscan, "extremes_py", numpy_twin)
    monkeypatch.setattr(headscan, "C_EXTREMES_MAX", 29)
    headscan._extremes_c(w["quant"], w["nodes"])
    monkeypatch.setattr(headscan, "C_EXTREMES_MAX", 30)
    headscan._extremes_c(w["quant"], w["nodes"])
    assert calls == [30]


@needs_c
@settings(max_examples=200, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), n=st.integers(1, 12), m=st.integers(1, 40),
       odd=st.booleans(), tel=st.booleans())
def test_request_rows_twins_give_the_same_columns_and_dead_rows(
        seed: int, n: int, m: int, odd: bool, tel: bool) -> None:
    """The head's request columns (the few-row head's, and the many-row head's when built):
    ranks at and beyond the extremes, equal extremes, NaN quantities and ages, ages past the
    hour, rows cached dead or not."""
    rng = np.random.default_rng(seed)
    q = rng.choice([-1.0, 0.0, 0.5, 1.0, 2.0], size=(7, m))
    lo = rng.choice([-1.0, 0.0, 0.5], size=(5, 1))
    hi = np.concatenate([lo + rng.choice([0.0, 1.0, 2.0], size=(5, 1)),
                         rng.choice([0.5, 1.0, 2.0], size=(2, 1))])
    ages = rng.choice([0.0, 60.0, 7200.0, np.inf, np.nan], m)
    if odd:
        q[rng.integers(7), rng.integers(m)] = np.nan
        lo[rng.integers(5), 0] = np.nan
    capped = [(a if a < 1e9 else 1e9) if a == a else 0.0 for a in ages.tolist()]
    tel_age = np.log1p(capped) / np.log1p(3600.0)
    hib = rng.random(5) < 0.5
    present = rng.choice([0.0, 1.0], n).astype(np.float32)
    dead = rng.random(n) < 0.7
    nodes = rng.choice(n, size=m).astype(np.int64)
    args = (q, lo, hi, hib, tel_age, ages, tel, present, dead, nodes)
    (xc, dc), (xp, dp) = headscan._request_rows_c(*args), headscan.request_rows_py(*args)
    assert xc.dtype == xp.dtype == np.float32 and xc.tobytes() == xp.tobytes()
    assert dc.dtype == dp.dtype == np.bool_ and dc.tolist() == dp.tolist()


def test_pure_python_is_chosen_when_asked(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DSAN_PURE_PYTHON", "1")
    assert headscan._compiled() is None


def _class_head(seed: int, n: int, m: int, k: int, h2: int, with_z: bool, dead_rate: float,
                telemetry: bool, odd: bool) -> tuple[tuple[Any, ...], Any]:
    """head_logits' arguments on a random class: quantities with ties at the extremes,
    ages fresh, past the hour, infinite, NaN or negative (a skewed clock), rows cached dead
    or not, candidates with repeats when ``odd``; and the z arrays (None without z)."""
    rng = np.random.default_rng(seed)

    def f32(*shape: int) -> Any:
        return rng.standard_normal(shape).astype(np.float32)

    quant = rng.choice([-1.0, 0.0, 0.5, 1.0, 2.0], size=(7, n))
    nodes = (rng.choice(n, size=m) if odd else rng.permutation(np.arange(m) % n)).astype(
        np.int64)
    q = quant.take(nodes, axis=1)
    lo, hi = q[:5].min(axis=1, keepdims=True), q.max(axis=1, keepdims=True)
    ages = (rng.choice([0.0, 3.5, 7200.0, np.inf, np.nan, -0.5], n) if odd
            else rng.choice([0.0, 3.5, 60.0], n)) if telemetry else None
    todo = np.sort(rng.choice(m, size=k, replace=False)).astype(np.int64)
    b1, w2 = f32(h2), f32(h2)
    z = (f32(n) * 4, f32(n, 9), f32(n, h2), f32(n, h2)) if with_z else None
    args = (nodes, todo, quant, lo, hi, rng.random(5) < 0.5, ages, float(np.log1p(3600.0)),
            telemetry, rng.choice([0.0, 1.0], n).astype(np.float32), rng.random(n) < dead_rate,
            f32(9, h2 + 1), f32(n, h2 + 1), f32(h2, h2), b1, w2,
            float(np.maximum(b1, 0.0) @ w2), float(rng.standard_normal()),
            rng.integers(0, 9, n), rng.standard_normal(n), np.full(n, -2, dtype=np.int64),
            np.full(n, np.nan), np.zeros(m))
    return args, z


def _head_logits(twin: Any, args: tuple[Any, ...], z: Any) -> tuple[Any, ...]:
    """Run ``twin`` on fresh copies of the arrays it writes; (e_logit, e_at, e_age, out)."""
    e_logit, e_at, e_age, out = (a.copy() for a in args[19:23])
    twin(*args[:19], e_logit, e_at, e_age, out, z)
    return e_logit, e_at, e_age, out


@needs_c
@settings(max_examples=300, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), n=st.integers(1, 12), m=st.integers(1, 30),
       h2=st.sampled_from([2, 16, 64]), with_z=st.booleans(),
       dead_rate=st.sampled_from([0.0, 0.5, 1.0]), telemetry=st.booleans(), odd=st.booleans(),
       data=st.data())
def test_head_logits_twins_agree(seed: int, n: int, m: int, h2: int, with_z: bool,
                                 dead_rate: float, telemetry: bool, odd: bool,
                                 data: st.DataObject) -> None:
    """The whole head in one call: the same rows written (the class tick and the age
    exactly, NaN ages included), the logits to float32 rounding (the MLP's sums run in
    another order than BLAS's), a dead row without z exactly, every other row untouched,
    and ``out`` read back from what was kept (repeated candidates included)."""
    k = data.draw(st.integers(1, m))
    args, z = _class_head(seed, n, m, k, h2, with_z, dead_rate, telemetry, odd)
    got = _head_logits(headscan._head_logits_c, args, z)
    ref = _head_logits(headscan.head_logits_py, args, z)
    nodes, todo = args[0], args[1]
    rows = np.unique(nodes[todo])
    untouched = np.setdiff1d(np.arange(n), rows)
    for g, r, before in zip(got[:3], ref[:3], args[19:22], strict=True):
        assert g[untouched].tobytes() == r[untouched].tobytes() == before[untouched].tobytes()
    assert got[1].tobytes() == ref[1].tobytes()
    assert got[2].tobytes() == ref[2].tobytes()
    np.testing.assert_allclose(got[0][rows], ref[0][rows], rtol=2e-5, atol=2e-5 * h2)
    for e_logit, out in (got[0], got[3]), (ref[0], ref[3]):
        assert out[todo].tobytes() == e_logit[nodes[todo]].tobytes()
        rest = np.setdiff1d(np.arange(m), todo)
        assert (out[rest] == 0.0).all()
    if not with_z:  # a dead row is relu(b1) . w2 + its linear term in both, exactly
        _, dead = headscan.request_rows_py(
            args[2].take(nodes[todo], axis=1), args[3], args[4], args[5],
            _tel_age(args[6], nodes[todo]), _age(args[6], nodes[todo]), args[8], args[9],
            args[10], nodes[todo])
        d = nodes[todo][dead]
        assert got[0][d].tobytes() == ref[0][d].tobytes()


def _age(ages: Any, rows: Any) -> Any:
    return np.full(len(rows), np.inf) if ages is None else ages[rows]


def _tel_age(ages: Any, rows: Any) -> Any:
    age = _age(ages, rows)
    return np.log1p(np.where(age == age, np.minimum(age, 1e9), 0.0)) / np.log1p(3600.0)


@needs_c
def test_head_logits_of_another_layout_goes_to_numpy() -> None:
    args, z = _class_head(4, 10, 8, 5, 16, False, 0.5, True, False)
    strided = list(args)
    strided[13] = np.asfortranarray(args[13])  # w1g
    got = _head_logits(headscan._head_logits_c, tuple(strided), z)
    ref = _head_logits(headscan.head_logits_py, tuple(strided), z)
    assert [a.tobytes() for a in got] == [a.tobytes() for a in ref]  # numpy computed both


@needs_c
def test_head_logits_refuses_out_of_range_candidates_before_writing() -> None:
    args, _ = _class_head(5, 10, 8, 5, 16, False, 0.0, True, False)
    bad = list(args)
    bad[0] = args[0].copy()
    bad[0][args[1][-1]] = 10  # the last todo entry names a node past n
    e_logit = args[19].copy()
    with pytest.raises(IndexError):
        headscan._C.head_logits(*bad[:19], e_logit, *args[20:23], None, None, None, None)
    assert e_logit.tobytes() == args[19].tobytes()


def _followed_world(seed: int, n: int, m: int, dup: bool) -> dict[str, Any]:
    rng = np.random.default_rng(seed)
    last = rng.permutation(n)[:m] if not dup else rng.integers(0, n, m)
    seen = int(rng.integers(0, 4))
    epoch = rng.integers(0, 6, n)
    return dict(last=last.astype(np.int64), epoch=epoch.astype(np.int64), seen=seen,
                ok=rng.random(n) < 0.6, at=(epoch - rng.integers(0, 2, n)).astype(np.int64))


@needs_c
@settings(max_examples=300, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), n=st.integers(1, 40), m=st.integers(0, 40),
       dup=st.booleans())
def test_followed_twins_give_the_same_candidates_and_rows(seed: int, n: int, m: int,
                                                          dup: bool) -> None:
    """The one-pass C ``followed`` and its numpy twin: the same next candidates (``last``
    itself when nothing moved), the same sorted unique stale rows, or None for both."""
    w = _followed_world(seed, n, min(m, n) if not dup else m, dup)
    args = (w["last"], w["epoch"], w["seen"], w["ok"], w["at"])
    nodes_c, rows_c = headscan._followed_c(*args)
    nodes_py, rows_py = headscan.followed_py(*args)
    assert (nodes_c is w["last"]) == (nodes_py is w["last"])
    assert nodes_c.tolist() == nodes_py.tolist()
    assert (rows_c is None) == (rows_py is None)
    if rows_py is not None:
        assert rows_c is not None and rows_c.tolist() == rows_py.tolist()


def test_followed_by_hand() -> None:
    """Nodes 0..5, last [4, 1, 2], changed since tick 1: 1 (no longer fits: dropped), 3 (now
    fits: appended), 4 (still fits: kept, and its row is stale), 5 (does not fit: stays out)."""
    epoch = np.array([0, 2, 1, 2, 2, 3], dtype=np.int64)
    ok = np.array([True, False, True, True, True, False])
    at = np.array([0, 0, 1, 0, 1, 0], dtype=np.int64)
    last = np.array([4, 1, 2], dtype=np.int64)
    for fn in (headscan.followed, headscan.followed_py):
        nodes, rows = fn(last, epoch, 1, ok, at)
        assert nodes.tolist() == [4, 2, 3]
        assert rows is not None and rows.tolist() == [3, 4]
        # nothing changed since tick 3: the same object, and no stale row among them
        same, none = fn(last, epoch, 3, ok, np.maximum(at, epoch))
        assert same is last and none is None


@needs_c
def test_followed_defers_to_numpy_on_rows_out_of_range_and_other_dtypes() -> None:
    epoch = np.array([2, 2, 2], dtype=np.int64)
    ok = np.ones(3, dtype=bool)
    at = np.zeros(3, dtype=np.int64)
    neg = np.array([-1, 0], dtype=np.int64)  # numpy wraps -1 to row 2
    assert [a.tolist() for a in headscan._followed_c(neg, epoch, 0, ok, at)] == [
        a.tolist() for a in headscan.followed_py(neg, epoch, 0, ok, at)]
    i32 = np.array([0, 1], dtype=np.int32)
    nodes, rows = headscan._followed_c(i32, epoch, 0, ok, at)
    assert nodes.tolist() == [0, 1, 2] and rows is not None and rows.tolist() == [0, 1, 2]
