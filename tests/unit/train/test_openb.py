"""openb episodes: lockstep stepping (batched binds and fragmentation refresh; the batched FGD
GPU choice is tests/unit/features/test_frag.py's) is stepping one by one and keeps every
node's fragmentation current, and a step's reward carries the SLA penalty of the pods that
failed before the next decision."""

from __future__ import annotations

import numpy as np
import pytest

from dsan.features.frag import FragTracker
from dsan.train.openb import EnvConfig, RewardWeights, make_episode

ENV = EnvConfig(n_nodes=16, tune=0.8)


def test_step_all_is_step_one_by_one() -> None:
    seeds = [3, 4, 8, 9]
    one = [make_episode(ENV, s) for s in seeds]
    many = [make_episode(ENV, s) for s in seeds]
    got: list[list[float]] = [[] for _ in seeds]
    want: list[list[float]] = [[] for _ in seeds]
    while True:
        live = [i for i in range(len(seeds)) if many[i].decision() is not None]
        assert live == [i for i in range(len(seeds)) if one[i].decision() is not None]
        if not live:
            break
        nodes = []
        for i in live:
            d = many[i].decision()
            assert d is not None
            nodes.append(int(d.cand[len(d.cand) // 2]))
        for i, n in zip(live, nodes, strict=True):
            want[i].append(one[i].step(n))
        for i, r in zip(live, type(many[0]).step_all([many[i] for i in live], nodes), strict=True):
            got[i].append(r)
    assert got == want and all(len(w) > 10 for w in want)  # bit for bit
    assert [e.summary() for e in one] == [e.summary() for e in many]
    for a, b in zip(one, many, strict=True):
        np.testing.assert_array_equal(a.frag.frag, b.frag.frag)
        fresh = FragTracker(b.snap, b.target)  # every node's fragmentation from scratch
        np.testing.assert_array_equal(b.frag.frag, fresh.frag)
        assert a.alloc_pct > 0 and a.decisions == b.decisions


def test_failed_pods_are_charged_to_the_step_before_them() -> None:
    """With only the SLA weight on, each step pays for the pods that failed before the next
    decision (the first also for those before it); pods failing after the last decision
    have no step to pay for them."""
    w = RewardWeights(util=0.0, completion=0.0, cost=0.0, sla=1.0, frag_shaping=0.0)
    env = EnvConfig(n_nodes=8, tune=1.6, reward=w)  # oversubscribed: pods fail
    charged = 0
    for seed in range(6):
        ep = make_episode(env, seed)
        d = ep.decision()
        owed = ep.failed  # failed before the first decision
        while d is not None:
            before = ep.failed
            r = ep.step(int(d.cand[0]))
            d = ep.decision()
            owed += ep.failed - before if d is not None else 0
            assert -r * len(ep.order) == pytest.approx(owed)
            charged, owed = charged + owed, 0
    assert charged > 20
