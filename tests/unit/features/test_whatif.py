"""dsan.features.whatif.free_after: the cheap free-share-after is placement()'s wherever the counts
of the requested shares can tell."""

from __future__ import annotations

import numpy as np
import pytest

from dsan.core.snapshot import ClusterSnapshot, PodSpec, empty_snapshot
from dsan.features.target import TargetWorkload
from dsan.features.whatif import free_after, placement


def _snap(seed: int, n: int = 60) -> ClusterSnapshot:
    rng = np.random.default_rng(seed)
    snap = empty_snapshot(
        [f"n{i}" for i in range(n)],
        rng.choice([32000.0, 96000.0], n),
        np.full(n, 2.6e5),
        rng.choice([2, 4, 8], n),
        rng.integers(0, 3, n),
        ["M0", "M1", "M2"],
    )
    snap.gpu_free[:] = np.where(
        snap.gpu_present, rng.choice([0, 100, 300, 470, 500, 810, 1000], (n, 8)), 0
    )
    snap.cpu_used[:] = rng.choice([0.0, 4000.0, 16000.0], n)
    return snap


PODS = [
    PodSpec("share450", 4000, 8000, 1, 450),
    PodSpec("share190", 3000, 8000, 1, 190),
    PodSpec("whole2", 8000, 16000, 2, 1000),
    PodSpec("cpu", 6000, 4000, 0, 0),
]


@pytest.mark.parametrize("pod", PODS, ids=[p.name for p in PODS])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_counts_of_requested_shares_match_placement(pod: PodSpec, seed: int) -> None:
    snap, w = _snap(seed), TargetWorkload.default()
    nodes = np.arange(len(snap), dtype=np.int64)
    want = placement(pod, snap, nodes, w).free_after
    shares = np.unique(w.gpu_milli[w.gpu_milli > 0])
    got = free_after(pod, snap, nodes, w, w.access(snap), shares)
    for share in shares:
        np.testing.assert_array_equal((got // share).sum(1), (want // share).sum(1))
    # no share asked for: any fitting slot, still the same total taken per node
    loose = free_after(pod, snap, nodes, w, w.access(snap), [])
    np.testing.assert_array_equal(loose.sum(1), want.sum(1))


def test_slot_choice_matters_for_some_rows() -> None:
    """Guards the test above: the first fitting slot alone would get some counts wrong."""
    pod, w = PODS[0], TargetWorkload.default()
    wrong = 0
    for seed in range(3):
        snap = _snap(seed)
        nodes = np.arange(len(snap), dtype=np.int64)
        want = placement(pod, snap, nodes, w).free_after
        loose = free_after(pod, snap, nodes, w, w.access(snap), [])
        wrong += int(((loose // 810).sum(1) != (want // 810).sum(1)).sum())
    assert wrong > 0
