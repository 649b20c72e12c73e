"""The scenario's cluster: GPU nodes first, in whole NVLink domains split over the first two
racks; CPU node sizes interleaved so every rack holds a mix; racks of ``ceil(n / racks)``
nodes, mapped onto zones in contiguous blocks.
"""

from __future__ import annotations

import math

import numpy as np

from dsan.core.snapshot import MAX_GPUS, TELEMETRY_CHANNELS, ClusterSnapshot, empty_snapshot
from dsan.sim.scenario.config import ClusterConfig, NodeGroup


def build_cluster(cfg: ClusterConfig, telemetry_len: int) -> ClusterSnapshot:
    gpu_groups = [g for g in cfg.node_groups if g.gpus > 0]
    cpu_groups = [g for g in cfg.node_groups if g.gpus == 0]
    models = sorted({g.gpu_model for g in gpu_groups})
    groups: list[NodeGroup] = []  # each node's group
    names: list[str] = []
    nvlink: list[int] = []
    domain = 0
    for g in gpu_groups:
        per = max(1, g.nvlink_domain_nodes)
        for i in range(g.count):
            names.append(f"gpu-{g.gpu_model.lower()}-{len(names):03d}")
            groups.append(g)
            nvlink.append(domain + i // per)
        domain += math.ceil(g.count / per)
    n_gpu_nodes = len(names)
    # Interleave CPU sizes so each rack gets a mix rather than one size per rack.
    queues = [[g] * g.count for g in cpu_groups]
    while any(queues):
        for q in queues:
            if q:
                g = q.pop()
                names.append(f"cpu-{int(g.cpu_milli // 1000)}c-{len(names):03d}")
                groups.append(g)
                nvlink.append(-1)
    n = len(names)
    per_rack = math.ceil(n / cfg.racks)
    rack = np.empty(n, dtype=np.int32)
    gpu_racks = min(2, cfg.racks)
    filled = np.zeros(cfg.racks, dtype=np.int64)
    for i in range(n_gpu_nodes):
        r = min(gpu_racks - 1, nvlink[i] * gpu_racks // max(domain, 1))
        rack[i] = r
        filled[r] += 1
    r = 0
    for i in range(n_gpu_nodes, n):
        while filled[r] >= per_rack:
            r = (r + 1) % cfg.racks
        rack[i] = r
        filled[r] += 1
    snap = empty_snapshot(names, [g.cpu_milli for g in groups], [g.mem_mib for g in groups],
                          [min(g.gpus, MAX_GPUS) for g in groups],
                          [models.index(g.gpu_model) if g.gpus else -1 for g in groups], models)
    snap.rack = rack
    snap.zone = (rack * cfg.zones // cfg.racks).astype(np.int32)
    snap.nvlink = np.asarray(nvlink, dtype=np.int32)
    snap.hourly_cost = np.array([g.hourly_cost for g in groups], dtype=np.float64)
    snap.telemetry = np.zeros((n, telemetry_len, len(TELEMETRY_CHANNELS)), dtype=np.float32)
    snap.telemetry_age_s = np.zeros(n)
    snap.pod_count = np.zeros(n, dtype=np.int32)
    snap.ls_pods = np.zeros(n, dtype=np.int32)
    snap.images = [frozenset() for _ in range(n)]
    return snap
