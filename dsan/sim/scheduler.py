"""One kube-scheduler cycle over a :class:`ClusterSnapshot` (``schedule_one.go``): Filter,
Score, select, bind. A single feasible node is taken unscored; score ties go to a uniformly
random best node (kube-scheduler's ``selectHost``) or, given ``tie_rank``, to the lowest rank.
A pod no node can host is reported, never queued.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from dsan.core.filtering import allocate, feasible_nodes
from dsan.core.snapshot import ClusterSnapshot, PodSpec
from dsan.policies.base import Scorer

Placement = tuple[int, tuple[int, ...]]


def name_rank(names: Sequence[str]) -> np.ndarray:
    """The ``tie_rank`` under which the lowest node name wins a tie (the FGD simulator's and
    the DSAN sidecar's rule)."""
    rank = np.empty(len(names), dtype=np.int64)
    rank[np.argsort(np.array(names))] = np.arange(len(names))
    return rank


def select_node(pod: PodSpec, snap: ClusterSnapshot, scorer: Scorer, rng: np.random.Generator,
                nodes: np.ndarray | None = None, tie_rank: np.ndarray | None = None) -> int | None:
    """The node ``pod`` goes to, or ``None`` when no node is feasible. Does not bind."""
    cand = feasible_nodes(pod, snap) if nodes is None else nodes
    if cand.size == 0:
        return None
    if cand.size == 1:
        return int(cand[0])
    scores = np.asarray(scorer.score(pod, snap, cand), dtype=np.float64)
    if scores.shape != cand.shape:
        raise ValueError(f"scorer {scorer.name} returned {scores.shape} scores for {cand.size} "
                         "nodes")
    scores = np.where(np.isfinite(scores), scores, -np.inf)
    best = np.flatnonzero(scores == scores.max())
    if best.size == 1:
        pick = best[0]
    elif tie_rank is not None:
        pick = best[np.argmin(tie_rank[cand[best]])]
    else:
        pick = best[rng.integers(best.size)]
    return int(cand[pick])


def schedule_one(pod: PodSpec, snap: ClusterSnapshot, scorer: Scorer, rng: np.random.Generator,
                 tie_rank: np.ndarray | None = None) -> Placement | None:
    """Filter, score, select and bind ``pod``; ``None`` if it fits nowhere (state untouched)."""
    node = select_node(pod, snap, scorer, rng, tie_rank=tie_rank)
    if node is None:
        return None
    gpus = scorer.select_gpus(pod, snap, node)
    allocate(snap, pod, node, gpus)
    scorer.on_bind(pod, snap, node, gpus)
    return node, gpus
