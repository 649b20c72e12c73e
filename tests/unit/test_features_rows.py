"""The few-row featurize path (dsan.rowfeatures) pinned to dsan.features.featurize: the same
float32 bits on every column but the request ones, and the same float64 quantities as the
vectorised path, on random snapshots and pods (test_features_fast.py pins featurize itself
to the column-by-column reference)."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from dsan.features import FEATURE_NAMES, PlacementCache, default_workload, featurize, node_block
from dsan.policies.target import TargetWorkload
from dsan.rowfeatures import REQUEST_COLUMNS, SMALL_ROWS, featurize_rows, quantities
from dsan.snapshot import ClusterSnapshot, PodSpec
from tests.unit.test_features_fast import _random_pod, _random_snapshot

KEEP = np.setdiff1d(np.arange(len(FEATURE_NAMES)), REQUEST_COLUMNS)


def _pin(pod: PodSpec, snap: ClusterSnapshot, rows: np.ndarray, target: TargetWorkload) -> None:
    want, _ = featurize(pod, snap, rows, target)
    cache = PlacementCache(target)
    got, q = featurize_rows(pod, snap, rows, node_block(snap, rows), cache)
    assert got.dtype == np.float32 and got.shape == want.shape
    np.testing.assert_array_equal(got[:, KEEP], want[:, KEEP])
    assert not got[:, REQUEST_COLUMNS].any()
    np.testing.assert_array_equal(q, quantities(pod, snap, rows, PlacementCache(target)))


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), n=st.integers(1, 30), extras=st.booleans())
def test_few_rows_are_bit_identical_to_featurize(seed: int, n: int, extras: bool) -> None:
    rng = np.random.default_rng(seed)
    snap = _random_snapshot(rng, n, extras)
    target = default_workload()
    for i in range(6):
        pod = _random_pod(rng, i)
        size = int(rng.integers(1, min(n, SMALL_ROWS) + 1))
        _pin(pod, snap, rng.choice(n, size=size, replace=False).astype(np.int64), target)


def test_many_rows_take_the_vectorised_path_with_the_same_result() -> None:
    rng = np.random.default_rng(11)
    snap = _random_snapshot(rng, 40, True)
    for i in range(5):
        _pin(_random_pod(rng, i), snap, np.arange(40, dtype=np.int64), default_workload())


def test_edge_rows_idle_full_and_gpu_less_nodes_and_a_small_workload() -> None:
    """Idle nodes (node_idle), full GPUs, no GPU slots and a workload with fewer shapes than
    TOP_SHAPES: the branches the random snapshots rarely hit."""
    rng = np.random.default_rng(12)
    snap = _random_snapshot(rng, 6, True)
    snap.cpu_used[0] = 0.0
    snap.gpu_count[0] = 4
    snap.gpu_free[0] = [1000] * 4 + [0] * 4
    snap.gpu_count[1] = 0
    snap.gpu_free[1] = 0
    snap.gpu_count[2] = 8
    snap.gpu_free[2] = 0
    target = TargetWorkload.from_shapes([(4000, 1000, 1, ()), (2000, 500, 1, ())], [3, 1])
    pods = [PodSpec("s", 4000.0, 1024.0, 1, 500), PodSpec("c", 1000.0, 512.0),
            PodSpec("w", 8000.0, 4096.0, 2, 1000), _random_pod(rng, 0)]
    for pod in pods:
        _pin(pod, snap, np.array([0, 1, 2], dtype=np.int64), target)
        _pin(pod, snap, np.array([2], dtype=np.int64), default_workload())


def test_placement_memo_gives_what_a_fresh_placement_gives() -> None:
    """Nodes going back and forth between states (pods placed and released): the cache's
    memoised what-ifs equal dsan.features.placement on the current snapshot, bit for bit.
    Identical nodes whose states differ only in CPU or only in GPU shares: a memo key that
    missed either would hand one node another's result."""
    from dsan.features import fgd_select_gpus, placement
    from dsan.filtering import allocate, feasible_nodes, release

    rng = np.random.default_rng(21)
    snap = _random_snapshot(rng, 24, True)
    snap.cpu_cap[:] = 64000.0
    snap.cpu_used[:] = 32000.0
    snap.gpu_count[:] = 4
    snap.gpu_model[:] = 0
    snap.gpu_free[:] = [1000] * 4 + [0] * 4
    target = default_workload()
    cache = PlacementCache(target)
    # GPU-only changes (no CPU asked) and CPU-only changes (big enough to cross the target
    # shapes' CPU needs), then the sharing what-ifs that read both.
    movers = [PodSpec("g", 0.0, 0.0, 1, 500), PodSpec("c", 24000.0, 0.0),
              PodSpec("w", 0.0, 0.0, 1, 1000), PodSpec("c2", 6000.0, 0.0)]
    probes = [PodSpec("s", 2000.0, 1024.0, 1, 500), PodSpec("t", 8000.0, 512.0, 1, 250),
              PodSpec("u", 30000.0, 512.0, 1, 500)]
    placed: list[tuple[PodSpec, int, tuple[int, ...]]] = []
    for step in range(120):
        every = np.arange(len(snap), dtype=np.int64)
        for pod in probes:
            got, want = cache.get(pod, snap, every), placement(pod, snap, every, target)
            for f in ("frag_before", "frag_after", "free_after", "slot"):
                np.testing.assert_array_equal(getattr(got, f), getattr(want, f))
        pod = movers[int(rng.integers(len(movers)))]
        feas = feasible_nodes(pod, snap)
        if (step % 3 == 2 or not len(feas)) and placed:
            p, node, gpus = placed.pop(int(rng.integers(len(placed))))
            release(snap, p, node, gpus)
        elif len(feas):
            node = int(feas[int(rng.integers(min(4, len(feas))))])
            gpus = fgd_select_gpus(pod, snap, node, target)
            allocate(snap, pod, node, gpus)
            placed.append((pod, node, gpus))
    assert cache._memo_after and cache._memo_before


@settings(max_examples=30, deadline=None)
@given(ages=st.lists(st.one_of(st.floats(allow_nan=True, allow_infinity=True),
                               st.floats(0, 1e12)), min_size=1, max_size=20))
def test_age_columns_equal_the_nan_to_num_definition(ages: list[float]) -> None:
    from dsan.features import age_columns

    rng = np.random.default_rng(0)
    snap = _random_snapshot(rng, len(ages), True)
    snap.telemetry_age_s = np.array(ages)
    age = snap.telemetry_age_s
    with np.errstate(invalid="ignore"):  # negative ages: NaN in both, as before
        want = np.minimum(np.log1p(np.nan_to_num(age, posinf=1e9)) / np.log1p(3600.0), 1.0)
        got = age_columns(snap, np.arange(len(ages), dtype=np.int64))
    np.testing.assert_array_equal(got[:, 0], want)
    np.testing.assert_array_equal(got[:, 1], np.isfinite(age))
