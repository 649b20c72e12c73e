from __future__ import annotations

import pytest

from dsan.policies.base import Scorer
from dsan.policies.registry import MODEL_FREE, POLICY_NAMES, make_scorer, needs


@pytest.mark.parametrize("name", MODEL_FREE)
def test_every_name_builds_a_scorer(name: str) -> None:
    sc = make_scorer(name, seed=3)
    assert isinstance(sc, Scorer) and sc.name == name


def test_unknown_name_lists_known() -> None:
    with pytest.raises(ValueError, match="known policies: k8s-default, tetris"):
        make_scorer("nope")


def test_baselines_take_no_options() -> None:
    with pytest.raises(ValueError, match="takes no options"):
        make_scorer("bestfit", depth=3)


def test_needs_are_declared_for_every_policy() -> None:
    assert POLICY_NAMES[:-1] == MODEL_FREE and POLICY_NAMES[-1] == "dsan"
    assert needs("dsan").model and needs("dsan").target_workload
    assert needs("fgd").target_workload and not needs("fgd").model
    assert not any(needs(n).target_workload for n in MODEL_FREE if n != "fgd")
    with pytest.raises(ValueError, match="unknown policy 'nope'; known policies: k8s-default"):
        needs("nope")
