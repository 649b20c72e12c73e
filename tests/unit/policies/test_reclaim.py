"""The reclamation contract and Kubernetes' own candidate choice, against hand-worked cases."""

from __future__ import annotations

import pytest

from dsan.policies.base import Scorer
from dsan.policies.reclaim import (
    Candidate,
    DefaultReclaimer,
    Reclaimer,
    Victim,
    admissible,
    latency_sensitive,
)
from dsan.policies.registry import MODEL_FREE, make_scorer


def v(prio: int, start: float = 0.0, task: str = "other") -> Victim:
    return Victim(priority=prio, task_type=task, gpus=1.0, cores=2.0, lost_s=60.0,
                  elastic=False, start=start)


def test_a_victim_of_the_preemptors_priority_or_higher_is_never_admissible() -> None:
    assert admissible(10, Candidate(0, (v(5), v(9))))
    assert not admissible(10, Candidate(0, (v(5), v(10))))
    assert not admissible(10, Candidate(0, (v(11),)))
    assert not admissible(10, Candidate(0, ()))


def test_unknown_task_types_are_refused_and_web_is_latency_sensitive() -> None:
    with pytest.raises(ValueError, match="task_type"):
        v(1, task="spark")
    assert latency_sensitive(v(1, task="web"))
    assert not latency_sensitive(v(1, task="batch"))


@pytest.mark.parametrize(("cands", "want"), [
    # the lowest highest victim priority wins, even with more victims
    ([(v(5),), (v(1), v(2), v(3))], 1),
    # then the smallest sum of priorities
    ([(v(3), v(3)), (v(3), v(1))], 1),
    # then the fewest victims
    ([(v(2), v(0), v(0)), (v(2), v(0))], 1),
    # then the latest start among the highest-priority victims
    ([(v(4, start=10.0), v(0, start=99.0)), (v(4, start=20.0), v(0, start=1.0))], 1),
    # then the first
    ([(v(1),), (v(1),)], 0),
    # inadmissible candidates are skipped; none left -> None
    ([(v(7),), (v(3),)], 1),
    ([(v(7),), ()], None),
])
def test_default_reclaimer_is_kube_schedulers_pick_one_node(
        cands: list[tuple[Victim, ...]], want: int | None) -> None:
    r = DefaultReclaimer()
    assert isinstance(r, Reclaimer)
    assert r.choose(6, [Candidate(i, c) for i, c in enumerate(cands)]) == want


@pytest.mark.parametrize("name", MODEL_FREE)
def test_every_heuristic_keeps_kubernetes_choice(name: str) -> None:
    s = make_scorer(name)
    assert isinstance(s, Scorer)
    assert isinstance(s.reclaimer, DefaultReclaimer)
