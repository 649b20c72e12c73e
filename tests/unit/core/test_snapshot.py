from __future__ import annotations

import numpy as np
import pytest

from dsan.core.filtering import allocate
from dsan.core.snapshot import MAX_GPUS, AllocationTracker, ClusterSnapshot, PodSpec, empty_snapshot


def test_empty_snapshot_gpu_slots() -> None:
    s = empty_snapshot(["a", "b"], [1, 2], [3, 4], [2, 0], [0, -1], ["G2"])
    assert s.gpu_free.shape == (2, MAX_GPUS)
    assert s.gpu_free[0].tolist() == [1000, 1000, 0, 0, 0, 0, 0, 0] and s.gpu_free[1].sum() == 0


def test_copy_is_deep() -> None:
    s = empty_snapshot(["a"], [1], [1], [1], [0], ["G2"])
    c = s.copy()
    c.gpu_free[0, 0] = 5
    assert s.gpu_free[0, 0] == 1000


def test_bad_shapes_rejected() -> None:
    with pytest.raises(ValueError, match="gpu_count"):
        empty_snapshot(["a"], [1], [1], [9], [0], ["G2"])
    s = empty_snapshot(["a"], [1], [1], [1], [0], ["G2"])
    with pytest.raises(ValueError, match="cpu_used"):
        ClusterSnapshot(
            s.names,
            s.cpu_cap,
            np.zeros(2),
            s.mem_cap,
            s.mem_used,
            s.gpu_count,
            s.gpu_model,
            s.gpu_free,
        )


def test_podspec_sharing() -> None:
    assert (
        PodSpec("p", 1, 1, 1, 500).is_sharing
        and PodSpec("p", 1, 1, 2, 1000).gpu_total_milli == 2000
    )
    assert not PodSpec("p", 1, 1).is_sharing


def test_allocation_tracker_reports_exactly_the_changed_nodes() -> None:
    snap = empty_snapshot(["a", "b", "c"], [8000] * 3, [1024] * 3, [2, 2, 0], [0, 0, -1], ["T4"])
    track = AllocationTracker()
    track.reset(snap)
    computed_at = np.full(3, track.tick, dtype=np.int64)
    assert track.sync(snap).tolist() == []
    allocate(snap, PodSpec("p", 1000, 10, 1, 500), 1, (0,))
    assert track.sync(snap).tolist() == [1]
    assert track.stale(computed_at, np.arange(3, dtype=np.int64)).tolist() == [1]
    computed_at[1] = track.tick
    assert track.stale(computed_at, np.arange(3, dtype=np.int64)).tolist() == []
    allocate(snap, PodSpec("q", 500, 10), 2, ())
    assert track.sync(snap).tolist() == [2]
    assert track.stale(computed_at, np.array([0, 2], dtype=np.int64)).tolist() == [2]


def test_allocation_tracker_sees_a_resized_or_relabelled_node() -> None:
    # The sidecar rewrites a relabelled or resized node's row and re-charges its pods, so its
    # used columns can come back equal: the static columns a cached value reads count too.
    snap = empty_snapshot(["a", "b", "c"], [8000] * 3, [1024] * 3, [2, 2, 2], [0, 0, 0],
                          ["T4", "A100"])
    track = AllocationTracker()
    track.reset(snap)

    def sync(changed: list[int]) -> list[int]:
        before = track.epoch.copy()
        snap.version += 1  # as every writer in place does
        track.sync(snap)
        return np.flatnonzero(track.epoch != before).tolist()

    snap.gpu_model[1] = 1
    assert sync([1]) == [1]
    snap.cpu_cap[2] = 16000
    assert sync([2]) == [2]
    snap.gpu_count[0], snap.gpu_free[0] = 1, [1000] + [0] * 7
    assert sync([0]) == [0]
    assert sync([0, 1, 2]) == []  # recorded: nothing changed since


def test_allocation_tracker_trusts_an_unchanged_version() -> None:
    # The same snapshot at the same version is not read again (a request's caches sync
    # several times between two writes); a write with its version bump is seen.
    snap = empty_snapshot(["a", "b"], [8000] * 2, [1024] * 2, [2, 2], [0, 0], ["T4"])
    track = AllocationTracker()
    track.reset(snap)
    snap.cpu_used[0] = 1000.0  # a write that did not bump the version
    assert track.sync(snap).tolist() == []
    snap.version += 1
    assert track.sync(snap).tolist() == [0]
    assert track.sync(snap.copy()).tolist() == []  # another object: its columns are read
