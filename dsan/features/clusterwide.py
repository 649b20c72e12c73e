"""Cluster-wide state that a per-node feature column is conditioned on.

Every other column sees one node. Whether the cluster as a whole runs out of GPUs or of CPU
first decides which tie-break helps a whole-GPU pod on openb: keeping room for the
workload's second shape helps on cpu100, multigpu30 and multigpu50 (GPUs run out first) and
costs cpu250 (CPU runs out first; docs/results/dsan_openb.md). Only pods asking for
:data:`MIN_GPUS` or more whole GPUs get it: for 1-GPU pods the same tie-break cost gpuspec33
and gpushare40. The featurizer (:func:`dsan.features.featurize_batch`), the fast scorer
(:mod:`dsan.train.linear`) and the serving cache's class key (:mod:`dsan.model.serving`) all
call :func:`room_factor`, so the simulator and the sidecar read the same bit from the same
snapshot.

The same holds for CPU-only pods: preferring nodes with much CPU per GPU
(``node_cpu_per_gpu``) keeps the GPUs of CPU-poor nodes usable while the GPU nodes' CPU and
GPUs run out together (cpu235, cpu250), and strands GPUs once their CPU runs out clearly
faster (cpu300: +0.83 unallocated GPU points against the same tie-break left off;
docs/results/dsan_openb.md). :func:`cpu_bound_factor` is 1 for a CPU-only pod
while the GPU nodes are :func:`cluster_cpu_bound`: the factor of ``cpu_bound_cpu_per_gpu``,
whose skip weight cancels the tie-break's. A column that is 0 until the bit is set leaves
every decision where it is not set bit for bit as it was, the seed scenario's included.
"""

from __future__ import annotations

from dsan.core.snapshot import ClusterSnapshot, PodSpec


def cluster_gpu_bound(snap: ClusterSnapshot) -> bool:
    """True when the cluster's free GPU share is below its free CPU share (GPUs run out
    first). Compared as cross products of the totals, so no division rounds; False for a
    cluster without GPUs or CPU. An empty cluster (both shares 1) is not GPU-bound."""
    gpu_cap = int(snap.gpu_count.sum()) * 1000
    cpu_cap = float(snap.cpu_cap.sum())
    if gpu_cap <= 0 or not cpu_cap > 0:
        return False
    gpu_free = int(snap.gpu_free.sum(dtype="int64"))
    cpu_free = cpu_cap - float(snap.cpu_used.sum())
    return gpu_free * cpu_cap < cpu_free * gpu_cap


#: The GPU nodes are CPU-bound when their used CPU share exceeds this times their used GPU
#: share ...
#: Chosen between the CPU-heavy files the tie-break helps and the one it harms: over the
#: FGD protocol, used CPU over used GPU stays at 0.93-1.03 on cpu250 and 1.14-1.23 on
#: cpu300 (FGD runs, seed 7).
CPU_BOUND_RATIO = 1.1
#: ... and is at least this. Below it the ratio is the first
#: few pods' order: without the floor, 3 CPU-only pods at 0.03-0.09 % CPU use set the bit on
#: openb default seed 42 and moved the episode 4.545 -> 4.661 % unallocated.
CPU_BOUND_MIN_SHARE = 0.1


def cluster_cpu_bound(snap: ClusterSnapshot) -> bool:
    """True when the GPU nodes' used CPU share is above :data:`CPU_BOUND_RATIO` times their
    used GPU share (their CPU runs out clearly first) and at least
    :data:`CPU_BOUND_MIN_SHARE`. Only nodes with GPUs count: the
    tie-break is about CPU-only pods on GPU nodes, and CPU-only nodes would let a CPU-heavy
    service tier set the bit (the seed scenario with the whole cluster's CPU: 13 % of its
    decisions; with the GPU nodes' CPU: none). Compared as cross products of the totals;
    False for a cluster without GPUs or CPU on them. An empty cluster is not CPU-bound."""
    gpu_cap = int(snap.gpu_count.sum()) * 1000
    # dot products with the mask: 4x faster than summing a masked copy at 1,000-5,000 nodes,
    # and the same sums (whole millicores add exactly in any order)
    on_gpu = snap.gpu_count > 0
    cpu_cap = float(snap.cpu_cap @ on_gpu)
    if gpu_cap <= 0 or not cpu_cap > 0:
        return False
    gpu_used = gpu_cap - int(snap.gpu_free.sum(dtype="int64"))
    cpu_used = float(snap.cpu_used @ on_gpu)
    return (cpu_used >= CPU_BOUND_MIN_SHARE * cpu_cap
            and cpu_used * gpu_cap > CPU_BOUND_RATIO * gpu_used * cpu_cap)


def takes_cpu_only(pod: PodSpec) -> bool:
    """featurize's pod_is_cpu_only: no GPU or no GPU share asked."""
    return pod.num_gpu == 0 or pod.gpu_milli <= 0


def cpu_bound_factor(pod: PodSpec, snap: ClusterSnapshot) -> float:
    """1.0 for a CPU-only pod in a cluster that is :func:`cluster_cpu_bound`, else 0.0: the
    factor of ``cpu_bound_cpu_per_gpu`` (``node_cpu_per_gpu`` times this). The cluster sums
    are taken only for CPU-only pods."""
    return 1.0 if takes_cpu_only(pod) and cluster_cpu_bound(snap) else 0.0


def takes_whole_gpus(pod: PodSpec) -> bool:
    """A GPU pod that does not share a GPU (featurize's pod_is_cpu_only and pod_is_sharing
    both 0)."""
    return pod.num_gpu > 0 and pod.gpu_milli >= 1000


#: The fewest whole GPUs a pod asks for to get the factor.
MIN_GPUS = 2


def takes_several_gpus(pod: PodSpec) -> bool:
    """A whole-GPU pod asking for :data:`MIN_GPUS` or more GPUs: the pods the factor is for."""
    return takes_whole_gpus(pod) and pod.num_gpu >= MIN_GPUS


def room_factor(pod: PodSpec, snap: ClusterSnapshot) -> float:
    """1.0 for a whole-GPU pod asking for :data:`MIN_GPUS` or more GPUs in a GPU-bound
    cluster, else 0.0: the factor of ``shape1_room_gpu_bound`` (``shape1_hostable_after``
    times this). The cluster sums are taken only for such pods (and once per snapshot
    version by :meth:`dsan.features.placementcache.PlacementCache.room_factor` where versions are
    trusted)."""
    return 1.0 if takes_several_gpus(pod) and cluster_gpu_bound(snap) else 0.0
