"""DSAN's reply from the logits its pod class already holds: one pass, no head.

After a reply the sidecar's settle brings the pod class up to date for the candidates its
next request will most likely send (:meth:`dsan.model.headcache.HeadCache.prefetch`): every
row current, every logit computed under those candidates' extremes. That request then needs
no featurizing and no head, only the proof that what is held applies (each feasible
candidate's class row current, its logit computed from that row at the node's telemetry age,
and the candidates' extremes the ones the logits were computed under) and the scaling of
:func:`dsan.policies.logitscale.scale` over the feasible candidates. :func:`held_py` is the
reference, written with the general path's own pieces; ``dsan._heldreply`` its C twin (one
pass to check and gather, two to scale; ~25 Python calls fewer than the general path). Both
answer None whenever the general path must answer instead (an unknown name, a logit not
held, other extremes, nothing feasible, a NaN or a non-finite logit), and otherwise exactly
what it would: the scores of ``scale(logits of the feasible candidates)`` put back at their
positions, 0 for the others, and the position of the first feasible maximum.
``tests/unit/model/test_heldreply.py`` pins both to the general path.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np
import numpy.typing as npt

from dsan.policies.logitscale import LOGIT_STEP, scale_py
from dsan.twins import compiled_twin

__all__ = ["Held", "compiled", "held_py", "reply"]

F64 = npt.NDArray[np.float64]
I64 = npt.NDArray[np.int64]
BOOL = npt.NDArray[np.bool_]
#: (scores (m,), position of the first feasible maximum, number of feasible candidates)
Reply = tuple[I64, int, int]


class Held(NamedTuple):
    """What a pod class holds for its next request (:meth:`HeadCache.held`), all over the n
    nodes of the snapshot: the class's quantities (7, n) and row ticks, the tracker's
    epochs, and the logits with their rows' ticks and ages under the extremes ``lo`` (5, 1)
    and ``hi`` (7, 1); ``ages`` the snapshot's telemetry ages, None without telemetry."""

    quant: F64
    lo: F64
    hi: F64
    c_at: I64
    epoch: I64
    e_at: I64
    e_age: F64
    ages: F64 | None
    e_logit: F64


def held_py(h: Held, rows: I64, ok: BOOL, max_score: int) -> Reply | None:
    """The reply to candidates at ``rows`` (-1: an unknown name) whose feasibility is
    ``ok`` (n,), from what ``h`` holds; None when the general path must answer."""
    n = len(ok)
    if len(rows) == 0 or rows.min() < 0 or rows.max() >= n:
        return None
    feas = ok[rows]
    cand = rows[feas]
    if cand.size == 0:
        return None
    age = np.full(cand.size, np.inf) if h.ages is None else h.ages[cand]
    c_at = h.c_at[cand]
    if ((c_at < h.epoch[cand]).any() or (h.e_at[cand] != c_at).any()
            or not (h.e_age[cand] == age).all()):
        return None
    q = h.quant.take(cand, axis=1)
    if np.isnan(q).any() or not (np.array_equal(q[:5].min(axis=1), h.lo.ravel())
                                 and np.array_equal(q.max(axis=1), h.hi.ravel())):
        return None
    logits = h.e_logit[cand]
    if not np.isfinite(logits).all():
        return None
    scores, best = scale_py(logits, max_score, LOGIT_STEP)
    out = np.zeros(len(rows), dtype=np.int64)
    out[feas] = scores
    return out, int(np.flatnonzero(feas)[best]), int(cand.size)


def _held_c(h: Held, rows: I64, ok: BOOL, max_score: int) -> Reply | None:
    out = np.empty(len(rows), dtype=np.int64)
    try:
        got = _C.held(rows, ok, h.quant, h.lo, h.hi, h.c_at, h.epoch, h.e_at, h.e_age, h.ages,
                      h.e_logit, LOGIT_STEP / 2, max_score, out)
    except TypeError:  # another dtype or layout: the reference
        return held_py(h, rows, ok, max_score)
    if got is None:
        return None
    return out, got[0], got[1]


def _compiled() -> Any:
    """``dsan._heldreply``, or None (:func:`dsan.twins.compiled_twin`)."""
    return compiled_twin("dsan._heldreply")


_C = _compiled()
compiled = _C is not None
#: The twin :meth:`dsan.policies.dsan.DSANScorer.score_held` calls.
reply = _held_c if compiled else held_py
