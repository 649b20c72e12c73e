"""The episode's split placement (batched bind, batched fragmentation refresh, settle) is
place() (the batched FGD GPU choice it uses is tests/unit/features/test_gpuchoice.py's)."""

from __future__ import annotations

import numpy as np

from dsan.features.frag import FragTracker
from dsan.train.env import EnvConfig, bind_many, make_episode, refresh_bound

ENV = EnvConfig(n_nodes=16, tune=0.8)


def test_bind_refresh_settle_equals_place_and_keeps_fragmentation_current() -> None:
    seeds = [3, 4, 8, 9]
    one = [make_episode(ENV, s) for s in seeds]  # placed one by one
    many = [make_episode(ENV, s) for s in seeds]  # bound together, refreshed in one call
    steps = 0
    while True:
        live, pods, nodes = [], [], []
        for i, (a, b) in enumerate(zip(one, many, strict=True)):
            nxt, again = a.next_decision(), b.next_decision()
            assert (nxt is None) == (again is None)
            if nxt is not None:
                live.append(i)
                pods.append(nxt[0])
                nodes.append(int(nxt[1][-1]))  # the last candidate, not the first
        if not live:
            break
        want = [one[i].place(p, n) for i, p, n in zip(live, pods, nodes, strict=True)]
        bound = bind_many([many[i] for i in live], pods, nodes)
        refresh_bound([many[i] for i in live], nodes)
        got = [many[i].settle(b) for i, b in zip(live, bound, strict=True)]
        for w, g in zip(want, got, strict=True):
            np.testing.assert_array_equal(w, g)  # same reward parts, bit for bit
        steps += 1
    assert steps > 20
    for a, b in zip(one, many, strict=True):
        np.testing.assert_array_equal(a.frag.frag, b.frag.frag)
        fresh = FragTracker(b.snap, b.target)  # every node's fragmentation from scratch
        np.testing.assert_array_equal(b.frag.frag, fresh.frag)
        assert a.alloc_pct == b.alloc_pct > 0 and a.decisions == b.decisions
