"""Gym-shaped step-by-step access to the scenario for reinforcement learning: an observation
is a :class:`~dsan.sim.scenario.state.Decision`, a step's reward the raw
:class:`~dsan.sim.scenario.metrics.RewardParts` since the last decision (docs/scenarios.md)."""

from __future__ import annotations

from collections.abc import Callable, Generator
from typing import Any

from dsan.sim.scenario.config import ScenarioConfig
from dsan.sim.scenario.engine import Engine
from dsan.sim.scenario.metrics import RewardParts
from dsan.sim.scenario.state import Decision, SelectGpus
from dsan.sim.scenario.workload import Workload


class ScenarioEnv:
    def __init__(self, cfg: ScenarioConfig, *, burst: bool = False, hours: float | None = None,
                 select_gpus: SelectGpus | None = None,
                 workload_factory: Callable[[int], Workload] | None = None) -> None:
        """``workload_factory(seed)`` replaces the scenario's generators (tests, curricula)."""
        self.cfg, self.burst, self.hours = cfg, burst, hours
        self.select_gpus, self.workload_factory = select_gpus, workload_factory
        self.engine: Engine | None = None
        self._gen: Generator[Decision, int, None] | None = None
        self._obs: Decision | None = None

    def reset(self, seed: int) -> Decision | None:
        """Start a fresh run; returns the first decision (reward before it is discarded)."""
        wl = None if self.workload_factory is None else self.workload_factory(seed)
        self.engine = Engine(self.cfg, seed, burst=self.burst, hours=self.hours,
                             select_gpus=self.select_gpus, workload=wl)
        self._gen = self.engine.decisions()
        self._obs = next(self._gen, None)
        self.engine.acc.take_step()
        return self._obs

    def step(self, node: int) -> tuple[Decision | None, RewardParts, bool]:
        """Place the pending pod on ``node``; run to the next decision or the horizon."""
        if self._gen is None or self.engine is None or self._obs is None:
            raise RuntimeError("call reset() first (or the episode is over)")
        try:
            self._obs = self._gen.send(int(node))
        except StopIteration:
            self._obs = None
        return self._obs, self.engine.acc.take_step(), self._obs is None

    def summary(self) -> dict[str, Any]:
        """Table 1 metrics of the episode so far (complete once ``done``)."""
        if self.engine is None:
            raise RuntimeError("call reset() first")
        return self.engine.summary()
