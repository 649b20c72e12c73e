"""One scheduling decision, frozen for explaining: the pod, the cluster, the candidates, the
served scorer's scores, the node that won and the runner-up."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from dsan.core.filtering import feasible_nodes
from dsan.core.snapshot import F64, I64, ClusterSnapshot, PodSpec
from dsan.explain.explanation import Explanation
from dsan.policies.base import Scorer
from dsan.sim.scheduler import select_node


class ExplainError(ValueError):
    """A decision that cannot be explained (no candidates, unknown policy, bad index)."""


@dataclass(frozen=True)
class Decision:
    pod: PodSpec
    snap: ClusterSnapshot
    scorer: Scorer
    #: Feasible node indices into ``snap`` and the scorer's score of each.
    candidates: I64
    scores: F64
    #: Positions into ``candidates`` of the winner and of the best other node.
    chosen: int
    runner_up: int
    index: int | None = None
    #: Whether ties went by a rank (openb: node name) rather than a seeded random draw.
    tie_by_rank: bool = False

    @property
    def chosen_node(self) -> int:
        return int(self.candidates[self.chosen])

    @property
    def runner_up_node(self) -> int:
        return int(self.candidates[self.runner_up])

    def tie_note(self) -> tuple[str, ...]:
        """A report line when A and B scored the same: the tie rule, not the score, chose."""
        if self.scores[self.chosen] != self.scores[self.runner_up]:
            return ()
        rule = "the tie rank (e.g. node name)" if self.tie_by_rank else "the seeded random draw"
        return (f"tie: equal scores, {rule} picked the winner",)

    def explanation(self, method: str, names: tuple[str, ...], units: tuple[str, ...],
                    values: npt.ArrayLike, contrib: npt.ArrayLike, base: float,
                    outputs: tuple[float, float], notes: tuple[str, ...] = (),
                    **extra: Any) -> Explanation:
        """This decision's :class:`Explanation` from the players' ``values`` and ``contrib``
        (rows: chosen, runner-up) and the outputs they add up to from ``base``."""
        v, c = np.asarray(values, dtype=np.float64), np.asarray(contrib, dtype=np.float64)
        return Explanation(
            policy=self.scorer.name, pod=self.pod, n_candidates=int(self.candidates.size),
            chosen=self.snap.names[self.chosen_node],
            runner_up=self.snap.names[self.runner_up_node],
            score_chosen=float(self.scores[self.chosen]),
            score_runner_up=float(self.scores[self.runner_up]), method=method, names=names,
            units=units, value_chosen=v[0], value_runner_up=v[1], contrib_chosen=c[0],
            contrib_runner_up=c[1], base_value=base, output_chosen=outputs[0],
            output_runner_up=outputs[1], decision=self.index, notes=(*notes, *self.tie_note()),
            **extra)


def decide(pod: PodSpec, snap: ClusterSnapshot, scorer: Scorer,
           rng: np.random.Generator | None = None, tie_rank: I64 | None = None,
           index: int | None = None, nodes: I64 | None = None) -> Decision:
    """Score ``pod``'s feasible nodes (or ``nodes``) as :func:`dsan.sim.scheduler.select_node`
    does, ties included, and name the runner-up: the best other node, ties by ``tie_rank``
    then position. :class:`ExplainError` when fewer than two nodes are feasible."""
    cand = (feasible_nodes(pod, snap) if nodes is None else np.asarray(nodes)).astype(np.int64)
    where = f" at decision {index}" if index is not None else ""
    if cand.size == 0:
        raise ExplainError(f"pod {pod.name}{where} fits on no node: the protocol drops it, "
                           "nothing to explain")
    if cand.size == 1:
        only = snap.names[int(cand[0])]
        raise ExplainError(f"pod {pod.name}{where} has one feasible node ({only}): bound "
                           "without scoring, nothing to compare")
    winner = select_node(pod, snap, scorer, rng or np.random.default_rng(0), cand, tie_rank)
    assert winner is not None  # cand is non-empty
    scores = np.asarray(scorer.score(pod, snap, cand), dtype=np.float64)
    chosen = int(np.flatnonzero(cand == winner)[0])
    rest = np.delete(np.arange(cand.size), chosen)
    rank = np.zeros(cand.size, dtype=np.int64) if tie_rank is None else tie_rank[cand]
    s = np.where(np.isfinite(scores[rest]), scores[rest], -np.inf)
    order = np.lexsort((rest, rank[rest], -s))  # best score, then tie rank, then position
    runner_up = int(rest[order[0]])
    return Decision(pod, snap, scorer, cand, scores, chosen, runner_up, index, tie_rank is not None)
