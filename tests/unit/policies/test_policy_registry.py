from __future__ import annotations

import pytest

from dsan.policies.base import Scorer
from dsan.policies.registry import POLICY_NAMES, make_scorer


@pytest.mark.parametrize("name", [p for p in POLICY_NAMES if p != "dsan"])
def test_every_name_builds_a_scorer(name: str) -> None:
    sc = make_scorer(name, seed=3)
    assert isinstance(sc, Scorer) and sc.name == name


def test_unknown_name_lists_known() -> None:
    with pytest.raises(ValueError, match="known policies: k8s-default, tetris"):
        make_scorer("nope")


def test_baselines_take_no_options() -> None:
    with pytest.raises(ValueError, match="takes no options"):
        make_scorer("bestfit", depth=3)
