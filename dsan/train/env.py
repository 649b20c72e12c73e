"""Training scenarios: the FGD protocol on openb, shrunk to a few hundred nodes per episode.

An episode samples ``n_nodes`` GPU nodes of the openb node list and submits pods of one
workload file in the protocol's order (seeded shuffle, :func:`dsan.sim.protocol.tuned_order`)
until the arrived GPU request reaches ``tune`` x the episode's capacity. Pods are placed one
at a time and never leave. Every pod with two or more feasible nodes is a *decision*.

Reward of a decision (weights configurable, defaults the article's 0.4/0.3/0.2/0.1)::

    r = w_util * util + w_jct * completion + w_cost * cost + w_sla * sla + frag_shaping * dPhi

* util       = GPU milli the pod got / episode GPU capacity  (> 0; sums to the allocation ratio)
* completion = 0 on openb (no pod ever finishes; the seed scenario fills it)
* cost       = -(price of the node if it was idle before) / total price  (waking nodes costs)
* sla        = -(pods that failed before the next decision) / pods submitted  (<= 0)
* dPhi       = Phi(after) - Phi(before), Phi = -cluster fragmentation / capacity: potential
  shaping (Ng et al. '99), which leaves the optimal policy unchanged and gives dense credit.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import numpy.typing as npt

from dsan.core.snapshot import ClusterSnapshot, PodSpec
from dsan.features import TargetWorkload
from dsan.features.frag import FragTracker, node_frag
from dsan.sim.openb import NodeTrace, PodTrace, load_nodes, load_pods
from dsan.sim.paths import DEFAULT_NODES, openb_csv
from dsan.sim.protocol import tuned_order


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
    nodes_csv: str = DEFAULT_NODES
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


class TraceCache:
    """Parsed CSVs, loaded once per process."""

    def __init__(self) -> None:
        self._nodes: dict[str, NodeTrace] = {}
        self._pods: dict[str, tuple[PodTrace, list[PodSpec], TargetWorkload]] = {}

    def nodes(self, name: str) -> NodeTrace:
        if name not in self._nodes:
            self._nodes[name] = load_nodes(_path(name))
        return self._nodes[name]

    def pods(self, name: str, nodes: NodeTrace) -> tuple[PodTrace, list[PodSpec], TargetWorkload]:
        if name not in self._pods:
            trace = load_pods(_path(name), nodes.gpu_models)
            specs = trace.pod_specs(nodes.gpu_models)
            self._pods[name] = (trace, specs, TargetWorkload.from_pods(specs, nodes.gpu_models))
        return self._pods[name]


def _path(name: str) -> Path:
    p = Path(name)
    return p if p.is_file() else openb_csv(name)


CACHE = TraceCache()


@dataclass
class Episode:
    """One scenario instance, stepped by :meth:`next_decision` / :meth:`place`."""

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
        price = (
            self.snap.hourly_cost if self.snap.hourly_cost is not None else np.ones(len(self.snap))
        )
        self.price = price
        self.total_price = float(price.sum())

    def next_decision(self) -> tuple[PodSpec, npt.NDArray[np.int64], float] | None:
        """Advance to the next pod with >= 2 feasible nodes; returns it, its candidates and the
        SLA penalty of pods that failed on the way. Pods with one candidate are bound here."""
        from dsan.core.filtering import allocate, feasible_nodes
        from dsan.features import fgd_select_gpus

        sla = 0.0
        while self.pos < len(self.order):
            pod = self.pods[int(self.order[self.pos])]
            self.pos += 1
            cand = feasible_nodes(pod, self.snap)
            if cand.size == 0:
                self.failed += 1
                sla -= 1.0 / len(self.order)
                continue
            if cand.size == 1:
                node = int(cand[0])
                gpus = fgd_select_gpus(pod, self.snap, node, self.target, self.frag.access)
                allocate(self.snap, pod, node, gpus)
                self.alloc += pod.gpu_total_milli
                self.frag.refresh(self.snap, [node])
                continue
            return pod, cand, sla
        return None

    def place(self, pod: PodSpec, node: int) -> npt.NDArray[np.float64]:
        """Bind ``pod`` to ``node``; returns reward parts (util, completion, cost, dPhi)."""
        bound = self.bind(pod, node)
        self.frag.refresh(self.snap, [node])
        return self.settle(bound)

    def bind(self, pod: PodSpec, node: int) -> Bound:
        """The first half of :meth:`place`: FGD's GPUs for ``pod`` on ``node``, allocated. The
        node's fragmentation is stale until :func:`refresh_bound` (or ``frag.refresh``)."""
        from dsan.core.filtering import allocate
        from dsan.features import fgd_select_gpus

        snap = self.snap
        bound = Bound(node, snap.cpu_used[node] == 0, float(self.frag.frag[node]), pod)
        gpus = fgd_select_gpus(pod, snap, node, self.target, self.frag.access)
        allocate(snap, pod, node, gpus)
        return bound

    def settle(self, b: Bound) -> npt.NDArray[np.float64]:
        """The second half of :meth:`place`, once the node's fragmentation is current."""
        milli = b.pod.gpu_total_milli
        self.alloc += milli
        self.decisions += 1
        dphi = -(self.frag.frag[b.node] - b.frag_before) / self.capacity
        cost = -float(self.price[b.node]) / self.total_price if b.was_idle else 0.0
        return np.array([milli / self.capacity, 0.0, cost, dphi])

    def reward(self, parts: npt.NDArray[np.float64], sla: float) -> float:
        w = self.weights
        return float(
            w.util * parts[0]
            + w.completion * parts[1]
            + w.cost * parts[2]
            + w.sla * sla
            + w.frag_shaping * parts[3]
        )

    @property
    def alloc_pct(self) -> float:
        return 100.0 * self.alloc / self.capacity


@dataclass
class Bound:
    """A pod bound by :meth:`Episode.bind` whose reward waits for the node's fragmentation."""

    node: int
    was_idle: bool
    frag_before: float
    pod: PodSpec


def bind_many(eps: Sequence[Episode], pods: Sequence[PodSpec], nodes: Sequence[int]) -> list[Bound]:
    """:meth:`Episode.bind` of one pod in each of several episodes, FGD's GPU choices in one
    batched call per target workload (:func:`dsan.features.gpuchoice.fgd_select_gpus_many`)."""
    from dsan.core.filtering import allocate
    from dsan.features.gpuchoice import fgd_select_gpus_many

    bound = [
        Bound(n, ep.snap.cpu_used[n] == 0, float(ep.frag.frag[n]), pod)
        for ep, pod, n in zip(eps, pods, nodes, strict=True)
    ]
    groups: dict[int, list[int]] = {}
    for i, ep in enumerate(eps):
        groups.setdefault(id(ep.target), []).append(i)
    for idx in groups.values():
        gpus = fgd_select_gpus_many(
            [pods[i] for i in idx],
            [eps[i].snap for i in idx],
            [nodes[i] for i in idx],
            eps[idx[0]].target,
            [eps[i].frag.access for i in idx],
        )
        for i, g in zip(idx, gpus, strict=True):
            allocate(eps[i].snap, pods[i], nodes[i], g)
    return bound


def refresh_bound(eps: Sequence[Episode], nodes: Sequence[int]) -> None:
    """``ep.frag.refresh(ep.snap, [node])`` for each pair, in one fragmentation call per
    target workload: a lockstep step binds one pod in each of K episodes, and numpy's
    per-call overhead, not arithmetic, is the cost of K one-row calls. Exact: a row's value
    does not depend on its batch (:func:`dsan.features.frag.node_frag` sums integers)."""
    groups: dict[int, list[int]] = {}
    for i, ep in enumerate(eps):
        groups.setdefault(id(ep.frag.target), []).append(i)
    for idx in groups.values():
        if len(idx) == 1:
            eps[idx[0]].frag.refresh(eps[idx[0]].snap, [nodes[idx[0]]])
            continue
        snaps = [eps[i].snap for i in idx]
        at = [nodes[i] for i in idx]
        cpu_free = np.array([s.cpu_cap[n] - s.cpu_used[n] for s, n in zip(snaps, at, strict=True)])
        free = np.stack([s.gpu_free[n] for s, n in zip(snaps, at, strict=True)])
        acc = np.stack([eps[i].frag.access[:, n] for i, n in zip(idx, at, strict=True)], axis=1)
        got = node_frag(cpu_free, free, acc, eps[idx[0]].frag.target)
        for i, n, f in zip(idx, at, got.tolist(), strict=True):
            eps[i].frag.frag[n] = f


def make_episode(cfg: EnvConfig, seed: int, workload: str | None = None) -> Episode:
    """A seeded episode: ``n_nodes`` random openb nodes, pods in the protocol's order."""
    rng = np.random.default_rng(seed)
    nodes = CACHE.nodes(cfg.nodes_csv)
    name = workload or cfg.workloads[int(rng.integers(len(cfg.workloads)))]
    trace, specs, target = CACHE.pods(name, nodes)
    pick = rng.choice(len(nodes), size=min(cfg.n_nodes, len(nodes)), replace=False)
    snap = nodes.snapshot(pick)
    snap.pod_count = np.zeros(len(snap), dtype=np.int32)
    capacity = 1000.0 * float(snap.gpu_count.sum())
    order = tuned_order(trace.gpu_request_milli(), int(capacity), cfg.tune, rng)
    return Episode(snap, specs, order, target, cfg.reward, capacity)
