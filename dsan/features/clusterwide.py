"""Cluster-wide state that a per-node feature column is conditioned on: which tie-break helps
on openb depends on what the cluster runs out of first (docs/results/dsan_openb.md). The
featurizer, the fast linear scorer and the serving cache all call these, so the simulator and
the sidecar read the same bit from the same snapshot.
"""

from __future__ import annotations

from dsan.core.snapshot import ClusterSnapshot, PodSpec

#: The GPU nodes are CPU-bound when their used CPU share exceeds this times their used GPU
#: share (between cpu250, which the tie-break helps, and cpu300, which it harms) ...
CPU_BOUND_RATIO = 1.1
#: ... and is at least this: below it the ratio is the first few pods' order.
CPU_BOUND_MIN_SHARE = 0.1
#: The fewest whole GPUs a pod asks for to get :func:`room_factor`.
MIN_GPUS = 2


def cluster_gpu_bound(snap: ClusterSnapshot) -> bool:
    """True when the cluster's free GPU share is below its free CPU share (compared as cross
    products, so no division rounds); False without GPUs or CPU, and for an empty cluster."""
    gpu_cap = int(snap.gpu_count.sum()) * 1000
    cpu_cap = float(snap.cpu_cap.sum())
    if gpu_cap <= 0 or not cpu_cap > 0:
        return False
    gpu_free = int(snap.gpu_free.sum(dtype="int64"))
    cpu_free = cpu_cap - float(snap.cpu_used.sum())
    return gpu_free * cpu_cap < cpu_free * gpu_cap


def cluster_cpu_bound(snap: ClusterSnapshot) -> bool:
    """True when the GPU nodes' used CPU share is at least :data:`CPU_BOUND_MIN_SHARE` and
    above :data:`CPU_BOUND_RATIO` times their used GPU share. Only nodes with GPUs count, or a
    CPU-heavy service tier on CPU-only nodes would set the bit."""
    gpu_cap = int(snap.gpu_count.sum()) * 1000
    # dot products with the mask: faster than summing a masked copy, and the same sums
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


def takes_whole_gpus(pod: PodSpec) -> bool:
    """A GPU pod that does not share a GPU."""
    return pod.num_gpu > 0 and pod.gpu_milli >= 1000


def cpu_bound_factor(pod: PodSpec, snap: ClusterSnapshot) -> float:
    """1.0 for a CPU-only pod in a :func:`cluster_cpu_bound` cluster, else 0.0: the factor of
    ``cpu_bound_cpu_per_gpu``. The cluster sums are taken only for CPU-only pods."""
    return 1.0 if takes_cpu_only(pod) and cluster_cpu_bound(snap) else 0.0


def room_factor(pod: PodSpec, snap: ClusterSnapshot) -> float:
    """1.0 for a whole-GPU pod asking for :data:`MIN_GPUS` or more GPUs in a
    :func:`cluster_gpu_bound` cluster, else 0.0: the factor of ``shape1_room_gpu_bound``."""
    several = takes_whole_gpus(pod) and pod.num_gpu >= MIN_GPUS
    return 1.0 if several and cluster_gpu_bound(snap) else 0.0
