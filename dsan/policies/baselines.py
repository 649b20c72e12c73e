"""The heuristics but FGD: kube-scheduler's default scoring, Tetris, and the FGD paper's five
baselines, each as its FGD simulator plugin scores (integer arithmetic included: truncation
decides ties). Formulas and sources: docs/policies.md.
"""

from __future__ import annotations

import numpy as np

from dsan.core.filtering import best_fit_gpus
from dsan.core.snapshot import F64, I32, I64, MAX_GPUS, ClusterSnapshot, PodSpec
from dsan.policies.base import MAX_NODE_SCORE, Scorer

#: The FGD simulator's normalisers: the largest node spec (``MaxSpecCpu``, ``MaxSpecGpu``).
MAX_SPEC_CPU = 128_000
MAX_SPEC_GPU = 8_000
MILLI = 1000
#: ``DefaultMilliCPURequest`` / ``DefaultMemoryRequest`` of ``pkg/scheduler/util``.
DEFAULT_MILLI_CPU = 100.0
DEFAULT_MEMORY_MIB = 200.0
MIB = 1 << 20


class K8sDefaultScorer(Scorer):
    """kube-scheduler's default scoring, as of Kubernetes v1.31
    (``pkg/scheduler/framework/plugins``): NodeResourcesFit (LeastAllocated, cpu and memory)
    plus NodeResourcesBalancedAllocation, weight 1 each; GPUs are not scored (docs/policies.md)
    and are picked best-fit."""

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


class TetrisScorer(Scorer):
    """Tetris's alignment score (Grandl et al., SIGCOMM'14, §3.1): ``sum_r (req_r / cap_r) *
    (free_r / cap_r)`` over CPU, memory and GPU milli, higher is better. The packing term
    alone: the shortest-remaining-time term needs durations the openb protocol lacks. GPUs
    best-fit."""

    name = "tetris"

    def score(self, pod: PodSpec, snap: ClusterSnapshot, nodes: I64) -> F64:
        cpu_cap = np.maximum(snap.cpu_cap[nodes], 1.0)
        mem_cap = np.maximum(snap.mem_cap[nodes], 1.0)
        gpu_cap = np.maximum(snap.gpu_count[nodes] * 1000.0, 1.0)
        cpu = (pod.cpu_milli / cpu_cap) * ((snap.cpu_cap[nodes] - snap.cpu_used[nodes]) / cpu_cap)
        mem = (pod.mem_mib / mem_cap) * ((snap.mem_cap[nodes] - snap.mem_used[nodes]) / mem_cap)
        gpu = (pod.gpu_total_milli / gpu_cap) * (snap.gpu_free[nodes].sum(axis=1) / gpu_cap)
        return np.asarray(cpu + mem + gpu, dtype=np.float64)


class RandomScorer(Scorer):
    """Random-fit: a uniformly random feasible node, and random fitting GPUs inside it."""

    name = "random"

    def __init__(self, seed: int = 0) -> None:
        self.rng = np.random.default_rng(seed)

    def score(self, pod: PodSpec, snap: ClusterSnapshot, nodes: I64) -> F64:
        out = np.zeros(len(nodes))
        if len(nodes):
            out[self.rng.integers(len(nodes))] = MAX_NODE_SCORE
        return out

    def select_gpus(self, pod: PodSpec, snap: ClusterSnapshot, node: int) -> tuple[int, ...]:
        # The FGD simulator's random GPU pick applies to a sharing pod only; whole-GPU pods take
        # the lowest-indexed free GPUs (AllocateExclusiveGpuId), which best-fit also returns.
        if not pod.is_sharing:
            return best_fit_gpus(pod, snap, node)
        count = int(snap.gpu_count[node])
        fits = np.flatnonzero(snap.gpu_free[node, :count] >= pod.gpu_milli)
        if fits.size == 0:
            raise ValueError(f"node {snap.names[node]} cannot host {pod.name}'s GPUs")
        return (int(fits[self.rng.integers(fits.size)]),)


class DotProdScorer(Scorer):
    """FGD simulator's DotProduct plugin with ``dimExtMethod=merge``, ``normMethod=max``."""

    name = "dotprod"

    def score(self, pod: PodSpec, snap: ClusterSnapshot, nodes: I64) -> F64:
        cpu_free = (snap.cpu_cap[nodes] - snap.cpu_used[nodes]) / MAX_SPEC_CPU
        gpu_free = snap.gpu_free[nodes].sum(axis=1) / MAX_SPEC_GPU
        dot = (cpu_free * (pod.cpu_milli / MAX_SPEC_CPU)
               + gpu_free * (pod.gpu_total_milli / MAX_SPEC_GPU))
        return np.trunc(MAX_NODE_SCORE * (1.0 - dot / 2.0))


def affinity_tag(pod: PodSpec) -> int:
    """0 = CPU-only (no tag), 1 = GPU-sharing, 1 + n = n whole GPUs."""
    if pod.num_gpu == 0 or pod.gpu_milli == 0:
        return 0
    if pod.is_sharing:
        return 1
    return 1 + pod.num_gpu


N_TAGS = 2 + MAX_GPUS


class GpuClusteringScorer(Scorer):
    """FGD simulator's GpuClustering plugin. Keeps per-node counts of running pods' GPU kinds,
    fed by :meth:`on_bind` / :meth:`on_release` (the simulator calls them)."""

    name = "gpu-clustering"

    def __init__(self) -> None:
        self._tags: I32 | None = None

    def _counts(self, snap: ClusterSnapshot) -> I32:
        if self._tags is None or self._tags.shape[0] != len(snap):
            self._tags = np.zeros((len(snap), N_TAGS), dtype=np.int32)
        return self._tags

    def on_bind(self, pod: PodSpec, snap: ClusterSnapshot, node: int,
                gpus: tuple[int, ...]) -> None:
        self._counts(snap)[node, affinity_tag(pod)] += 1

    def on_release(self, pod: PodSpec, snap: ClusterSnapshot, node: int,
                   gpus: tuple[int, ...]) -> None:
        counts = self._counts(snap)
        counts[node, affinity_tag(pod)] = max(0, counts[node, affinity_tag(pod)] - 1)

    def score(self, pod: PodSpec, snap: ClusterSnapshot, nodes: I64) -> F64:
        tag = affinity_tag(pod)
        if tag == 0:
            return np.zeros(len(nodes))
        counts = self._counts(snap)[nodes, 1:]  # GPU kinds only; CPU-only pods carry no tag
        kinds = (counts > 0).sum(axis=1)
        same = counts[:, tag - 1] > 0
        band = np.where(same, np.where(kinds == 1, 75, 50), np.where(kinds == 0, 25, 0))
        left = snap.gpu_free[nodes].sum(axis=1).astype(np.int64)
        within = (MAX_NODE_SCORE // 4) * (MAX_SPEC_GPU - left) // MAX_SPEC_GPU
        return (within + band).astype(np.float64)


class GpuPackingScorer(Scorer):
    """FGD simulator's GpuPacking plugin."""

    name = "gpu-packing"

    def score(self, pod: PodSpec, snap: ClusterSnapshot, nodes: I64) -> F64:
        if pod.num_gpu == 0 or pod.gpu_milli <= 0:
            return np.zeros(len(nodes))
        free = snap.gpu_free[nodes].astype(np.int64)
        present = np.arange(MAX_GPUS)[None, :] < snap.gpu_count[nodes, None]
        full_free = ((free == MILLI) & present).sum(axis=1)
        idle_node = full_free == snap.gpu_count[nodes]
        case3 = np.maximum(MAX_NODE_SCORE // 3 - full_free, full_free)
        # The pod's GPUs: the num_gpu fitting GPUs with the least free share.
        fits = (free >= pod.gpu_milli) & present
        if pod.is_sharing:
            smallest = np.where(fits, free, np.iinfo(np.int64).max).min(axis=1)
            uses_full = smallest >= MILLI
            case1 = np.maximum(MAX_NODE_SCORE - (smallest * 100 // MILLI) // 10,
                               MAX_NODE_SCORE // 2)
            case2 = np.maximum(MAX_NODE_SCORE // 2 - 1, MAX_NODE_SCORE // 3)
            used = np.where(uses_full, case2, case1)
        else:  # whole GPUs: every GPU used is fully free
            used = np.full(len(nodes), max(MAX_NODE_SCORE // 2 - pod.num_gpu, MAX_NODE_SCORE // 3))
        return np.where(idle_node, case3, used).astype(np.float64)


class BestFitScorer(Scorer):
    """FGD simulator's BestFit plugin (weights 0.5 CPU, 0.5 GPU), with its NormalizeScore."""

    name = "bestfit"

    def score(self, pod: PodSpec, snap: ClusterSnapshot, nodes: I64) -> F64:
        cpu_left = snap.cpu_cap[nodes] - snap.cpu_used[nodes] - pod.cpu_milli
        gpu_left = snap.gpu_free[nodes].sum(axis=1) - pod.gpu_total_milli
        loss = 0.5 * cpu_left / MAX_SPEC_CPU + 0.5 * gpu_left / MAX_SPEC_GPU
        raw = np.trunc((1.0 - loss) * MAX_NODE_SCORE).astype(np.int64)
        if raw.size == 0:
            return raw.astype(np.float64)
        lo, hi = raw.min(), raw.max()
        if hi == lo:
            return np.zeros(len(nodes))
        return ((raw - lo) * MAX_NODE_SCORE // (hi - lo)).astype(np.float64)
