"""Hypothesis: for every policy, no node is ever over-committed, and a dropped pod really had
no feasible node at the moment it was dropped."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from dsan.core.filtering import feasible
from dsan.core.snapshot import PodSpec, empty_snapshot
from dsan.features.target import TargetWorkload
from dsan.policies.registry import POLICY_NAMES, make_scorer
from dsan.sim.scheduler import schedule_one

node_st = st.tuples(
    st.sampled_from([8_000, 32_000, 64_000]), st.sampled_from([1, 2, 4, 8]), st.integers(0, 1)
)


@st.composite
def pod_st(draw: st.DrawFn, i: int = 0) -> PodSpec:
    kind = draw(st.sampled_from(["cpu", "share", "whole"]))
    cpu = draw(st.sampled_from([0, 1000, 4000, 16_000]))
    mem = draw(st.sampled_from([0, 1024, 64_000]))
    if kind == "cpu":
        return PodSpec(f"p{i}", cpu, mem)
    if kind == "share":
        return PodSpec(
            f"p{i}",
            cpu,
            mem,
            1,
            draw(st.sampled_from([100, 250, 500, 810])),
            draw(st.sampled_from([(), (0,), (1,)])),
        )
    return PodSpec(f"p{i}", cpu, mem, draw(st.sampled_from([1, 2, 4, 8])), 1000)


@settings(max_examples=25, deadline=None)
@given(
    nodes=st.lists(node_st, min_size=1, max_size=6),
    pods=st.lists(pod_st(), min_size=1, max_size=25),
    policy=st.sampled_from([p for p in POLICY_NAMES if p != "dsan"]),
    seed=st.integers(0, 3),
)
def test_never_overcommitted_and_drops_are_real(nodes, pods, policy, seed) -> None:  # type: ignore[no-untyped-def]
    n = len(nodes)
    snap = empty_snapshot(
        [f"n{i}" for i in range(n)],
        [c for c, _, _ in nodes],
        [128_000] * n,
        [g for _, g, _ in nodes],
        [m for _, _, m in nodes],
        ["G2", "T4"],
    )
    scorer = make_scorer(
        policy, seed=seed, target_workload=TargetWorkload.from_pods(pods, ["G2", "T4"])
    )
    rng = np.random.default_rng(seed)
    rank = np.arange(n)
    for pod in pods:
        could = feasible(pod, snap).any()
        placed = schedule_one(pod, snap, scorer, rng, rank if seed % 2 else None)
        assert (placed is not None) == bool(could)
        if placed is not None:
            _node, gpus = placed
            assert len(gpus) == (pod.num_gpu if pod.gpu_milli else 0)
        assert np.all(snap.cpu_used <= snap.cpu_cap + 1e-9)
        assert np.all(snap.mem_used <= snap.mem_cap + 1e-9)
        assert np.all(snap.gpu_free >= 0) and np.all(snap.gpu_free <= 1000)
        assert np.all(snap.gpu_free[~snap.gpu_present] == 0)
