"""DSAN's logits to the sidecar's 0..max_score scores and winner in one pass
(dsan.policies.logitscale): the C twin gives exactly the reference's integers and first
maximum (quantize_logits, normalize, argmax) on random logits with ties at the quantization
threshold, signed zeros, non-finite values and spans past float64; arrays of another dtype or
layout go to numpy. Run with DSAN_PURE_PYTHON=1 for the reference alone."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dsan.policies import logitscale
from dsan.policies.base import normalize
from dsan.policies.logitscale import LOGIT_STEP, quantize_logits, scale_py

needs_c = pytest.mark.skipif(not logitscale.compiled, reason="dsan._logitscale not built")
HALF = LOGIT_STEP / 2


def _logits(rnd: np.random.Generator, m: int) -> np.ndarray:
    """Logits that hit every case: near-ties around the best's quantization threshold (one
    ulp either side), exact repeats, signed zeros, wide and narrow spans."""
    kind = rnd.integers(0, 5)
    if kind == 0:  # the shipped head's scale: FGD-like integers plus small tie-breaks
        x = rnd.integers(0, 60, m) + rnd.integers(0, 20, m) * 5e-4
    elif kind == 1:  # a few values only: many exact ties
        x = rnd.choice(rnd.normal(0, 3, 3), m)
    elif kind == 2:
        x = rnd.normal(0, 10.0 ** rnd.integers(-6, 6), m)
    elif kind == 3:  # signed zeros and tiny values
        x = rnd.choice([0.0, -0.0, 1e-300, -1e-300, 5e-324], m)
    else:
        x = rnd.normal(50, 1, m)
    x = np.asarray(x, dtype=np.float64)
    best = x.max()
    thr = best - HALF
    for _ in range(rnd.integers(0, 4)):  # at, just above and just below the threshold
        x[rnd.integers(0, m)] = rnd.choice([thr, np.nextafter(thr, np.inf),
                                            np.nextafter(thr, -np.inf), best])
    return x


def test_the_reference_is_quantize_normalize_argmax() -> None:
    x = np.array([1.0, 3.0, 3.0 - 0.4 * LOGIT_STEP, 2.0])
    out, best = scale_py(x, 100)
    assert out.tolist() == normalize(quantize_logits(x), 100).tolist() == [0, 100, 100, 50]
    assert best == 1
    assert scale_py(np.zeros(0), 100)[1] == -1


@needs_c
@settings(max_examples=300, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), m=st.integers(1, 300),
       max_score=st.sampled_from([100, 1, 0, 10, 1000, 7]))
def test_c_twin_gives_the_references_scores_and_winner(seed: int, m: int,
                                                       max_score: int) -> None:
    x = _logits(np.random.default_rng(seed), m)
    out, best = logitscale._scale_c(x, max_score)
    ref, ref_best = scale_py(x, max_score)
    assert out.dtype == ref.dtype == np.int64
    assert out.tolist() == ref.tolist()
    assert best == ref_best


@needs_c
@pytest.mark.filterwarnings("ignore:overflow encountered")  # normalize's span past float64
@pytest.mark.parametrize("x", [
    [1.0, np.nan, 2.0], [np.inf, 1.0], [-np.inf, 1.0, 2.0], [np.nan, np.nan],
    [1e308, -1e308, 0.0],  # a span past float64
    [4.0, 4.0, 4.0], [4.0], [-0.0, 0.0], [0.0, -0.0, 1.0],
    [2.0, 2.0 - 0.6 * HALF, 1.0],  # all but one quantized to the best
])
def test_c_twin_on_normalizes_own_cases(x: list[float]) -> None:
    a = np.array(x, dtype=np.float64)
    out, best = logitscale._scale_c(a, 100)
    ref, ref_best = scale_py(a, 100)
    assert out.tolist() == ref.tolist() and best == ref_best


@needs_c
def test_arrays_of_another_dtype_or_layout_go_to_numpy() -> None:
    x = np.arange(20, dtype=np.float64)[::-1] % 7
    for other in (x[::2], x.astype(np.float32), x.reshape(4, 5)[:, 0], x.tolist()):
        out, best = logitscale._scale_c(other, 100)
        ref, ref_best = scale_py(other, 100)
        assert out.tolist() == ref.tolist() and best == ref_best
    out, best = logitscale._scale_c(np.zeros(0), 100)
    assert out.size == 0 and best == -1


def test_pure_python_is_chosen_when_asked(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DSAN_PURE_PYTHON", "1")
    assert logitscale._compiled() is None
