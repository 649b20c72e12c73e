"""The FGD paper's experimental protocol on openb (``../shared/traces/README.md`` §2): nodes
permuted and pods shuffled by the seed, *tuned* to ``tune`` x GPU capacity, never finishing,
dropped when they fit nowhere. Ties go to the first node in the seed's order, which matches
the published numbers far better than FGD's lowest-name rule (docs/results/openb.md).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from dsan.core.snapshot import ClusterSnapshot, PodSpec
from dsan.features.frag import FragTracker
from dsan.features.target import TargetWorkload
from dsan.policies.base import Scorer
from dsan.policies.registry import POLICY_NAMES, make_scorer
from dsan.sim.openb import NodeTrace, PodTrace, load_nodes, load_pods
from dsan.sim.scheduler import name_rank, schedule_one

CURVE_MAX = 130
FRAG_POINTS = (50, 90, 100)
TIE_BREAKS = ("name", "order", "random")


def tie_ranks(rule: str, snap: ClusterSnapshot) -> np.ndarray | None:
    """``select_node``'s ``tie_rank`` for a tie rule: the lowest name, the snapshot's own
    order (built in the seed's node permutation), or None (random)."""
    if rule == "name":
        return name_rank(snap.names)
    if rule == "order":
        return np.arange(len(snap), dtype=np.int64)
    return None


@dataclass(frozen=True)
class OpenbConfig:
    """One run of the protocol. Validated at construction."""

    pods: Path
    nodes: Path
    policy: str = "fgd"
    seed: int = 42
    tune: float = 1.3
    tie_break: str = "order"

    def __post_init__(self) -> None:
        if self.policy not in POLICY_NAMES:
            raise ValueError(f"unknown policy {self.policy!r}; known: {', '.join(POLICY_NAMES)}")
        if not 0 < self.tune <= 10:
            raise ValueError(f"tune must be in (0, 10], got {self.tune}")
        if self.tie_break not in TIE_BREAKS:
            raise ValueError(f"tie_break must be one of {', '.join(TIE_BREAKS)}, "
                             f"got {self.tie_break!r}")


def tuned_order(req: npt.NDArray[np.int64], capacity_milli: int, tune: float,
                rng: np.random.Generator) -> npt.NDArray[np.int64]:
    """Indices of the submitted pods: a seeded shuffle, then uniform draws with replacement
    appended until the next draw would push the GPU request past ``tune * capacity``."""
    order = rng.permutation(len(req)).astype(np.int64)
    target = tune * capacity_milli
    total = int(req.sum())
    if total > target:  # trace asks for more than the target: drop random pods instead
        keep = np.cumsum(req[order]) <= target
        return order[keep]
    extra: list[npt.NDArray[np.int64]] = []
    while True:
        draw = rng.integers(len(req), size=4096)
        cum = total + np.cumsum(req[draw])
        over = np.flatnonzero(cum > target)
        if over.size:
            extra.append(draw[: over[0]])
            break
        extra.append(draw)
        total = int(cum[-1])
    return np.concatenate([order, *extra])


def discrete_curve(arrived_pct: npt.NDArray[np.float64], values: npt.NDArray[np.float64],
                   kmax: int = CURVE_MAX) -> npt.NDArray[np.float64]:
    """Mean of ``values`` per integer arrived percent 0..kmax (k +- 1 fallback; NaN if none)."""
    k = np.floor(arrived_pct + 0.5).astype(np.int64)
    ok = (k >= 0) & (k <= kmax + 1)
    sums = np.bincount(k[ok], weights=values[ok], minlength=kmax + 2)[: kmax + 2]
    cnts = np.bincount(k[ok], minlength=kmax + 2)[: kmax + 2].astype(np.float64)
    near_s = np.concatenate([[0.0], sums[:kmax]]) + sums[1:]  # buckets k - 1 and k + 1
    near_c = np.concatenate([[0.0], cnts[:kmax]]) + cnts[1:]
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(cnts[:-1] > 0, sums[:-1] / cnts[:-1],
                        np.where(near_c > 0, near_s / near_c, np.nan))


@dataclass
class OpenbRun:
    """One run's state before its first decision (:func:`start`)."""

    snap: ClusterSnapshot
    specs: list[PodSpec]
    target: TargetWorkload
    #: The submitted pods, as indices into ``specs``, and every pod's GPU request.
    order: npt.NDArray[np.int64]
    req: npt.NDArray[np.int64]
    scorer: Scorer
    tie_rank: npt.NDArray[np.int64] | None
    rng: np.random.Generator
    #: The pod trace's workload name.
    workload: str


def start(cfg: OpenbConfig, nodes: NodeTrace | None = None, pods: PodTrace | None = None,
          **scorer_kwargs: Any) -> OpenbRun:
    """Load the traces, shuffle the nodes, draw the submission order and make the scorer
    (``scorer_kwargs`` go to its factory), in the order the seeded stream expects."""
    nodes = nodes if nodes is not None else load_nodes(cfg.nodes)
    pods = pods if pods is not None else load_pods(cfg.pods, nodes.gpu_models)
    rng = np.random.default_rng(cfg.seed)
    snap = nodes.snapshot(rng.permutation(len(nodes)))
    specs = pods.pod_specs(snap.gpu_models)
    target = TargetWorkload.from_pods(specs, snap.gpu_models)
    capacity = 1000 * int(snap.gpu_count.sum())
    if capacity == 0:
        raise ValueError(f"{cfg.nodes}: the node list has no GPUs")
    req = pods.gpu_request_milli()
    order = tuned_order(req, capacity, cfg.tune, rng)
    scorer = make_scorer(cfg.policy, seed=cfg.seed, target_workload=target, **scorer_kwargs)
    return OpenbRun(snap, specs, target, order, req, scorer, tie_ranks(cfg.tie_break, snap), rng,
                    pods.workload)


def run_openb(cfg: OpenbConfig, nodes: NodeTrace | None = None, pods: PodTrace | None = None
              ) -> dict[str, Any]:
    """Run the protocol once; returns the JSON-ready result."""
    t0 = time.perf_counter()
    run = start(cfg, nodes, pods)
    snap, specs, target, order, req = run.snap, run.specs, run.target, run.order, run.req
    scorer, rng, tie_rank = run.scorer, run.rng, run.tie_rank
    total_gpus = int(snap.gpu_count.sum())
    capacity = 1000 * total_gpus
    tracker = FragTracker(snap, target)

    n = len(order)
    arrived = np.cumsum(req[order]).astype(np.float64)
    used = np.empty(n)
    frag = np.empty(n)
    placed = 0
    alloc_milli = 0
    frag_now = tracker.amount()
    for e, i in enumerate(order):
        pod = specs[i]
        where = schedule_one(pod, snap, scorer, rng, tie_rank)
        if where is not None:
            placed += 1
            alloc_milli += int(req[i])
            old = tracker.frag[where[0]]
            tracker.refresh(snap, [where[0]])
            frag_now += tracker.frag[where[0]] - old
        used[e] = alloc_milli
        frag[e] = frag_now
    runtime = time.perf_counter() - t0

    arrived_pct = arrived * 100.0 / capacity
    alloc_curve = discrete_curve(arrived_pct, used * 100.0 / capacity)
    frag_amount = discrete_curve(arrived_pct, frag * 100.0 / capacity)
    idle = capacity - used
    ratio = np.where(idle > 0, frag * 100.0 / np.maximum(idle, 1), 0.0)
    frag_ratio = discrete_curve(arrived_pct, ratio)
    return {
        "workload": run.workload,
        "policy": cfg.policy,
        "seed": cfg.seed,
        "tune": cfg.tune,
        "tie_break": cfg.tie_break,
        "total_gpus": total_gpus,
        "nodes": len(snap),
        "pods_submitted": n,
        "pods_placed": placed,
        "pods_failed": n - placed,
        "target_shapes": len(target),
        "unallocated_gpu_pct_at_100": _r(100.0 - alloc_curve[100]),
        "alloc_gpu_pct_curve": [_r(v) for v in alloc_curve],
        "unallocated_gpu_pct_curve": [_r(100.0 - v) for v in alloc_curve],
        "frag_amount_pct": {str(k): _r(frag_amount[k]) for k in FRAG_POINTS},
        "frag_ratio_pct": {str(k): _r(frag_ratio[k]) for k in FRAG_POINTS},
        "runtime_s": round(runtime, 3),
    }


def _r(v: float) -> float | None:
    return None if not np.isfinite(v) else round(float(v), 4)
