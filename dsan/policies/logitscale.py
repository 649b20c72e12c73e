"""DSAN's logits to a choice: the resolution it chooses at, and the sidecar's 0..max_score
scores with their winner in one pass.

:func:`quantize_logits` is the choice's resolution (see :data:`LOGIT_STEP`). The sidecar's
reply then min-max scales the quantized logits onto 0..max_score
(:func:`dsan.policies.base.normalize`) and takes the first maximum: three numpy passes plus a
dozen small calls (~9 us of a reply at 100 nodes, ~16 us at 1,000). :func:`scale` does all
three at once. Two twins, as in :mod:`dsan.model.headscan`: :func:`scale_py` (the
reference, literally quantize, normalize, argmax) and ``dsan._logitscale`` (C, one loop for
the extremes and one for the scores, built by ``pip install -e .`` when a compiler is
there). The C loop does the same float64 operations in the same order (subtract, multiply by
``max_score / span``, round half to even, truncate), so both give the same integers; it
defers to the reference on a non-finite logit or a span past float64 (``normalize``'s own
cases) and on arrays of another dtype or layout. :data:`scale` is the C one when built and
``DSAN_PURE_PYTHON`` is unset; ``tests/unit/policies/test_logitscale.py`` pins the twins to
each other.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt

from dsan.policies.base import normalize
from dsan.twins import compiled_twin

__all__ = ["LOGIT_STEP", "compiled", "quantize_logits", "scale", "scale_py"]

#: The resolution DSAN chooses at: logits within half a step of the best tie with it. On
#: openb the shipped head is FGD's integer score plus linear tie-breaks whose smallest
#: intended step is 0.0005 (``gpu_max_free`` -0.5 per 1/1000 of a GPU); the float32 model
#: scores rows with identical weighted features up to a few ulps apart (one ulp is 3.8e-6 at
#: a logit of 50, 7.6e-6 at 100), which broke exact FGD + skip ties by row-dependent noise
#: instead of FGD's node order (docs/results/dsan_openb.md, session 5: 19 of 9,160 decisions
#: on cpu250 seed 7). Half a step, 5e-5, sits well above that noise and 10x below the
#: smallest tie-break.
LOGIT_STEP = 1e-4


def quantize_logits(logits: npt.ArrayLike, step: float = LOGIT_STEP) -> npt.NDArray[np.float64]:
    """``logits`` with every finite one within ``step / 2`` of the best set to the best.

    The choice is that of a grid of ``step`` anchored at the best logit; every other logit is
    left as the model gave it (explanations and the sidecar's scores of the other nodes read
    them). Anchored at the best, not at 0: rounding to a fixed grid splits two tied logits
    whenever their exact value sits on a rounding boundary (the shipped weights put
    0.05 x k/8 = 0.00625 k, odd k, exactly on 1e-4's). Order is kept; non-finite entries are
    left as they are.
    """
    s = np.array(logits, dtype=np.float64)
    if s.size == 0:
        return s
    half = step / 2
    best = s.max()
    if np.isfinite(best):  # the usual case (a NaN makes the max NaN; -inf never comes near)
        s[s >= best - half] = best
        return s
    finite = np.isfinite(s)
    if finite.any():
        best = s[finite].max()
        s[finite & (s >= best - half)] = best
    return s


def scale_py(logits: npt.ArrayLike, max_score: int,
             step: float = LOGIT_STEP) -> tuple[npt.NDArray[np.int64], int]:
    """``(scores, best)``: ``normalize(quantize_logits(logits, step), max_score)`` and the
    position of its first maximum (-1 for no logits)."""
    out = normalize(quantize_logits(logits, step), max_score)
    return out, int(out.argmax()) if out.size else -1


def _scale_c(logits: npt.ArrayLike, max_score: int,
             step: float = LOGIT_STEP) -> tuple[npt.NDArray[np.int64], int]:
    out = np.empty(np.shape(logits), dtype=np.int64)
    try:
        best: int = _C.scale(logits, step / 2, max_score, out)
    except TypeError:  # not a C-contiguous 1-d float64 array: numpy
        return scale_py(logits, max_score, step)
    if best < 0:  # a non-finite logit, no logits or a span past float64: normalize decides
        return scale_py(logits, max_score, step)
    return out, best


def _compiled() -> Any:
    """``dsan._logitscale``, or None (:func:`dsan.twins.compiled_twin`)."""
    return compiled_twin("dsan._logitscale")


_C = _compiled()
compiled = _C is not None
#: The twin the sidecar's reply calls (``DSANScorer.score_scaled``).
scale = _scale_c if compiled else scale_py
