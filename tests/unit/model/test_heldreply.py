"""DSAN's reply from the logits a pod class holds (dsan.model.heldreply): exactly the general
path's scaled reply (``DSANScorer.score_scaled`` over the feasible candidates, put back at
their positions), or None; both twins, on random snapshots through assumptions and
prefetches, with candidate lists that rotate, shrink, repeat and name unknown rows."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest

from dsan.features import default_workload, fgd_select_gpus
from dsan.filtering import allocate, feasible
from dsan.model import heldreply
from dsan.model.heldreply import Held, Reply
from dsan.model.serving import ServingModel
from dsan.policies.dsan import DSANScorer
from dsan.snapshot import ClusterSnapshot, PodSpec
from tests.support.headworld import PODS, random_residual, random_snapshot

Twin = Callable[[Held, np.ndarray, np.ndarray, int], Reply | None]
TWINS: list[Twin] = [heldreply.held_py]
if heldreply.compiled:
    TWINS.append(heldreply._held_c)


def _general(scorer: DSANScorer, pod: PodSpec, snap: ClusterSnapshot, rows: np.ndarray,
             ok: np.ndarray, max_score: int) -> Reply | None:
    """The engine's general path for known rows: score_scaled over the feasible ones."""
    if (rows < 0).any() or not ok[rows].any():
        return None
    feas = ok[rows]
    at = np.flatnonzero(feas)
    scores, best = scorer.score_scaled(pod, snap, rows[at], max_score)
    out = np.zeros(len(rows), dtype=np.int64)
    out[at] = scores
    return out, int(at[best]), len(at)


def _held(scorer: DSANScorer, twin: Twin, pod: PodSpec, snap: ClusterSnapshot,
          rows: np.ndarray, ok: np.ndarray, max_score: int) -> Reply | None:
    h = scorer.serving.held(pod, snap)
    return None if h is None else twin(h, rows, ok, max_score)


def _same(a: Reply | None, b: Reply | None) -> None:
    assert a is not None and b is not None
    assert a[0].tolist() == b[0].tolist() and a[1:] == b[1:]


@pytest.mark.parametrize("twin", TWINS, ids=lambda t: t.__name__)
@pytest.mark.parametrize("which", range(len(PODS)))
def test_a_held_reply_is_the_general_reply(twin: Twin, which: int) -> None:
    pod = PODS[which]
    snap = random_snapshot(40, seed=30 + which)
    scorer = DSANScorer(ServingModel(random_residual(8), default_workload()))
    rng = np.random.default_rng(which)
    every = np.arange(len(snap), dtype=np.int64)
    hits = 0
    for step in range(8):
        ok = feasible(pod, snap)
        if not ok.any():
            break
        rows = np.roll(every, 3 * step)  # every node, as kube-scheduler's list rotates
        got = _held(scorer, twin, pod, snap, rows, ok, 100)
        want = _general(scorer, pod, snap, rows, ok, 100)
        if step > 0:  # after a prefetch: the next request's candidates are held
            _same(got, want)
            hits += 1
        elif got is not None:
            _same(got, want)
        # other lists on the same state: held (then equal) or None
        sub = rng.permutation(every)[: rng.integers(1, len(every))]
        dup = np.concatenate([rows, rows[:5]])
        ghost = rows.copy()
        ghost[rng.integers(len(rows))] = -1
        for other in (sub, dup, ghost):
            g = _held(scorer, twin, pod, snap, other, ok, 100)
            if g is not None:
                _same(g, _general(scorer, pod, snap, other, ok, 100))
        assert _held(scorer, twin, pod, snap, ghost, ok, 100) is None
        best = int(want[1]) if want is not None else -1
        node = int(rows[best])
        allocate(snap, pod, node, fgd_select_gpus(pod, snap, node, scorer.workload))
        scorer.after_assume(pod, snap, node)
    assert hits >= 3


@pytest.mark.parametrize("twin", TWINS, ids=lambda t: t.__name__)
def test_what_is_not_held_defers(twin: Twin) -> None:
    """None, never a wrong answer: a row changed since the prefetch, another telemetry
    age, a NaN age, nothing feasible."""
    pod = PODS[0]
    snap = random_snapshot(30, seed=41)
    scorer = DSANScorer(ServingModel(random_residual(8), default_workload()))
    every = np.arange(len(snap), dtype=np.int64)
    ok = feasible(pod, snap)
    _general(scorer, pod, snap, every, ok, 100)
    h = scorer.serving.held(pod, snap)
    assert h is not None
    _same(twin(h, every, ok, 100), _general(scorer, pod, snap, every, ok, 100))
    ages = snap.telemetry_age_s
    assert ages is not None
    r = int(np.flatnonzero(ok & np.isfinite(ages))[0])
    for value in (ages[r] + 1.0, np.nan):
        moved = ages.copy()
        moved[r] = value
        assert twin(h._replace(ages=moved), every, ok, 100) is None
    assert twin(h, every, np.zeros_like(ok), 100) is None
    snap.cpu_used[r] += 1000.0  # a write the tracker finds at the next sync
    snap.version += 1
    h2 = scorer.serving.held(pod, snap)
    assert h2 is None or twin(h2, every, feasible(pod, snap), 100) is None


@pytest.mark.skipif(not heldreply.compiled, reason="dsan._heldreply not built (no C compiler)")
def test_the_twins_agree_on_random_holds() -> None:
    """Random holds (mostly not applying): the C twin answers as the reference, None for
    None, on float64 logits with near ties, signed zeros among the extremes and NaNs."""
    rng = np.random.default_rng(7)
    for _ in range(300):
        n = int(rng.integers(1, 12))
        quant = rng.choice([0.0, -0.0, 1.0, 2.5, np.nan], size=(7, n), p=[.3, .2, .2, .2, .1])
        rows = rng.integers(-1, n, size=int(rng.integers(1, 15)))
        ok = rng.random(n) < 0.7
        known = rows[(rows >= 0) & ok[np.clip(rows, 0, None)]]
        q = quant.take(known, axis=1) if known.size else quant[:, :1]
        lo, hi = q[:5].min(axis=1, keepdims=True), q.max(axis=1, keepdims=True)
        c_at = rng.integers(0, 3, n)
        e_at = np.where(rng.random(n) < 0.9, c_at, c_at + 1)
        ages = rng.choice([0.0, 5.0, np.inf], size=n)
        e_age = np.where(rng.random(n) < 0.95, ages, ages + 1)
        logit = rng.choice([1.0, 1.00004, 0.5, -3.0, np.inf], size=n, p=[.3, .2, .2, .25, .05])
        h = Held(np.ascontiguousarray(quant), lo, hi, c_at, np.zeros(n, dtype=np.int64),
                 e_at, e_age, ages if rng.random() < 0.8 else None, logit)
        if h.ages is None:
            h = h._replace(e_age=np.full(n, np.inf))
        for max_score in (10, 100):
            a = heldreply.held_py(h, rows, ok, max_score)
            b = heldreply._held_c(h, rows, ok, max_score)
            assert (a is None) == (b is None)
            if a is not None and b is not None:
                _same(a, b)
