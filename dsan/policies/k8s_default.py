"""kube-scheduler's default scoring, as of Kubernetes v1.31 (``pkg/scheduler/framework/plugins``):
NodeResourcesFit (LeastAllocated, cpu and memory) plus NodeResourcesBalancedAllocation, weight
1 each; GPUs are not scored (docs/policies.md) and are picked best-fit.
"""

from __future__ import annotations

import numpy as np

from dsan.core.snapshot import F64, I64, ClusterSnapshot, PodSpec
from dsan.policies.base import MAX_NODE_SCORE, BaseScorer

#: ``DefaultMilliCPURequest`` / ``DefaultMemoryRequest`` of ``pkg/scheduler/util``.
DEFAULT_MILLI_CPU = 100.0
DEFAULT_MEMORY_MIB = 200.0
MIB = 1 << 20


class K8sDefaultScorer(BaseScorer):
    name = "k8s-default"

    def score(self, pod: PodSpec, snap: ClusterSnapshot, nodes: I64) -> F64:
        cpu_cap = snap.cpu_cap[nodes].astype(np.int64)
        mem_cap = (snap.mem_cap[nodes] * MIB).astype(np.int64)  # kube-scheduler counts bytes
        cpu_nz = pod.cpu_milli if pod.cpu_milli > 0 else DEFAULT_MILLI_CPU
        mem_nz = pod.mem_mib if pod.mem_mib > 0 else DEFAULT_MEMORY_MIB
        cpu_req = (snap.cpu_used[nodes] + cpu_nz).astype(np.int64)
        mem_req = ((snap.mem_used[nodes] + mem_nz) * MIB).astype(np.int64)
        fit = (_least(cpu_req, cpu_cap) + _least(mem_req, mem_cap)) // 2

        f_cpu = np.minimum((snap.cpu_used[nodes] + pod.cpu_milli) / snap.cpu_cap[nodes], 1.0)
        f_mem = np.minimum((snap.mem_used[nodes] + pod.mem_mib) / snap.mem_cap[nodes], 1.0)
        balanced = np.trunc((1.0 - np.abs(f_cpu - f_mem) / 2.0) * MAX_NODE_SCORE).astype(np.int64)
        return (fit + balanced).astype(np.float64)


def _least(requested: I64, capacity: I64) -> I64:
    safe = np.maximum(capacity, 1)
    score = (capacity - requested) * MAX_NODE_SCORE // safe
    return np.where((capacity == 0) | (requested > capacity), 0, score)
