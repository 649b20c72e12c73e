"""SHAP of a (small, random) DSAN model's decision: additive, the served score, consistent
with the ranking, zero for columns no candidate differs in, deterministic."""

from __future__ import annotations

import numpy as np
import pytest

from dsan.explain.decision import ExplainError, decide
from dsan.explain.explainers import EMBEDDING_PLAYER, DSANShapConfig, explain
from dsan.features import FEATURE_NAMES
from dsan.policies.registry import make_scorer

CFG = DSANShapConfig(background=8, permutations=2, seed=1)


def test_additive_and_equal_to_the_served_logits(snap, pod, dsan_scorer) -> None:
    d = decide(pod, snap, dsan_scorer)
    e = explain(d, CFG)
    assert e.names == (*FEATURE_NAMES, EMBEDDING_PLAYER)
    ea, eb, ed = e.additivity_errors()
    assert max(ea, eb, ed) < 1e-9
    assert max(e.score_errors()) < 1e-5  # the explained function is the served one
    assert e.consistent


def test_chosen_explanation_is_consistent_with_its_higher_score(snap, pod, dsan_scorer) -> None:
    e = explain(decide(pod, snap, dsan_scorer), CFG)
    gap = e.score_chosen - e.score_runner_up
    assert gap >= 0
    assert float(e.contrib_diff.sum()) == pytest.approx(gap, abs=1e-6)
    # the top rows of "why A over B" are the largest differences, in order
    top = np.abs(e.contrib_diff[e.top(5)])
    assert np.all(np.diff(top) <= 0) and top[0] == np.abs(e.contrib_diff).max()


def test_columns_equal_on_every_row_get_exactly_zero(snap, pod, dsan_scorer) -> None:
    e = explain(decide(pod, snap, dsan_scorer), CFG)
    # pod-only columns (the pod's own requests) are the same for every candidate
    for name in ("pod_cpu", "pod_mem", "pod_gpu_milli", "pod_num_gpu", "pod_is_sharing"):
        i = FEATURE_NAMES.index(name)
        assert e.contrib_chosen[i] == 0.0 and e.contrib_runner_up[i] == 0.0
    assert np.abs(e.contrib_chosen).max() > 0


def test_deterministic_for_a_seed(snap, pod, dsan_scorer) -> None:
    a = explain(decide(pod, snap, dsan_scorer), CFG)
    b = explain(decide(pod, snap, dsan_scorer), CFG)
    np.testing.assert_array_equal(a.contrib_chosen, b.contrib_chosen)


def test_a_heuristic_scorer_has_no_model_to_shap(snap, pod) -> None:
    from dsan.explain.explainers import explain_dsan

    with pytest.raises(ExplainError, match="no DSAN model"):
        explain_dsan(decide(pod, snap, make_scorer("fgd")), CFG)


def test_bad_config() -> None:
    with pytest.raises(ValueError, match="background"):
        DSANShapConfig(background=0)
