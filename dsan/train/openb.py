"""openb episodes (:class:`OpenbEnv`): the FGD protocol on ``n_nodes`` openb nodes; pods
arrive in the protocol's order, never leave, and each with two or more feasible nodes is a
decision. Reward: ``w_util`` GPU share granted, ``w_completion`` 0 (no pod finishes),
``w_cost`` minus the price of waking an idle node, ``w_sla`` minus the pods failed before
the next decision, ``frag_shaping`` the change of -fragmentation / capacity (potential
shaping: the optimal policy is unchanged, the credit dense). All per capacity or per pod.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import ClassVar

import numpy as np
import numpy.typing as npt

from dsan.core.filtering import allocate, feasible_nodes
from dsan.core.snapshot import ClusterSnapshot, PodSpec
from dsan.features import PlacementCache, TargetWorkload, fgd_select_gpus
from dsan.features.frag import FragTracker, fgd_select_gpus_many, node_frag
from dsan.sim.openb import NodeTrace, PodTrace, load_nodes, load_pods
from dsan.sim.paths import DEFAULT_NODES, openb_csv
from dsan.sim.protocol import tuned_order
from dsan.train.env import F32, Decision, NodeInputs

#: The openb pod lists the trainers draw episodes from.
WORKLOADS = (
    "openb_pod_list_default.csv",
    "openb_pod_list_gpushare40.csv",
    "openb_pod_list_multigpu20.csv",
    "openb_pod_list_cpu050.csv",
)


@dataclass(frozen=True)
class RewardWeights:
    util: float = 0.4
    completion: float = 0.3
    cost: float = 0.2
    sla: float = 0.1
    frag_shaping: float = 0.4

    def __post_init__(self) -> None:
        for k in ("util", "completion", "cost", "sla", "frag_shaping"):
            if not np.isfinite(getattr(self, k)) or getattr(self, k) < 0:
                raise ValueError(f"reward weight {k} must be a finite number >= 0")


@dataclass(frozen=True)
class EnvConfig:
    workloads: tuple[str, ...] = ("openb_pod_list_default.csv",)
    n_nodes: int = 96
    tune: float = 1.0
    reward: RewardWeights = field(default_factory=RewardWeights)

    def __post_init__(self) -> None:
        if not self.workloads:
            raise ValueError("EnvConfig.workloads must name at least one openb pod file")
        if self.n_nodes < 2:
            raise ValueError("EnvConfig.n_nodes must be >= 2")
        if not 0 < self.tune <= 2:
            raise ValueError("EnvConfig.tune must be within (0, 2]")


@functools.cache
def _nodes() -> NodeTrace:
    """openb's node list, parsed once per process."""
    return load_nodes(_path(DEFAULT_NODES))


@functools.cache
def _pods(name: str) -> tuple[PodTrace, list[PodSpec], TargetWorkload]:
    """A pod list, its pods and its target workload, parsed once per process."""
    gpu_models = _nodes().gpu_models
    trace = load_pods(_path(name), gpu_models)
    specs = trace.pod_specs(gpu_models)
    return trace, specs, TargetWorkload.from_pods(specs, gpu_models)


def _path(name: str) -> Path:
    p = Path(name)
    return p if p.is_file() else openb_csv(name)


@dataclass
class OpenbEnv:
    """One openb episode, an :class:`~dsan.train.env.Env`; a step is charged the pods that
    fail before the next decision (the first step also those before it)."""

    fixed_nodes: ClassVar[bool] = True

    snap: ClusterSnapshot
    pods: list[PodSpec]
    order: npt.NDArray[np.int64]
    target: TargetWorkload
    weights: RewardWeights
    capacity: float
    pos: int = 0
    alloc: float = 0.0
    failed: int = 0
    decisions: int = 0

    def __post_init__(self) -> None:
        self.frag = FragTracker(self.snap, self.target)
        cost = self.snap.hourly_cost
        self.price = cost if cost is not None else np.ones(len(self.snap))
        self.total_price = float(self.price.sum())
        self.cache = PlacementCache(self.target)
        self._inputs: NodeInputs | None = None
        self._pending: Decision | None = None
        self._started = False
        self._carry = 0.0  # SLA penalty waiting for the next step's reward

    @property
    def alloc_pct(self) -> float:
        return 100.0 * self.alloc / self.capacity

    # -- the Env protocol ------------------------------------------------------------------

    def decision(self) -> Decision | None:
        if not self._started:
            self._started = True
            self._carry += self._advance()
        return self._pending

    def nodes(self) -> NodeInputs:
        if self._inputs is None:  # no telemetry, no topology change: once per episode
            self._inputs = NodeInputs.of(self.snap)
        return self._inputs

    def node_cols(self) -> F32:
        return self.nodes().x[self._now().cand]

    def label(
        self, scores: npt.NDArray[np.float64], rng: np.random.Generator
    ) -> tuple[int, npt.NDArray[np.bool_]]:
        """Ties go to the lowest node name, as in the FGD simulator (a fixed order consolidates);
        imitation targets that exact choice."""
        cand = self._now().cand
        ties = np.flatnonzero(scores >= scores.max())
        a = int(ties[np.argmin(np.asarray(self.snap.names, dtype=object)[cand[ties]])])
        return a, np.arange(len(cand)) == a

    def step(self, node: int) -> float:
        return self.step_all([self], [node])[0]

    @classmethod
    def step_all(cls, envs: Sequence[OpenbEnv], nodes: Sequence[int]) -> list[float]:
        """:meth:`step` of each, FGD's GPU choices and the fragmentation refresh in one call per
        target (numpy's per-call overhead dominates one-row calls; exact, as ``node_frag`` sums
        integers)."""
        pods = [e._now().pod for e in envs]
        idle = [e.snap.cpu_used[n] == 0 for e, n in zip(envs, nodes, strict=True)]
        before = [float(e.frag.frag[n]) for e, n in zip(envs, nodes, strict=True)]
        groups: dict[int, list[int]] = {}
        for i, e in enumerate(envs):
            groups.setdefault(id(e.target), []).append(i)
        for idx in groups.values():
            eps, ps, at = [envs[i] for i in idx], [pods[i] for i in idx], [nodes[i] for i in idx]
            gpus = fgd_select_gpus_many(ps, [e.snap for e in eps], at, eps[0].target,
                                        [e.frag.access for e in eps])
            for e, p, n, g in zip(eps, ps, at, gpus, strict=True):
                allocate(e.snap, p, n, g)
            if len(idx) == 1:
                eps[0].frag.refresh(eps[0].snap, at)
                continue
            cpu_free = np.array([e.snap.cpu_cap[n] - e.snap.cpu_used[n]
                                 for e, n in zip(eps, at, strict=True)])
            free = np.stack([e.snap.gpu_free[n] for e, n in zip(eps, at, strict=True)])
            acc = np.stack([e.frag.access[:, n] for e, n in zip(eps, at, strict=True)], axis=1)
            got = node_frag(cpu_free, free, acc, eps[0].target)
            for e, n, f in zip(eps, at, got.tolist(), strict=True):
                e.frag.frag[n] = f
        return [e._close(p, n, i, b)
                for e, p, n, i, b in zip(envs, pods, nodes, idle, before, strict=True)]

    def summary(self) -> dict[str, float]:
        return {"alloc_pct": self.alloc_pct, "failed": self.failed, "pods": len(self.order)}

    def _now(self) -> Decision:
        assert self._pending is not None, "no pending decision"
        return self._pending

    def _advance(self) -> float:
        """Move to the next pod with >= 2 feasible nodes, binding pods with one and dropping
        pods with none on the way; the SLA penalty of those (0 once no decision is left)."""
        self._pending, sla = None, 0.0
        while self.pos < len(self.order):
            pod = self.pods[int(self.order[self.pos])]
            self.pos += 1
            cand = feasible_nodes(pod, self.snap)
            if cand.size == 0:
                self.failed += 1
                sla -= 1.0 / len(self.order)
            elif cand.size == 1:
                node = int(cand[0])
                gpus = fgd_select_gpus(pod, self.snap, node, self.target, self.frag.access)
                allocate(self.snap, pod, node, gpus)
                self.alloc += pod.gpu_total_milli
                self.frag.refresh(self.snap, [node])
            else:
                # the tracker's current fragmentation is every what-if's "before"
                self.cache.adopt_fragmentation(self.frag.frag)
                self._pending = Decision(pod, self.snap, cand)
                return sla
        return 0.0

    def _close(self, pod: PodSpec, node: int, was_idle: bool, frag_before: float) -> float:
        """The reward of ``pod`` bound to ``node`` (the node's fragmentation current; no pod
        completes), plus the failures before it (first step) and until the next decision."""
        milli = pod.gpu_total_milli
        self.alloc += milli
        self.decisions += 1
        w = self.weights
        dphi = -(self.frag.frag[node] - frag_before) / self.capacity
        cost = -float(self.price[node]) / self.total_price if was_idle else 0.0
        r = float(w.util * (milli / self.capacity) + w.cost * cost + w.frag_shaping * dphi)
        r += w.sla * self._carry
        self._carry = 0.0
        return r + w.sla * self._advance()


def make_episode(cfg: EnvConfig, seed: int, workload: str | None = None) -> OpenbEnv:
    """A seeded episode: ``n_nodes`` random openb nodes, pods in the protocol's order."""
    rng = np.random.default_rng(seed)
    nodes = _nodes()
    name = workload or cfg.workloads[int(rng.integers(len(cfg.workloads)))]
    trace, specs, target = _pods(name)
    pick = rng.choice(len(nodes), size=min(cfg.n_nodes, len(nodes)), replace=False)
    snap = nodes.snapshot(pick)
    snap.pod_count = np.zeros(len(snap), dtype=np.int32)
    capacity = 1000.0 * float(snap.gpu_count.sum())
    order = tuned_order(trace.gpu_request_milli(), int(capacity), cfg.tune, rng)
    return OpenbEnv(snap, specs, order, target, cfg.reward, capacity)
