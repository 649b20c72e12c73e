"""Contention, vectorised and pure: how co-located pods slow each other down, and what that
does to web latency (formulas in docs/scenarios.md, *Contention*). Web replicas are M/M/1
queues with service rate ``mu * speed``; an unstable one (lambda >= mu * speed) misses.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

F64 = npt.NDArray[np.float64]


def node_speed(cpu_demand: F64, cpu_cap: F64, threshold: float, beta: float) -> F64:
    """Per-node speed in (0, 1]: CPU time-sharing beyond capacity, over interference on a hot
    node, ``min(1, 1/D) / (1 + beta * max(0, D - threshold))`` with D = demand / capacity."""
    d = cpu_demand / cpu_cap
    share = np.minimum(1.0, 1.0 / np.maximum(d, 1e-12))
    return share / (1.0 + beta * np.maximum(0.0, d - threshold))


def mm1_tail(lam: F64, mu: F64, slo_s: float) -> F64:
    """P(response time > slo) for M/M/1 replicas; 1 where the queue is unstable."""
    gap = mu - lam
    return np.where(gap > 0, np.exp(-np.maximum(gap, 0.0) * slo_s), 1.0)


def diurnal_rho(t_s: float, trough: float, peak: float, peak_hour: float) -> float:
    """Per-replica utilisation target over the day: a cosine between trough and peak."""
    phase = 2.0 * np.pi * (t_s / 3600.0 - peak_hour) / 24.0
    return float(trough + (peak - trough) * 0.5 * (1.0 + np.cos(phase)))


def service_violations(svc_of_replica: npt.NDArray[np.int64], lam: F64, mu: F64, slo_s: float,
                       n_services: int, running_per_service: npt.NDArray[np.int64]
                       ) -> npt.NDArray[np.bool_]:
    """Which services miss their p99 SLO now: a service's latency is the mixture over its
    replicas, so its p99 exceeds the SLO when their mean tail probability at the SLO exceeds
    1 %. A service with no running replica misses."""
    tail = mm1_tail(lam, mu, slo_s)
    tail_sum = np.bincount(svc_of_replica, weights=tail, minlength=n_services)
    mean_tail = tail_sum / np.maximum(running_per_service, 1)
    return (mean_tail > 0.01) | (running_per_service == 0)
