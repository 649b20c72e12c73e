"""Scenario episodes (:class:`WindowEnv`): a window ``[start_h, start_h + len_h)`` of a seeded
seed-scenario run, the teacher playing up to it (the pressure sits at the diurnal peaks).

A step's reward covers all until the next decision, each term normalised to about [0, 1]
per episode: ``+w_util`` utilisation, ``-w_completion`` job hours per ``jobs_norm`` jobs,
``-w_cost`` cost per all-nodes-on cost, ``-w_sla`` violations per web service-window, and
our SLA shaping ``-sla_shaping * overheat``: web violations are counted every 300 s, long
after the placement that caused them, so a placement pays at once how far the node's
requested CPU goes past the contention threshold if it hosts a web replica.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import ClassVar

import numpy as np
import numpy.typing as npt

from dsan.features import AGE_COLUMNS, PlacementCache, TargetWorkload, age_columns
from dsan.sim.scenario.config import ScenarioConfig
from dsan.sim.scenario.env import ScenarioEnv
from dsan.sim.scenario.metrics import RewardParts
from dsan.train.env import F32, Decision, NodeInputs
from dsan.train.teachers import Composite


@dataclass(frozen=True)
class ScenarioReward:
    """The article's weights plus our SLA shaping (see the module docstring)."""

    w_util: float = 0.4
    w_completion: float = 0.3
    w_cost: float = 0.2
    w_sla: float = 0.1
    sla_shaping: float = 1.0
    jobs_norm: float = 50.0

    def __post_init__(self) -> None:
        ws = (self.w_util, self.w_completion, self.w_cost, self.w_sla, self.sla_shaping)
        if min(ws) < 0 or self.jobs_norm <= 0:
            raise ValueError("ScenarioReward: weights must be >= 0 and jobs_norm > 0")


@dataclass(frozen=True)
class WindowConfig:
    """Which part of the scenario an episode covers."""

    start_h: float = 9.0
    len_h: float = 1.0

    def __post_init__(self) -> None:
        if self.start_h < 0 or self.len_h <= 0:
            raise ValueError("WindowConfig: start_h >= 0 and len_h > 0 are required")


class WindowEnv:
    """One seeded window, an :class:`~dsan.train.env.Env`; ``obs`` is the simulator's pending
    decision (None once over). ``teacher`` plays the warm-up, picks GPUs inside the chosen
    node and sets the imitation tolerance; ``rng`` breaks its ties."""

    fixed_nodes: ClassVar[bool] = False

    def __init__(
        self,
        win: WindowConfig,
        reward: ScenarioReward,
        seed: int,
        cfg: ScenarioConfig,
        teacher: Composite | None = None,
        target: TargetWorkload | None = None,
        rng: np.random.Generator | None = None,
    ) -> None:
        self.weights, self.cfg = reward, cfg
        self.teacher, self.rng = teacher, rng or np.random.default_rng(0)
        self.env = ScenarioEnv(
            self.cfg,
            hours=win.start_h + win.len_h,
            select_gpus=None if teacher is None else teacher.select_gpus,
        )
        self.start_s = win.start_h * 3600.0
        self.window_s = win.len_h * 3600.0
        self.obs = self.env.reset(seed)
        eng = self.env.engine
        assert eng is not None and eng.snap.hourly_cost is not None
        self.full_cost = float(eng.snap.hourly_cost.sum()) * win.len_h
        self.sla_norm = max(
            1.0, self.cfg.web.services * self.window_s / self.cfg.metrics.web_window_s
        )
        if target is None:
            target = TargetWorkload.from_pods(eng.wl.pods, eng.snap.gpu_models)
        self.target = target
        self.cache = PlacementCache(self.target)
        self._inputs: NodeInputs | None = None
        self._version = -1

    @property
    def in_window(self) -> bool:
        return self.obs is not None and self.obs.time_s >= self.start_s

    def overheat(self, node: int) -> float:
        """The SLA shaping's input for placing the pending pod on ``node``."""
        eng, d = self.env.engine, self.obs
        assert eng is not None and d is not None
        if not np.any(eng.pod_node[eng.web_pods] == node):
            return 0.0
        s = d.snapshot
        after = (s.cpu_used[node] + d.pod.cpu_milli) / max(float(s.cpu_cap[node]), 1.0)
        return max(0.0, after - self.cfg.contention.threshold)

    def reward(self, parts: RewardParts, overheat: float) -> float:
        w = self.weights
        return (
            w.w_util * parts.util_integral / self.window_s
            - w.w_completion * parts.jct_sum_s / (3600.0 * w.jobs_norm)
            - w.w_cost * parts.cost / self.full_cost
            - w.w_sla * parts.sla_violations / self.sla_norm
            - w.sla_shaping * overheat
        )

    def step(self, node: int) -> float:
        """Place the pending pod on ``node``; the step's reward (0 before the window)."""
        inside = self.in_window
        heat = self.overheat(node) if inside else 0.0
        self.obs, parts, _ = self.env.step(int(node))
        return self.reward(parts, heat) if inside else 0.0

    # -- the Env protocol ------------------------------------------------------------------

    def decision(self) -> Decision | None:
        """The pending in-window decision, once the teacher has played up to the window."""
        while self.obs is not None and not self.in_window:
            if self.teacher is None:
                raise ValueError("WindowEnv: a window that starts after 0 h needs a teacher")
            o = self.obs
            nodes = np.asarray(o.nodes, dtype=np.int64)
            s = np.asarray(self.teacher.score(o.pod, o.snapshot, nodes), dtype=np.float64)
            self.step(int(nodes[pick(s, self.rng)]))
        d = self.obs
        return None if d is None else Decision(d.pod, d.snapshot, np.asarray(d.nodes, np.int64))

    def nodes(self) -> NodeInputs:
        """Recomputed whenever the snapshot's ``telemetry_version`` moved (as serving does)."""
        assert self.obs is not None
        snap = self.obs.snapshot
        if (
            self._inputs is None
            or snap.telemetry_version != self._version
            or len(self._inputs.x) != len(snap)
        ):
            self._inputs, self._version = NodeInputs.of(snap), snap.telemetry_version
        return self._inputs

    def node_cols(self) -> F32:
        assert self.obs is not None
        nodes = np.asarray(self.obs.nodes, dtype=np.int64)
        c = self.nodes().x[nodes]
        c[:, AGE_COLUMNS] = age_columns(self.obs.snapshot, nodes)
        return c

    def label(
        self, scores: npt.NDArray[np.float64], rng: np.random.Generator
    ) -> tuple[int, npt.NDArray[np.bool_]]:
        """Ties break at random (kube-scheduler's selectHost); imitation targets the teacher's
        nodes within its ``tolerance`` of its best."""
        tol = 0.0 if self.teacher is None else self.teacher.tolerance
        return pick(scores, rng), scores >= scores.max() - tol

    @classmethod
    def step_all(cls, envs: Sequence[WindowEnv], nodes: Sequence[int]) -> list[float]:
        return [e.step(n) for e, n in zip(envs, nodes, strict=True)]

    def summary(self) -> dict[str, float]:
        s = self.env.summary()
        keys = ("utilization_pct", "sla_violation_pct", "cost", "p99_task_latency_s",
                "queueing_events")
        return {k: float(s[k]) for k in keys}


def pick(scores: npt.NDArray[np.float64], rng: np.random.Generator) -> int:
    """Argmax with random tie-breaking, as kube-scheduler's selectHost does."""
    ties = np.flatnonzero(scores >= scores.max())
    return int(ties[0] if ties.size == 1 else rng.choice(ties))
