"""Tiny hand-worked scenarios: a 3-node cluster and workloads built job by job.

(A uniquely named module rather than conftest, so tests can import it unambiguously.)"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from dsan.core.snapshot import PodSpec
from dsan.sim.scenario.config import ScenarioConfig, from_dict
from dsan.sim.scenario.engine import Decision, Engine

HORIZON_S = 1000.0


def tiny_config(**over: Any) -> ScenarioConfig:
    """Nodes 0 and 1: GPU (4 x A100, 64 cores, 256 GiB, cost 4/h, one NVLink domain);
    node 2: CPU (16 cores, 64 GiB, cost 1/h). Image 0 pulls in 1 s, image 1 in 2 s; container
    start 2 s; grace 600 s; no generated load."""
    d: dict[str, Any] = {
        "hours": HORIZON_S / 3600.0,
        "cluster": {
            "racks": 1,
            "zones": 1,
            "node_groups": [
                {
                    "count": 2,
                    "cpu_milli": 64000,
                    "mem_mib": 262144,
                    "gpus": 4,
                    "gpu_model": "A100",
                    "nvlink_domain_nodes": 2,
                    "hourly_cost": 4.0,
                },
                {"count": 1, "cpu_milli": 16000, "mem_mib": 65536, "hourly_cost": 1.0},
            ],
        },
        "startup": {
            "container_start_s": 2.0,
            "pull_mib_per_s": 200.0,
            "node_boot_s": 90.0,
            "image_mib": [200.0, 400.0],
        },
        "training": {
            "jobs_per_h": 0.0,
            "gpu_count_probs": {"1": 1.0},
            "quantile_points": [0, 100],
            "duration_quantiles_s": {"1": [100, 100]},
            "images": [0],
        },
        "batch": {"jobs_per_h": 0.0, "images": [0]},
        "web": {"services": 0, "images": [1]},
        "besteffort": {"pods_per_h": 0.0, "images": [1]},
    }
    for k, v in over.items():
        if isinstance(v, dict) and isinstance(d.get(k), dict):
            d[k] = {**d[k], **v}
        else:
            d[k] = v
    return from_dict(d)


def train_pod(name: str, gang: int = 1, prio: int = 500) -> PodSpec:
    return PodSpec(
        name=name,
        cpu_milli=8000,
        mem_mib=32768,
        num_gpu=1,
        gpu_milli=1000,
        priority=prio,
        task_type=1,
        gang_size=gang,
        image=0,
    )


def first_node(d: Decision) -> int:
    return int(d.nodes[0])


def last_node(d: Decision) -> int:
    return int(d.nodes[-1])


def drive(
    engine: Engine,
    policy: Callable[[Decision], int] = first_node,
    seen: list[Decision] | None = None,
) -> dict[str, Any]:
    gen = engine.decisions()
    try:
        d = next(gen)
        while True:
            if seen is not None:
                seen.append(d)
            d = gen.send(policy(d))
    except StopIteration:
        pass
    return engine.summary()


def close(a: float, b: float) -> bool:
    return bool(np.isclose(a, b, rtol=1e-9, atol=1e-6))
