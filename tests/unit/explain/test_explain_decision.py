"""decide(): the same winner as the simulator's select_node, the best other node as runner-up,
and a clear error when there is nothing to compare; closed-form breakdowns of the heuristics
add up to the scorer's own score."""

from __future__ import annotations

import numpy as np
import pytest

from dsan.core.filtering import feasible_nodes
from dsan.core.snapshot import PodSpec
from dsan.explain.decision import ExplainError, decide
from dsan.explain.explainers import explain
from dsan.policies.registry import make_scorer
from dsan.sim.scheduler import select_node


@pytest.mark.parametrize("policy", ["k8s-default", "fgd", "tetris"])
def test_winner_is_select_nodes_and_runner_up_is_the_best_other(snap, pod, policy) -> None:
    scorer = make_scorer(policy)
    rank = np.argsort(np.argsort(snap.names)).astype(np.int64)
    d = decide(pod, snap, scorer, tie_rank=rank)
    assert d.chosen_node == select_node(
        pod, snap, make_scorer(policy), np.random.default_rng(0), tie_rank=rank
    )
    np.testing.assert_array_equal(d.candidates, feasible_nodes(pod, snap))
    others = np.delete(d.scores, d.chosen)
    assert d.scores[d.runner_up] == others.max() <= d.scores[d.chosen]
    assert d.runner_up != d.chosen


def test_one_or_no_feasible_node_is_a_clear_error(snap) -> None:
    huge = PodSpec("huge", cpu_milli=1e9, mem_mib=1.0)
    with pytest.raises(ExplainError, match="fits on no node"):
        decide(huge, snap, make_scorer("fgd"), index=7)
    only = np.array([3], dtype=np.int64)
    with pytest.raises(ExplainError, match="one feasible node"):
        decide(PodSpec("p", 1.0, 1.0), snap, make_scorer("fgd"), nodes=only)


@pytest.mark.parametrize("policy", ["k8s-default", "fgd"])
@pytest.mark.parametrize(
    "shape",
    [(4000, 16384, 1, 500), (8000, 32768, 2, 1000), (2000, 4096, 0, 0), (1000, 2048, 1, 250)],
)
def test_heuristic_terms_add_up_to_the_served_score(snap, policy, shape) -> None:
    cpu, mem, g, milli = shape
    d = decide(PodSpec("p", cpu, mem, g, milli), snap, make_scorer(policy))
    e = explain(d)
    assert e.consistent, (e.additivity_errors(), e.score_errors())
    assert e.output_chosen == d.scores[d.chosen] and e.output_runner_up == d.scores[d.runner_up]
    assert float(e.contrib_diff.sum()) == pytest.approx(d.scores[d.chosen] - d.scores[d.runner_up])
    assert e.context  # fragmentation / per-resource rows for the report


def test_policies_without_an_explanation_are_refused(snap, pod) -> None:
    with pytest.raises(ExplainError, match="explainable policies"):
        explain(decide(pod, snap, make_scorer("tetris")))
