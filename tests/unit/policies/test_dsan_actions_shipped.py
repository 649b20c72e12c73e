"""The shipped DSAN model directory carries the learned actions, and they obey the contract."""

from __future__ import annotations

import json

from dsan.model.artifact import DEFAULT_DIR
from dsan.policies.dsan_actions import ACTIONS, CostReclaimer, LearnedController
from dsan.policies.reclaim import Candidate, Victim


def vic(prio: int, task: str = "other", elastic: bool = False) -> Victim:
    return Victim(priority=prio, task_type=task, gpus=1.0, cores=4.0, lost_s=60.0,
                  elastic=elastic, start=0.0)


def test_the_shipped_dsan_acts_with_the_learned_parameters() -> None:
    from dsan.policies.registry import make_scorer

    assert (DEFAULT_DIR / ACTIONS).is_file()
    s = make_scorer("dsan")
    assert isinstance(s.reclaimer, CostReclaimer)
    assert isinstance(s.controller, LearnedController)
    data = json.loads((DEFAULT_DIR / ACTIONS).read_text())
    assert "actions_search" in data["manifest"]["trained_by"]
    # the contract holds for the shipped weights: web and same-priority victims are refused
    cands = [Candidate(0, (vic(-10, task="web"),)), Candidate(1, (vic(500),)),
             Candidate(2, (vic(-10, elastic=True),))]
    assert s.reclaimer.choose(500, cands) == 2
    assert s.reclaimer.choose(500, cands[:2]) is None
