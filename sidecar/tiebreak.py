"""One node at the top of every reply: ties go to the lowest node name.

Why the sidecar breaks its own ties. Given equal totals, kube-scheduler picks at random
(``selectHost``), and the default profile's NodeResourcesFit (LeastAllocated) and
NodeResourcesBalancedAllocation scores, where they are kept, send the pod to the emptiest of
the nodes the policy tied. Policies built on fragmentation (FGD, and DSAN's openb stage on
top of it) tie often: a whole-GPU pod leaves every node with whole free GPUs equally
unfragmented, so in ``make cluster-demo`` (50 identical 8-GPU nodes) the shipped DSAN gave
47.7 of the 50 candidates the top score on average, and the dsan-scheduler placed the pods
as the default scheduler did. What those policies were measured with is a fixed node order
for ties (the FGD protocol, ``dsan/sim/protocol.py``). openb ``default``, seeds 42-44,
unallocated GPU % with ties to the seed's node permutation / the lowest name / random
(session 16): FGD 4.68 / 4.85 / 10.19, DSAN 4.60 / 4.77 / 5.18.

So a reply keeps the top score for one node, the lowest name among the tied ones, and gives
the other tied nodes one point less; nothing else changes, and the engine assumes that node.
Names are what kube-scheduler and the sidecar agree on across restarts (rows are the order
the informer happened to list nodes in).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt

from dsan.twins import compiled_twin

__all__ = ["NameRank", "compiled", "lowest_name_wins", "lowest_name_wins_py"]

I64 = npt.NDArray[np.int64]


class NameRank:
    """Each row's position in the node names' sorted order, for one node table (rebuilt
    when the table changes: O(n log n) then, O(1) per reply)."""

    def __init__(self) -> None:
        self._names: list[str] | None = None
        self._rank: I64 = np.zeros(0, dtype=np.int64)

    def of(self, names: list[str]) -> I64:
        """The ranks of ``names`` (a published snapshot's row names, replaced, never
        mutated, when the table changes)."""
        if names is not self._names:
            rank = np.empty(len(names), dtype=np.int64)
            rank[np.argsort(np.array(names, dtype=object), kind="stable")] = np.arange(len(names))
            self._names, self._rank = names, rank
        return self._rank


def lowest_name_wins_py(
    scores: I64, best: int, rows: I64, rank: I64
) -> tuple[I64, int]:
    """``(scores, best)`` with a single top score: among the positions scored like ``best``,
    the lowest name (``rank[rows]``, :class:`NameRank`) keeps it and the others get one less;
    of two positions of one node, the first. ``scores`` is never written: a tie returns a new
    array (a reply may hand out one the scorer keeps). Only tied positions' rows are read,
    and they are known nodes (unknown and infeasible ones score 0, the top is >= 1)."""
    if best < 0:
        return scores, best
    top = scores[best]
    if top <= 0:  # min-max scaling gives the top max_score >= 1; nothing to demote below 0
        return scores, best
    eq = scores == top
    tied = eq.nonzero()[0]
    if len(tied) < 2:
        return scores, best
    win = int(tied[np.argmin(rank[rows[tied]])])
    out = scores - eq  # the tied positions one less, in one pass
    out[win] = top
    return out, win


def _lowest_name_wins_c(
    scores: I64, best: int, rows: I64, rank: I64
) -> tuple[I64, int]:
    try:
        win: int = _C.tie(scores, best, rows, rank)
    except TypeError:  # not C-contiguous int64 arrays: numpy
        return lowest_name_wins_py(scores, best, rows, rank)
    if win == -1:
        return scores, best
    if win < 0:  # a tied row outside the table: numpy's IndexError says so
        return lowest_name_wins_py(scores, best, rows, rank)
    out = np.empty_like(scores)
    _C.demote(scores, win, out)
    return out, win


def _compiled() -> Any:
    """``dsan._tiebreak``, or None (:func:`dsan.twins.compiled_twin`)."""
    return compiled_twin("dsan._tiebreak")


_C = _compiled()
compiled = _C is not None
#: The twin the engine calls: the C one (``dsan/_tiebreak.c``) when built and
#: ``DSAN_PURE_PYTHON`` is unset; ``tests/unit/sidecar/test_tiebreak.py`` pins them together.
lowest_name_wins = _lowest_name_wins_c if compiled else lowest_name_wins_py
