"""The step-by-step API an RL loop drives."""

from __future__ import annotations

import pytest
from scenario_fixtures import HORIZON_S, train_pod

from dsan.sim.scenario.env import ScenarioEnv
from dsan.sim.scenario.workload import TRAIN, WorkloadBuilder


def test_env_episode_reward_parts_cover_the_horizon(cfg) -> None:
    b = WorkloadBuilder(cfg)
    j = b.job(TRAIN, 0.0, [100.0], stage_par=[0])
    b.pod(j, train_pod("t0"), 0.6, 0.9, False)
    j2 = b.job(TRAIN, 200.0, [100.0], stage_par=[0])
    b.pod(j2, train_pod("t1"), 0.6, 0.9, False)
    assert ScenarioEnv(cfg).reset(seed=0) is None  # the tiny config generates no load
    env = ScenarioEnv(cfg, workload_factory=lambda seed: b.build())
    obs = env.reset(seed=0)
    assert obs is not None and obs.time_s == 0.0 and obs.nodes.tolist() == [0, 1]
    obs, parts, done = env.step(0)
    assert obs is not None and obs.time_s == 200.0 and not done
    assert parts.dt_s == pytest.approx(200.0)
    assert parts.jobs_completed == 1 and parts.jct_sum_s == pytest.approx(103.0)
    assert parts.sla_items == 1 and parts.sla_violations == 0
    assert parts.cost > 0 and 0 < parts.util_integral < parts.dt_s
    obs, parts2, done = env.step(1)
    assert obs is None and done
    assert parts.dt_s + parts2.dt_s == pytest.approx(HORIZON_S)
    with pytest.raises(RuntimeError):
        env.step(0)


def test_env_on_seed_scenario_runs_and_summarises() -> None:
    from dsan.sim.scenario.config import load

    env = ScenarioEnv(load("seed-table1"), hours=0.25)
    obs = env.reset(seed=3)
    steps = 0
    while obs is not None:
        assert obs.nodes.size > 0 and obs.snapshot.telemetry is not None
        obs, _, _ = env.step(int(obs.nodes[-1]))
        steps += 1
    assert steps > 10
    assert env.summary()["pods_submitted"] >= steps
