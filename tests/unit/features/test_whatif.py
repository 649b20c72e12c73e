"""PlacementCache: the same numbers as placement() on the current snapshot, bit
for bit, while nodes go back and forth between states; AllocationTracker's changed rows."""

from __future__ import annotations

import numpy as np

from dsan.core.filtering import allocate, feasible_nodes, release
from dsan.core.snapshot import AllocationTracker, ClusterSnapshot, PodSpec
from dsan.features import PlacementCache, default_workload, fgd_select_gpus, placement
from tests.unit.features.test_featurizer_batch import _random_snapshot

FIELDS = ("frag_before", "frag_after", "free_after", "slot")
MOVERS = [PodSpec("g", 0.0, 0.0, 1, 500), PodSpec("c", 24000.0, 0.0),
          PodSpec("w", 0.0, 0.0, 1, 1000), PodSpec("c2", 6000.0, 0.0)]
PROBES = [PodSpec("s", 2000.0, 1024.0, 1, 500), PodSpec("t", 8000.0, 512.0, 1, 250),
          PodSpec("u", 30000.0, 512.0, 1, 500), PodSpec("x", 4000.0, 512.0, 2, 1000)]


def _cluster(seed: int) -> ClusterSnapshot:
    snap = _random_snapshot(np.random.default_rng(seed), 24, True)
    snap.cpu_cap[:] = 64000.0
    snap.cpu_used[:] = 32000.0
    snap.gpu_count[:] = 4
    snap.gpu_model[:] = 0
    snap.gpu_free[:] = [1000] * 4 + [0] * 4
    return snap


class _Mover:
    """Places and releases pods at random (one row written per step), bumping the snapshot's
    version as the sidecar's cache does."""

    def __init__(self, snap: ClusterSnapshot, seed: int) -> None:
        self.snap, self.rng = snap, np.random.default_rng(seed)
        self.placed: list[tuple[PodSpec, int, tuple[int, ...]]] = []

    def step(self, i: int) -> int:
        snap, rng = self.snap, self.rng
        pod = MOVERS[int(rng.integers(len(MOVERS)))]
        feas = feasible_nodes(pod, snap)
        if (i % 3 == 2 or not len(feas)) and self.placed:
            p, node, gpus = self.placed.pop(int(rng.integers(len(self.placed))))
            release(snap, p, node, gpus)
        else:
            node = int(feas[int(rng.integers(min(4, len(feas))))])
            gpus = fgd_select_gpus(pod, snap, node, default_workload())
            allocate(snap, pod, node, gpus)
            self.placed.append((pod, node, gpus))
        snap.version += 1  # allocate and release bump it too; any increase will do
        return node


def _assert_placement(got: object, pod: PodSpec, snap: ClusterSnapshot,
                      rows: np.ndarray) -> None:
    want = placement(pod, snap, rows, default_workload())
    for f in FIELDS:
        np.testing.assert_array_equal(getattr(got, f), getattr(want, f))


def test_the_cache_gives_what_placement_gives_as_nodes_come_and_go() -> None:
    snap = _cluster(0)
    cache = PlacementCache(default_workload())
    mover = _Mover(snap, 1)
    rows = np.arange(len(snap), dtype=np.int64)
    for i in range(40):
        mover.step(i)
        for pod in PROBES:
            _assert_placement(cache.get(pod, snap, rows), pod, snap, rows)


def test_a_relabelled_or_resized_node_is_recomputed() -> None:
    snap = _cluster(3)
    snap.gpu_models = ["A100", "H100"]
    cache = PlacementCache(default_workload())
    rows = np.arange(len(snap), dtype=np.int64)
    for pod in PROBES:
        cache.get(pod, snap, rows)
    snap.gpu_model[5] = 1  # relabelled: used columns unchanged
    snap.cpu_cap[7] = 32000.0  # resized: used columns unchanged
    snap.version += 1
    for pod in PROBES:
        _assert_placement(cache.get(pod, snap, rows), pod, snap, rows)


def test_the_tracker_reports_changed_rows_in_any_column_it_follows() -> None:
    snap = _cluster(4)
    track = AllocationTracker(("cpu_used", "gpu_free", "pod_count"))
    track.reset(snap)
    assert track.sync(snap).tolist() == []
    snap.cpu_used[2] += 1.0
    snap.gpu_free[9, 1] = 0
    snap.version += 1
    assert track.sync(snap).tolist() == [2, 9] and track.tick == 2
    assert track.stale(np.full(len(snap), 1), np.array([2, 3, 9])).tolist() == [2, 9]
    snap.pod_count = None  # a column goes away: start over
    snap.version += 1
    assert len(track.sync(snap)) == len(snap) and track.tick == 1
