"""Tetris's alignment score (Grandl et al., SIGCOMM'14, §3.1): ``sum_r (req_r / cap_r) *
(free_r / cap_r)`` over CPU, memory and GPU milli, higher is better. The packing term alone:
the shortest-remaining-time term needs durations the openb protocol lacks. GPUs best-fit.
"""

from __future__ import annotations

import numpy as np

from dsan.core.snapshot import F64, I64, ClusterSnapshot, PodSpec
from dsan.policies.base import BaseScorer


class TetrisScorer(BaseScorer):
    name = "tetris"

    def score(self, pod: PodSpec, snap: ClusterSnapshot, nodes: I64) -> F64:
        cpu_cap = np.maximum(snap.cpu_cap[nodes], 1.0)
        mem_cap = np.maximum(snap.mem_cap[nodes], 1.0)
        gpu_cap = np.maximum(snap.gpu_count[nodes] * 1000.0, 1.0)
        cpu = (pod.cpu_milli / cpu_cap) * ((snap.cpu_cap[nodes] - snap.cpu_used[nodes]) / cpu_cap)
        mem = (pod.mem_mib / mem_cap) * ((snap.mem_cap[nodes] - snap.mem_used[nodes]) / mem_cap)
        gpu = (pod.gpu_total_milli / gpu_cap) * (snap.gpu_free[nodes].sum(axis=1) / gpu_cap)
        return np.asarray(cpu + mem + gpu, dtype=np.float64)
