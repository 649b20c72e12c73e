"""Wall time of one 24 h seed-table1 run (200 nodes, ~16k pods) per heuristic policy, side
by side in one session. Budget: <= 30 s per run on the 2-core CI machine.
Run: `.venv/bin/python -m pytest -q bench/test_scenario_speed.py --benchmark-only`."""

from __future__ import annotations

import pytest

from dsan.sim.scenario.config import load
from dsan.sim.scenario.runner import run_policy

POLICIES = ["k8s-default", "tetris", "fgd"]


@pytest.mark.parametrize("policy", POLICIES)
def test_seed_table1_24h_run_time(benchmark, policy: str) -> None:  # type: ignore[no-untyped-def]
    cfg = load("seed-table1")
    res = benchmark.pedantic(run_policy, args=(cfg, policy, 1), rounds=1, iterations=1)
    benchmark.extra_info["decisions"] = res["decisions"]
    benchmark.extra_info["pods_submitted"] = res["pods_submitted"]
    benchmark.extra_info["utilization_pct"] = res["utilization_pct"]
    assert res["sim_hours"] == 24.0
    assert res["runtime_s"] <= 30.0
