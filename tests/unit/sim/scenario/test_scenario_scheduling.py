"""Which nodes a pending pod is offered: every feasible node (the shipped scenario), or
cluster-autoscaler semantics (``scale_up.ready_nodes_first``)."""

from __future__ import annotations

import pytest
from scenario_fixtures import drive, tiny_config

from dsan.core.snapshot import PodSpec
from dsan.sim.scenario.engine import Decision, Engine
from dsan.sim.scenario.workload import TRAIN, WorkloadBuilder


def _offers(ready_nodes_first: bool) -> dict[str, list[int]]:
    """Node 0 (64 cores) filled at t=0 by two long-lived pods but for 4 cores; nodes 1 and 2
    empty from 0, so powered off at 600 s (grace). Then three 4-core pods: p1 at 700 s
    (fits node 0, the only Ready node), p2 at 710 s (fits only the off nodes 1 and 2; the
    policy boots node 2, Ready at 800 s) and p3 at 720 s (fits off node 1 and booting
    node 2)."""
    cfg = tiny_config(hours=2000 / 3600, scale_up={"ready_nodes_first": ready_nodes_first})
    b = WorkloadBuilder(cfg)
    for name, submit, cpu, work in (("train", 0.0, 8000, 1e6), ("filler", 0.0, 52000, 1e6),
                                    ("p1", 700.0, 4000, 100.0), ("p2", 710.0, 4000, 100.0),
                                    ("p3", 720.0, 4000, 100.0)):
        job = b.job(TRAIN, submit, [work], stage_par=[0])
        b.pod(job, PodSpec(name, cpu, 4096, priority=500, task_type=TRAIN, image=0), 0.5, 0.0,
              False)
    seen: list[Decision] = []

    def policy(d: Decision) -> int:  # node 0 while it fits, else the last candidate
        return int(d.nodes[0]) if d.nodes[0] == 0 else int(d.nodes[-1])

    drive(Engine(cfg, 0, workload=b.build()), policy, seen)
    return {d.pod.name: [int(n) for n in d.nodes] for d in seen}


def test_every_feasible_node_is_offered_by_default() -> None:
    got = _offers(False)
    assert got["p1"] == [0, 1, 2]  # the off nodes too: binding there boots them
    assert got["p2"] == [1, 2]
    assert got["p3"] == [1, 2]


def test_ready_nodes_first_offers_ready_then_booting_then_off() -> None:
    got = _offers(True)
    assert got["train"] == [0, 1, 2] and got["filler"] == [0, 1]  # all Ready at t=0
    assert got["p1"] == [0]  # a Ready node fits: the off ones are not candidates
    assert got["p2"] == [1, 2]  # nothing Ready or booting fits: CA boots one (the policy's)
    assert got["p3"] == [2]  # the booting node fits: wait for it rather than boot another


@pytest.mark.parametrize("value", ["yes", 1])
def test_ready_nodes_first_must_be_a_bool(value: object) -> None:
    with pytest.raises((TypeError, ValueError), match="ready_nodes_first"):
        tiny_config(scale_up={"ready_nodes_first": value})
