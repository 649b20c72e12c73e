"""Step-by-step access to the seed scenario for reinforcement learning.

``ScenarioEnv`` is a Gym-shaped wrapper over :meth:`Engine.decisions`::

    env = ScenarioEnv(load("seed-table1"), hours=2)
    obs = env.reset(seed=1)                    # Decision, or None if nothing to place
    while obs is not None:
        node = my_policy(obs)                  # an entry of obs.nodes
        obs, parts, done = env.step(node)      # parts: RewardParts since the last decision

An observation is a :class:`~dsan.sim.scenario.engine.Decision`: the pod, its feasible
nodes and the engine's live :class:`~dsan.core.snapshot.ClusterSnapshot` (telemetry history of
shape (n, T=12, 5) at 10 s samples, topology ids, hourly cost, pod counts, cached images).
The reward parts are raw (utilisation integral, completed jobs and their JCT sum, cost,
SLA items and violations); the trainer weights and normalises them (docs/scenarios.md).
"""

from __future__ import annotations

from collections.abc import Callable, Generator
from typing import Any

from dsan.policies.base import Scorer
from dsan.sim.scenario.config import ScenarioConfig
from dsan.sim.scenario.engine import Decision, Engine, SelectGpus
from dsan.sim.scenario.metrics import RewardParts
from dsan.sim.scenario.workload import Workload


class ScenarioEnv:
    def __init__(
        self,
        cfg: ScenarioConfig,
        *,
        burst: bool = False,
        hours: float | None = None,
        select_gpus: SelectGpus | None = None,
        hooks: Scorer | None = None,
        workload_factory: Callable[[int], Workload] | None = None,
    ) -> None:
        """``workload_factory(seed)`` replaces the scenario's generators (tests, curricula)."""
        self.cfg = cfg
        self.burst = burst
        self.hours = hours
        self.select_gpus = select_gpus
        self.hooks = hooks
        self.workload_factory = workload_factory
        self.engine: Engine | None = None
        self._gen: Generator[Decision, int, None] | None = None
        self._obs: Decision | None = None

    def reset(self, seed: int) -> Decision | None:
        """Start a fresh run; returns the first decision (reward before it is discarded)."""
        self.engine = Engine(
            self.cfg,
            seed,
            burst=self.burst,
            hours=self.hours,
            select_gpus=self.select_gpus,
            hooks=self.hooks,
            workload=None if self.workload_factory is None else self.workload_factory(seed),
        )
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
