"""Cluster-wide state that a per-node feature column is conditioned on.

Every other column sees one node. Whether the cluster as a whole runs out of GPUs or of CPU
first decides which tie-break helps a whole-GPU pod on openb: keeping room for the
workload's second shape helps on cpu100, multigpu30 and multigpu50 (GPUs run out first) and
costs cpu250 (CPU runs out first; docs/results/dsan_openb.md, sessions 7-8). Only pods asking
for :data:`MIN_GPUS` or more whole GPUs get it: for 1-GPU pods the same tie-break cost
gpuspec33 and gpushare40 (session 8's x_single screen, sessions 8-9). The featurizer
(:func:`dsan.features.featurize_batch`), its few-row path (:mod:`dsan.rowfeatures`), the
fast scorer (:mod:`dsan.train.linear`) and the serving cache's class key
(:mod:`dsan.model.headcache`) all call :func:`room_factor`, so the simulator and the sidecar
read the same bit from the same snapshot.
"""

from __future__ import annotations

from dsan.snapshot import ClusterSnapshot, PodSpec


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


def takes_whole_gpus(pod: PodSpec) -> bool:
    """A GPU pod that does not share a GPU (featurize's pod_is_cpu_only and pod_is_sharing
    both 0)."""
    return pod.num_gpu > 0 and pod.gpu_milli >= 1000


#: The fewest whole GPUs a pod asks for to get the factor (session 8's ``x_multi``).
MIN_GPUS = 2


def takes_several_gpus(pod: PodSpec) -> bool:
    """A whole-GPU pod asking for :data:`MIN_GPUS` or more GPUs: the pods the factor is for."""
    return takes_whole_gpus(pod) and pod.num_gpu >= MIN_GPUS


def room_factor(pod: PodSpec, snap: ClusterSnapshot) -> float:
    """1.0 for a whole-GPU pod asking for :data:`MIN_GPUS` or more GPUs in a GPU-bound
    cluster, else 0.0: the factor of ``shape1_room_gpu_bound`` (``shape1_hostable_after``
    times this). The cluster sums are taken only for such pods (and once per snapshot
    version by :meth:`dsan.placement.PlacementCache.room_factor` where versions are
    trusted)."""
    return 1.0 if takes_several_gpus(pod) and cluster_gpu_bound(snap) else 0.0
