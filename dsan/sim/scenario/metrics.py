"""Table 1 metrics (formulas in docs/scenarios.md, *Metrics*) as small pure functions, and
the run's accumulator. Utilisation counts requests of bound pods over powered-on capacity;
pods never started or bound count until the horizon (censored).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

F64 = npt.NDArray[np.float64]
RESOURCES = ("cpu", "mem", "gpu")


def utilization(used_integral: F64, cap_integral: F64) -> dict[str, float]:
    """Per-resource and mean time-weighted utilisation in percent."""
    pct = np.where(cap_integral > 0, used_integral / np.maximum(cap_integral, 1e-12), 0.0) * 100
    out = {f"{r}_util_pct": float(p) for r, p in zip(RESOURCES, pct, strict=True)}
    out["utilization_pct"] = float(pct.mean())
    return out


def p99(values: F64) -> float:
    """Nearest-rank 99th percentile; 0 for no values."""
    if values.size == 0:
        return 0.0
    s = np.sort(values)
    return float(s[max(0, math.ceil(0.99 * s.size) - 1)])


def billed_seconds(t0: float, t1: float, on: npt.NDArray[np.bool_], empty_since: F64,
                   grace_s: float) -> F64:
    """Seconds each node is billed in [t0, t1]: busy nodes all of it, empty ones until
    ``empty_since + grace``, powered-off ones none."""
    off_at = np.where(np.isfinite(empty_since), empty_since + grace_s, np.inf)
    billed = np.clip(off_at - t0, 0.0, t1 - t0)
    return np.where(on, billed, 0.0)


def queueing(waits: F64, threshold_s: float) -> tuple[int, float]:
    """(number of waits over the threshold, mean wait)."""
    if waits.size == 0:
        return 0, 0.0
    return int((waits > threshold_s).sum()), float(waits.mean())


def queued_mean_wait(waits: F64, threshold_s: float) -> float:
    """Mean wait of the waits over the threshold (0 when none is)."""
    q = waits[waits > threshold_s]
    return float(q.mean()) if q.size else 0.0


@dataclass
class ReclaimCost:
    """What reclamation (preemption of reclaimable pods) cost the work it shrank or evicted:
    evicted pods per class, jobs hit, best-effort GPU work thrown away (restart from scratch,
    GPU-share x seconds of progress), Spark in-flight task work lost (cores x
    ``batch.evict_loss_s``), elastic training stalled by the checkpoint/restart of a shrink
    (GPUs still held x ``training.elastic.restart_s``)."""

    evicted: dict[str, int] = field(default_factory=dict)
    jobs: set[int] = field(default_factory=set)
    lost_gpu_s: float = 0.0
    lost_core_s: float = 0.0
    stall_gpu_s: float = 0.0

    def add(self, kind: str, job: int, lost_gpu_s: float = 0.0, lost_core_s: float = 0.0,
            stall_gpu_s: float = 0.0) -> None:
        self.evicted[kind] = self.evicted.get(kind, 0) + 1
        self.jobs.add(job)
        self.lost_gpu_s += lost_gpu_s
        self.lost_core_s += lost_core_s
        self.stall_gpu_s += stall_gpu_s

    def summary(self) -> dict[str, object]:
        return {"evicted_pods": dict(sorted(self.evicted.items())),
                "evictions": sum(self.evicted.values()), "jobs_hit": len(self.jobs),
                "lost_gpu_s": self.lost_gpu_s, "lost_core_s": self.lost_core_s,
                "stall_gpu_s": self.stall_gpu_s,
                "gpu_s_total": self.lost_gpu_s + self.stall_gpu_s}


@dataclass
class RewardParts:
    """What happened between two decisions, raw, for the trainer to weight into a reward."""

    dt_s: float = 0.0
    util_integral: float = 0.0  # ∫ mean(CPU, mem, GPU) utilisation dt over the interval
    jobs_completed: int = 0
    jct_sum_s: float = 0.0
    cost: float = 0.0
    sla_items: int = 0
    sla_violations: int = 0


@dataclass
class Accumulator:
    """Running sums the engine updates; :meth:`summary` applies the formulas above."""

    used_integral: F64 = field(default_factory=lambda: np.zeros(3))
    cap_integral: F64 = field(default_factory=lambda: np.zeros(3))
    cost: float = 0.0
    sla_items: int = 0
    sla_violations: int = 0
    sla_by_kind: dict[str, list[int]] = field(default_factory=dict)
    jct: list[float] = field(default_factory=list)
    jct_by_kind: dict[str, list[float]] = field(default_factory=dict)
    preemptions: int = 0
    #: Version 3: measured usage (CPU demand capped at capacity, allocated memory, GPU share x
    #: activity) and the capacity of every node, over the measured window.
    usage_integral: F64 = field(default_factory=lambda: np.zeros(3))
    capacity_integral: F64 = field(default_factory=lambda: np.zeros(3))
    elastic_grows: int = 0  # extra workers that joined a running training job
    grow_stall_gpu_s: float = 0.0  # their checkpoint/restart pauses x GPUs held
    step: RewardParts = field(default_factory=RewardParts)
    #: Plot samples per web window: time, powered-on utilisation (%), powered-on nodes.
    series_t: list[float] = field(default_factory=list)
    series_util: list[float] = field(default_factory=list)
    series_nodes_on: list[int] = field(default_factory=list)

    def sla(self, kind: str, violated: int, items: int = 1) -> None:
        self.sla_items += items
        self.sla_violations += violated
        rec = self.sla_by_kind.setdefault(kind, [0, 0])
        rec[0] += violated
        rec[1] += items
        self.step.sla_items += items
        self.step.sla_violations += violated

    def completed(self, kind: str, jct_s: float) -> None:
        self.jct.append(jct_s)
        self.jct_by_kind.setdefault(kind, []).append(jct_s)
        self.step.jobs_completed += 1
        self.step.jct_sum_s += jct_s

    def take_step(self) -> RewardParts:
        out, self.step = self.step, RewardParts()
        return out

    def summary(self, latencies: F64, waits: F64, queue_threshold_s: float,
                waits_by_kind: dict[str, F64]) -> dict[str, object]:
        out: dict[str, object] = dict(utilization(self.used_integral, self.cap_integral))
        out["p99_task_latency_s"] = p99(latencies)
        out["sla_violation_pct"] = 100.0 * self.sla_violations / max(self.sla_items, 1)
        out["sla_by_kind"] = {
            k: {"violations": v[0], "items": v[1], "pct": 100.0 * v[0] / max(v[1], 1)}
            for k, v in sorted(self.sla_by_kind.items())
        }
        out["jct_s"] = float(np.mean(self.jct)) if self.jct else 0.0
        out["jct_by_kind_s"] = {k: float(np.mean(v)) for k, v in sorted(self.jct_by_kind.items())}
        out["jobs_completed"] = len(self.jct)
        out["cost"] = self.cost
        events, mean_wait = queueing(waits, queue_threshold_s)
        out["queueing_events"] = events
        out["mean_wait_s"] = mean_wait
        out["queueing_by_kind"] = {
            k: dict(zip(("events", "mean_wait_s"), queueing(w, queue_threshold_s), strict=True))
            for k, w in sorted(waits_by_kind.items())
        }
        out["preemptions"] = self.preemptions
        return out
