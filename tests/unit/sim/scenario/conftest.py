"""Fixtures for the seed-scenario tests; the helpers live in scenario_fixtures.py."""

from __future__ import annotations

import pytest
from scenario_fixtures import tiny_config

from dsan.sim.scenario.config import ScenarioConfig
from dsan.sim.scenario.workload import WorkloadBuilder


@pytest.fixture
def cfg() -> ScenarioConfig:
    return tiny_config()


@pytest.fixture
def builder(cfg: ScenarioConfig) -> WorkloadBuilder:
    return WorkloadBuilder(cfg)
