"""PlacementCache's few-row reads (``few``) and its row-hinted sync (``trust_snapshot_versions``
+ ``note_changes``, what the sidecar's change log feeds it): the same numbers as
dsan.features.placement on the current snapshot, bit for bit, while nodes go back and forth
between states; AllocationTracker.sync_rows as sync on the rows it is given."""

from __future__ import annotations

import numpy as np

from dsan.features import PlacementCache, default_workload, fgd_select_gpus, placement
from dsan.filtering import allocate, feasible_nodes, release
from dsan.snapshot import AllocationTracker, ClusterSnapshot, PodSpec
from tests.unit.test_features_fast import _random_snapshot

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


def test_few_gives_what_placement_gives_through_memo_hits_and_misses() -> None:
    snap = _cluster(31)
    cache = PlacementCache(default_workload())
    mover = _Mover(snap, 32)
    rng = np.random.default_rng(33)
    for step in range(150):
        for pod in PROBES:
            rows = rng.choice(len(snap), size=int(rng.integers(1, 5)), replace=False)
            got = cache.few(pod, snap, rows.tolist())
            want = placement(pod, snap, rows.astype(np.int64), default_workload())
            for k, (before, after, slot, free_after) in enumerate(got):
                assert before == want.frag_before[k] and after == want.frag_after[k]
                assert slot == want.slot[k] and free_after == want.free_after[k].tolist()
                assert isinstance(slot, int) and isinstance(before, float)
        mover.step(step)
    assert cache._memo_after and cache._memo_before  # the memo did serve some rows


def test_trusted_cache_reads_only_the_hinted_rows_and_stays_exact() -> None:
    snap = _cluster(41)
    hinted, diffing = PlacementCache(default_workload()), PlacementCache(default_workload())
    hinted.trust_snapshot_versions()
    mover = _Mover(snap, 42)
    every = np.arange(len(snap), dtype=np.int64)
    since, written = snap.version, list[int]()
    for step in range(120):
        if step % 4 == 0:  # sometimes several writes between two reads
            hinted.note_changes(since, snap.version, written)
            for pod in PROBES[:2]:
                got = hinted.get(pod, snap, every)
                _assert_placement(got, pod, snap, every)
                for f in FIELDS:
                    np.testing.assert_array_equal(getattr(got, f),
                                                  getattr(diffing.get(pod, snap, every), f))
            since, written = snap.version, list[int]()
        written.append(mover.step(step))


def test_a_hint_is_what_the_trusted_cache_reads() -> None:
    """A hint that leaves the written row out leaves that row's placement stale: the hint,
    not a diff, decides what the trusted cache recomputes (and a hint that does not span the
    last sync to now is ignored)."""
    snap = _cluster(51)
    pod = PROBES[0]
    every = np.arange(len(snap), dtype=np.int64)
    cache = PlacementCache(default_workload())
    cache.trust_snapshot_versions()
    cache.get(pod, snap, every)
    v0 = snap.version
    node = _Mover(snap, 52).step(0)
    before = placement(pod, snap, every, default_workload()).frag_before[node]
    cache.note_changes(v0 - 1, snap.version, [])  # does not start at the last sync: ignored
    assert cache.get(pod, snap, every).frag_before[node] == before
    old = cache.get(pod, snap, every).frag_before.copy()
    share = MOVERS[0]  # half a GPU: the node's fragmentation moves
    v1 = snap.version
    allocate(snap, share, 5, fgd_select_gpus(share, snap, 5, default_workload()))
    assert snap.version > v1  # allocate bumps it, as the sidecar's cache does
    truth = placement(pod, snap, every, default_workload()).frag_before
    assert truth[5] != old[5]
    cache.note_changes(v1, snap.version, [])  # spans, but leaves row 5 out
    assert cache.get(pod, snap, every).frag_before[5] == old[5]
    snap.version += 1
    cache.note_changes(snap.version - 1, snap.version, [5])
    np.testing.assert_array_equal(cache.get(pod, snap, every).frag_before, truth)


def test_sync_rows_is_sync_on_those_rows() -> None:
    snap = _cluster(61)
    full, rows = AllocationTracker(), AllocationTracker()
    full.reset(snap)
    rows.reset(snap)
    mover = _Mover(snap, 62)
    for step in range(60):
        written = [mover.step(step) for _ in range(step % 3 + 1)]
        full.sync(snap)
        rows.sync_rows(snap, written + written[:1])  # repeats are fine
        assert full.tick == rows.tick
        np.testing.assert_array_equal(full.epoch, rows.epoch)
        np.testing.assert_array_equal(full.cpu_used, rows.cpu_used)
        np.testing.assert_array_equal(full.gpu_free, rows.gpu_free)


def test_a_relabelled_or_resized_node_is_recomputed_with_or_without_a_hint() -> None:
    for hinted in (False, True):
        snap = _cluster(3)
        snap.gpu_models = ["A100", "H100"]
        cache = PlacementCache(default_workload())
        if hinted:
            cache.trust_snapshot_versions()
        rows = np.arange(len(snap), dtype=np.int64)
        for pod in PROBES:
            cache.get(pod, snap, rows)
        v = snap.version
        snap.gpu_model[5] = 1  # relabelled: used columns unchanged
        snap.cpu_cap[7] = 32000.0  # resized: used columns unchanged
        snap.version += 1
        if hinted:
            cache.note_changes(v, snap.version, [5, 7])
        for pod in PROBES:
            _assert_placement(cache.get(pod, snap, rows), pod, snap, rows)


def test_records_between_two_syncs_chain_into_one_hint() -> None:
    """One record per write, a read every few writes (a settle whose class had no changed
    row does not sync the placement cache): the records chain, the sync compares only their
    rows (never the full diff), and the numbers stay placement's."""
    snap = _cluster(71)
    cache = PlacementCache(default_workload())
    cache.trust_snapshot_versions()
    every = np.arange(len(snap), dtype=np.int64)
    cache.get(PROBES[0], snap, every)

    def no_full_diff(_: ClusterSnapshot) -> None:
        raise AssertionError("full diff")

    cache._track.sync = no_full_diff  # type: ignore[method-assign]
    mover = _Mover(snap, 72)
    for step in range(60):
        v = snap.version
        node = mover.step(step)
        cache.note_changes(v, snap.version, [node])
        if step % 4 == 3:
            for pod in PROBES[:2]:
                _assert_placement(cache.get(pod, snap, every), pod, snap, every)


def test_a_chain_keeps_every_record_and_breaks_on_a_gap() -> None:
    cache = PlacementCache(default_workload())
    cache.note_changes(3, 4, [1])
    cache.note_changes(4, 6, [2, 5])
    assert cache._hint == (3, 6, [1, 2, 5])
    cache.note_changes(7, 8, [9])  # does not continue the chain: replaces it
    assert cache._hint == (7, 8, [9])
    cache.note_changes(8, 9, list(range(64)))  # past the bound: the sync diffs every node
    assert cache._hint == (8, 9, list(range(64)))
