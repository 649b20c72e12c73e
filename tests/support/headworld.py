"""Random DSAN worlds for the head-cache tests (tests/unit/model): snapshots with exact ties
and nodes without telemetry, a residual model with every weight non-zero, and pod shapes."""

from __future__ import annotations

import numpy as np
import torch
from torch import nn

from dsan.core.snapshot import ClusterSnapshot, PodSpec, empty_snapshot
from dsan.model.net import DSANNet, ModelConfig

__all__ = ["PODS", "base_snapshot", "random_residual", "random_snapshot"]

PODS = [
    PodSpec("share", 4000, 16384, 1, 500),
    PodSpec("share-small", 1000, 2048, 1, 250, priority=500, task_type=1),
    PodSpec("whole", 8000, 32768, 2, 1000, gang_size=2),
    PodSpec("cpu", 2000, 4096, image=1),
    PodSpec("model", 4000, 8192, 1, 1000, gpu_models=(1,)),
]


def base_snapshot(n: int, rng: np.random.Generator) -> ClusterSnapshot:
    """n nodes of random sizes, 0-8 GPUs of three models, 5 nodes a rack, 20 a zone, names
    out of row order; nothing allocated."""
    gpus = rng.choice([0, 2, 4, 8], size=n)
    snap = empty_snapshot(
        [f"node-{(i * 7) % n:03d}" for i in range(n)],
        rng.choice([32000, 64000, 96000], size=n),
        rng.choice([131072, 262144], size=n),
        gpus,
        np.where(gpus > 0, rng.integers(0, 3, size=n), -1),
        ["A100", "V100", "T4"],
    )
    snap.zone = (np.arange(n) // 20).astype(np.int32)
    snap.rack = (np.arange(n) // 5).astype(np.int32)
    return snap


def random_snapshot(n: int, seed: int) -> ClusterSnapshot:
    """:func:`base_snapshot` with prices, images, pod counts, telemetry (none on ~10 % of
    the nodes), half the CPU and some GPU slots taken, and two pairs of identical nodes."""
    rng = np.random.default_rng(seed)
    snap = base_snapshot(n, rng)
    snap.hourly_cost = rng.uniform(0.5, 3.0, size=n)
    snap.images = [frozenset({1}) if i % 3 == 0 else frozenset() for i in range(n)]
    snap.pod_count = rng.integers(0, 10, size=n).astype(np.int32)
    snap.telemetry = rng.random((n, 6, 5)).astype(np.float32)
    snap.telemetry_age_s = rng.uniform(0, 600, size=n)
    snap.telemetry_age_s[rng.random(n) < 0.1] = np.inf  # no telemetry on some nodes
    snap.cpu_used[:] = np.round(rng.uniform(0, 0.5, size=n) * snap.cpu_cap, -3)
    snap.gpu_free[:] = np.where(snap.gpu_present, rng.choice([0, 250, 500, 1000], (n, 8)), 0)
    # Pairs of nodes in the same state: exact ties on every absolute quantity.
    for a, b in ((1, 2), (5, 9)):
        for col in (snap.cpu_cap, snap.cpu_used, snap.mem_cap, snap.mem_used, snap.gpu_count,
                    snap.gpu_model, snap.gpu_free, snap.hourly_cost):
            col[b] = col[a]
    return snap


def random_residual(hidden: int = 16) -> DSANNet:
    """A residual model whose every weight is non-zero (the shipped init zeroes some)."""
    torch.manual_seed(1)
    net = DSANNet(ModelConfig(hidden=hidden, head="residual"))
    with torch.no_grad():
        for lin in (net.head.skip, net.head.gpu_skip, net.head.mlp[2]):
            assert isinstance(lin, nn.Linear)
            nn.init.normal_(lin.weight, std=0.3)
        last = net.head.mlp[2]
        assert isinstance(last, nn.Linear)
        last.bias.fill_(0.2)
    return net
