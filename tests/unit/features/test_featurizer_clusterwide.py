"""The cluster-wide factors (dsan.features.featurizer) and the one column they condition,
shape1_room_gpu_bound: hand-set clusters on each side of the GPU-bound line, every pod class (a
1-GPU pod gets 0), both featurizer paths."""

from __future__ import annotations

import numpy as np
import pytest

from dsan.core.snapshot import ClusterSnapshot, PodSpec, empty_snapshot
from dsan.features import (
    FEATURE_NAMES,
    N_NODE_FEATURES,
    PlacementCache,
    featurize,
    pod_rows,
)
from dsan.features.featurizer import (
    CPU_BOUND_MIN_SHARE,
    CPU_BOUND_RATIO,
    cluster_cpu_bound,
    cluster_gpu_bound,
    cpu_bound_factor,
    room_factor,
    takes_whole_gpus,
)
from dsan.features.target import TargetWorkload

ROOM = FEATURE_NAMES.index("shape1_room_gpu_bound")
SHAPE1 = FEATURE_NAMES.index("shape1_hostable_after")
WHOLE = PodSpec("w", 4000.0, 8192.0, 2, 1000)
ONE_GPU = PodSpec("o", 4000.0, 8192.0, 1, 1000)
SHARING = PodSpec("s", 4000.0, 8192.0, 1, 500)
CPU_ONLY = PodSpec("c", 4000.0, 8192.0)


def _cluster(gpu_used: int, cpu_used: float) -> ClusterSnapshot:
    """Two 64-core, 4-GPU nodes; ``gpu_used`` whole GPUs taken, alternately on nodes 0 and 1
    (so a 2-GPU pod still leaves room for shape 1 on both), and ``cpu_used`` millicores on
    node 0 (shares: GPU free = 1 - gpu_used / 8, CPU free = 1 - cpu_used / 128000)."""
    snap = empty_snapshot(["a", "b"], [64000, 64000], [262144, 262144], [4, 4], [0, 0], ["M"])
    for g in range(gpu_used):
        snap.gpu_free[g % 2, g // 2] = 0
    snap.cpu_used[0] = cpu_used
    return snap


def _target() -> TargetWorkload:
    # shape 0: a whole GPU and 8 cores; shape 1: a whole GPU and 2 cores
    return TargetWorkload.from_shapes([(8000, 1000, 1, ()), (2000, 1000, 1, ())], [2, 1])


@pytest.mark.parametrize(
    ("gpu_used", "cpu_used", "bound"),
    [
        (0, 0.0, False),  # empty: both shares 1, not GPU-bound
        (2, 16000.0, True),  # GPU free 6/8 < CPU free 112/128
        (2, 32000.0, False),  # 6/8 == 96/128: equal shares are not GPU-bound
        (1, 48000.0, False),  # CPU-bound: GPU 7/8 > CPU 80/128
    ],
)
def test_gpu_bound_is_free_gpu_share_below_free_cpu_share(
    gpu_used: int, cpu_used: float, bound: bool
) -> None:
    snap = _cluster(gpu_used, cpu_used)
    assert cluster_gpu_bound(snap) is bound
    assert room_factor(WHOLE, snap) == float(bound)
    assert room_factor(PodSpec("m", 4000.0, 8192.0, 8, 1000), snap) == float(bound)
    assert room_factor(SHARING, snap) == 0.0 and room_factor(CPU_ONLY, snap) == 0.0
    assert room_factor(ONE_GPU, snap) == 0.0  # it harmed 1-GPU pods (docs/results/dsan_openb.md)


def test_a_cluster_without_gpus_is_never_gpu_bound() -> None:
    snap = empty_snapshot(["a"], [64000], [262144], [0], [-1], [])
    snap.cpu_used[0] = 60000.0
    assert not cluster_gpu_bound(snap)


def test_whole_gpu_pods_are_the_gpu_pods_that_share_no_gpu() -> None:
    assert takes_whole_gpus(WHOLE) and takes_whole_gpus(PodSpec("m", 1.0, 1.0, 4, 1000))
    assert not takes_whole_gpus(SHARING) and not takes_whole_gpus(CPU_ONLY)
    assert not takes_whole_gpus(PodSpec("z", 1.0, 1.0, 2, 0))  # featurize's CPU-only pod


@pytest.mark.parametrize("bound", [True, False])
@pytest.mark.parametrize(
    "pod", [WHOLE, ONE_GPU, SHARING, CPU_ONLY], ids=["whole", "one-gpu", "sharing", "cpu"]
)
def test_the_column_is_shape1_room_only_for_multi_gpu_pods_in_a_gpu_bound_cluster(
    bound: bool, pod: PodSpec
) -> None:
    snap = _cluster(2, 16000.0 if bound else 48000.0)
    nodes = np.arange(2, dtype=np.int64)
    x = featurize(pod, snap, nodes, _target())
    assert x[:, SHAPE1].min() > 0  # room left on both nodes: the column is not 0 by accident
    want = x[:, SHAPE1] if bound and pod is WHOLE else np.zeros(2, dtype=np.float32)
    np.testing.assert_array_equal(x[:, ROOM], want)
    # the serving cache's rows (pod_rows) read the same cluster bit
    got, _ = pod_rows(pod, snap, nodes, _target(), PlacementCache(_target()))
    np.testing.assert_array_equal(got[:, ROOM - N_NODE_FEATURES], want)


def test_the_column_reads_the_whole_cluster_not_the_candidates() -> None:
    """Node 1 alone is a candidate; node 0's usage still decides the bit."""
    one = np.array([1], dtype=np.int64)
    for cpu_used, bound in ((16000.0, True), (48000.0, False)):
        x = featurize(WHOLE, _cluster(2, cpu_used), one, _target())
        assert bool(x[0, ROOM] > 0) is bound


# cpu_bound_cpu_per_gpu: node_cpu_per_gpu for CPU-only pods while the GPU
# nodes' used CPU share is above CPU_BOUND_RATIO x their used GPU share.
CPG = FEATURE_NAMES.index("cpu_bound_cpu_per_gpu")
NODE_CPG = FEATURE_NAMES.index("node_cpu_per_gpu")


@pytest.mark.parametrize(
    ("gpu_used", "cpu_used", "bound"),
    [
        (0, 0.0, False),  # empty: nothing used, not CPU-bound
        (0, 16000.0, True),  # CPU used (0.125), no GPU used
        (0, 12799.0, False),  # the same under the floor (CPU_BOUND_MIN_SHARE, 0.1)
        (0, 12800.0, True),  # at it
        (4, 70400.0, False),  # used CPU 0.55 == 1.1 x used GPU 0.5: not above
        (4, 72000.0, True),  # 0.5625 > 0.55
        (6, 16000.0, False),  # GPU-bound
    ],
)
def test_cpu_bound_is_used_cpu_share_above_1_1x_used_gpu_share(
    gpu_used: int, cpu_used: float, bound: bool
) -> None:
    assert CPU_BOUND_RATIO == 1.1 and CPU_BOUND_MIN_SHARE == 0.1
    snap = _cluster(gpu_used, 0.0)
    snap.cpu_used[:] = cpu_used / 2  # spread over both nodes: the bit reads the totals
    assert cluster_cpu_bound(snap) is bound
    assert cpu_bound_factor(CPU_ONLY, snap) == float(bound)
    assert cpu_bound_factor(PodSpec("z", 1.0, 1.0, 2, 0), snap) == float(bound)
    for pod in (WHOLE, ONE_GPU, SHARING):
        assert cpu_bound_factor(pod, snap) == 0.0


def test_a_cluster_without_gpus_is_never_cpu_bound() -> None:
    snap = empty_snapshot(["a"], [64000], [262144], [0], [-1], [])
    snap.cpu_used[0] = 60000.0
    assert not cluster_cpu_bound(snap) and cpu_bound_factor(CPU_ONLY, snap) == 0.0


def test_only_the_gpu_nodes_cpu_counts() -> None:
    """A busy CPU-only node does not make the cluster CPU-bound; a busy GPU node does."""
    snap = empty_snapshot(["g", "c"], [64000, 64000], [262144] * 2, [4, 0], [0, -1], ["M"])
    snap.gpu_free[0, :2] = 0  # GPU used 0.5
    snap.cpu_used[1] = 64000.0  # the CPU-only node full: whole-cluster CPU used 0.5 + ...
    snap.cpu_used[0] = 32000.0  # ... GPU node CPU used 0.5: not above 1.1 x 0.5
    assert not cluster_cpu_bound(snap)
    snap.cpu_used[0] = 36000.0  # 0.5625 > 0.55
    assert cluster_cpu_bound(snap)


@pytest.mark.parametrize("bound", [True, False])
@pytest.mark.parametrize(
    "pod", [WHOLE, ONE_GPU, SHARING, CPU_ONLY], ids=["whole", "one-gpu", "sharing", "cpu"]
)
def test_cpu_bound_column_is_cpu_per_gpu_only_for_cpu_pods_in_a_cpu_bound_cluster(
    bound: bool, pod: PodSpec
) -> None:
    snap = _cluster(2, 48000.0 if bound else 16000.0)  # used CPU 0.375 vs GPU 0.25, or 0.125
    assert cluster_cpu_bound(snap) is bound
    nodes = np.arange(2, dtype=np.int64)
    x = featurize(pod, snap, nodes, _target())
    assert x[:, NODE_CPG].min() > 0
    want = x[:, NODE_CPG] if pod is CPU_ONLY and bound else np.zeros(2, dtype=np.float32)
    np.testing.assert_array_equal(x[:, CPG], want)


