"""One scheduling decision, frozen for explaining, and what an explanation of it holds.

A :class:`Decision` is the pod, the cluster, the candidates, the served scorer's scores, the
node that won (A) and the runner-up (B): :func:`decide` scores a live state,
:func:`replay_openb` and :func:`replay_scenario` replay a simulator run up to decision N (openb
exactly as :func:`dsan.sim.protocol.run_openb` runs: node permutation, pod order, tie rule,
random stream; decision N is the pod at position N of the submission order, pods that fit
nowhere included).

An :class:`Explanation`, whatever produced it (SHAP or closed form), holds per *player* (a
feature, a heuristic's term) its value and contribution on A and B. ``base + sum(contrib) =
output`` for both (checked), so the rows with the largest difference are *why A won over B*.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import partial
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt

from dsan.core.filtering import feasible_nodes
from dsan.core.snapshot import F64, I64, ClusterSnapshot, PodSpec
from dsan.policies.base import Scorer
from dsan.sim.scheduler import schedule_one, select_node

if TYPE_CHECKING:
    from dsan.sim.protocol import OpenbConfig


@dataclass(frozen=True)
class Explanation:
    policy: str
    pod: PodSpec
    n_candidates: int
    chosen: str
    runner_up: str
    #: The served scorer's own scores of A and B (what the scheduler compared).
    score_chosen: float
    score_runner_up: float
    method: str
    names: tuple[str, ...]
    units: tuple[str, ...]
    value_chosen: F64
    value_runner_up: F64
    contrib_chosen: F64
    contrib_runner_up: F64
    #: Output the contributions add up to, from ``base``: the model's logit for DSAN, the
    #: score for a heuristic. Equals the score up to ``tolerance`` (checked by the report).
    base_value: float
    output_chosen: float
    output_runner_up: float
    tolerance: float = 1e-4
    decision: int | None = None
    notes: tuple[str, ...] = field(default_factory=tuple)
    #: Informational rows (name, unit, value A, value B) that are not players.
    context: tuple[tuple[str, str, float, float], ...] = field(default_factory=tuple)

    def __post_init__(self) -> None:
        d = len(self.names)
        for col in ("value_chosen", "value_runner_up", "contrib_chosen", "contrib_runner_up"):
            if np.shape(getattr(self, col)) != (d,):
                raise ValueError(f"Explanation.{col} has shape {np.shape(getattr(self, col))}, "
                                 f"want ({d},)")
        if len(self.units) != d:
            raise ValueError(f"Explanation.units has {len(self.units)} entries, want {d}")

    @property
    def contrib_diff(self) -> F64:
        return np.asarray(self.contrib_chosen - self.contrib_runner_up)

    def additivity_errors(self) -> tuple[float, float, float]:
        """|base + sum - output| for A and B, and |sum(diff) - (output_A - output_B)|."""
        ea = abs(self.base_value + float(self.contrib_chosen.sum()) - self.output_chosen)
        eb = abs(self.base_value + float(self.contrib_runner_up.sum()) - self.output_runner_up)
        ed = abs(float(self.contrib_diff.sum()) - (self.output_chosen - self.output_runner_up))
        return ea, eb, ed

    def score_errors(self) -> tuple[float, float]:
        """|output - served score| for A and B: the explained function is the served one."""
        return (abs(self.output_chosen - self.score_chosen),
                abs(self.output_runner_up - self.score_runner_up))

    @property
    def consistent(self) -> bool:
        return max(*self.additivity_errors(), *self.score_errors()) <= self.tolerance

    def top(self, k: int, by: str = "diff") -> I64:
        """Indices of the k players with the largest |contribution| (``diff``, ``chosen``,
        ``runner_up``), largest first, ties by column order."""
        col = {"diff": self.contrib_diff, "chosen": self.contrib_chosen,
               "runner_up": self.contrib_runner_up}[by]
        return np.argsort(-np.abs(col), kind="stable")[: max(0, k)].astype(np.int64)


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


def replay_openb(cfg: OpenbConfig, decision: int, **scorer_kwargs: Any) -> Decision:
    """The state of ``cfg``'s run just before decision ``decision``, scored (``scorer_kwargs``
    go to the policy's factory)."""
    from dsan.sim.protocol import start

    try:
        run = start(cfg, **scorer_kwargs)
    except ValueError as exc:
        raise ExplainError(str(exc)) from None
    if not 0 <= decision < len(run.order):
        raise ExplainError(f"decision {decision} is out of range: this run makes "
                           f"{len(run.order)} decisions (0..{len(run.order) - 1})")
    for e in range(decision):
        schedule_one(run.specs[run.order[e]], run.snap, run.scorer, run.rng, run.tie_rank)
    return decide(run.specs[run.order[decision]], run.snap, run.scorer, run.rng, run.tie_rank,
                  index=decision)


def replay_scenario(scenario: str, policy: str, seed: int, decision: int,
                    hours: float | None = None, burst: bool = False,
                    **scorer_kwargs: Any) -> Decision:
    """Decision ``decision`` of a seed-scenario run, driven as
    :func:`dsan.sim.scenario.runner.run_policy` drives it (same scorer wiring and tie stream)."""
    from dsan.sim.scenario.config import load
    from dsan.sim.scenario.runner import default_factory, start

    if decision < 0:
        raise ExplainError(f"decision must be >= 0, got {decision}")
    engine, scorer, rng, tie_rank = start(load(scenario), policy, seed, burst=burst, hours=hours,
                                          factory=partial(default_factory, **scorer_kwargs))
    gen = engine.decisions()
    try:
        d = next(gen, None)
        for _ in range(decision):
            if d is None:
                break
            node = select_node(d.pod, d.snapshot, scorer, rng, d.nodes, tie_rank)
            d = gen.send(int(node)) if node is not None else None
    except StopIteration:
        d = None
    if d is None:
        gen.close()
        raise ExplainError(f"decision {decision} is out of range: the run ended before it")
    # a copy: closing the generator may let the engine move on with its live snapshot
    out = decide(d.pod, d.snapshot.copy(), scorer, rng, tie_rank, index=decision, nodes=d.nodes)
    gen.close()
    return out
