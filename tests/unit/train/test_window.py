"""Scenario windows: the reward's terms, the SLA shaping's input, the teacher's warm-up
and the node inputs, recomputed exactly when telemetry moves."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from dsan.model.export import DEFAULT_DIR, load
from dsan.sim.scenario.config import load as load_scenario
from dsan.sim.scenario.metrics import RewardParts
from dsan.train.teachers import Composite
from dsan.train.window import ScenarioReward, WindowConfig, WindowEnv

CFG = load_scenario("seed-table1")


def test_reward_terms_by_hand() -> None:
    w = ScenarioReward(0.4, 0.3, 0.2, 0.1, sla_shaping=2.0, jobs_norm=10.0)
    ep = WindowEnv(WindowConfig(start_h=0.0, len_h=0.05), w, 1, CFG)
    parts = RewardParts(dt_s=60, util_integral=30.0, jct_sum_s=7200.0, cost=5.0, sla_violations=2)
    got = ep.reward(parts, overheat=0.1)
    want = (
        0.4 * 30.0 / 180.0
        - 0.3 * 7200.0 / (3600 * 10)
        - 0.2 * 5.0 / ep.full_cost
        - 0.1 * 2 / ep.sla_norm
        - 2.0 * 0.1
    )
    assert got == pytest.approx(want)
    with pytest.raises(ValueError):
        ScenarioReward(w_util=-1)
    with pytest.raises(ValueError):
        WindowConfig(len_h=0)


def test_overheat_only_on_nodes_with_web_replicas() -> None:
    ep = WindowEnv(WindowConfig(start_h=0.0, len_h=0.02), ScenarioReward(), 1, CFG)
    eng = ep.env.engine
    assert eng is not None
    while ep.obs is not None and np.any(eng.pod_node[eng.web_pods] < 0):
        ep.step(int(ep.obs.nodes[0]))  # web replicas come first (priority 1000)
    assert ep.obs is not None
    web_node = int(eng.pod_node[eng.web_pods][0])
    empty = int(np.flatnonzero(ep.obs.snapshot.pod_count == 0)[0])
    ep.obs.snapshot.cpu_used[web_node] = ep.obs.snapshot.cpu_cap[web_node]  # full
    assert ep.overheat(web_node) > 0.2
    ep.obs.snapshot.cpu_used[empty] = ep.obs.snapshot.cpu_cap[empty]
    assert ep.overheat(empty) == 0.0


def test_node_inputs_are_recomputed_when_telemetry_moves() -> None:
    model, _ = load(DEFAULT_DIR)
    ep = WindowEnv(WindowConfig(start_h=0.0, len_h=0.01), ScenarioReward(), 2, CFG)
    assert ep.decision() is not None and ep.obs is not None
    first = ep.nodes()
    assert ep.nodes() is first  # same telemetry version: kept
    snap = ep.obs.snapshot
    snap.telemetry_version += 1
    snap.telemetry[:, -1, 0] = 1.0  # type: ignore[index]
    second = ep.nodes()
    assert second is not first
    assert not torch.equal(first.embed(model), second.embed(model))


def test_the_teacher_plays_up_to_the_window() -> None:
    win = WindowConfig(start_h=0.05, len_h=0.05)
    with pytest.raises(ValueError, match="teacher"):
        WindowEnv(win, ScenarioReward(), 1, CFG).decision()
    ep = WindowEnv(win, ScenarioReward(), 1, CFG, Composite(None))
    d = ep.decision()
    assert d is not None and ep.obs is not None and ep.obs.time_s >= 0.05 * 3600
    assert ep.env.engine is not None and (ep.env.engine.pod_node >= 0).sum() > 10
