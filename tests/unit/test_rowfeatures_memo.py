"""dsan.rowfeatures' memos (the shapes' GPU-model access per node, FGD's exp per argument)
on one PlacementCache across allocation changes and GPU-model relabels: featurize_rows still
gives featurize's bits, the memos were read, and each memoised value is what it stands for."""

from __future__ import annotations

import numpy as np

from dsan import rowfeatures
from dsan.features import (
    FEATURE_NAMES,
    PlacementCache,
    featurize,
    fgd_select_gpus,
    node_block,
)
from dsan.filtering import allocate, feasible_nodes, release
from dsan.policies.target import TargetWorkload
from dsan.rowfeatures import REQUEST_COLUMNS, featurize_rows
from dsan.snapshot import PodSpec
from tests.unit.test_features_fast import _random_pod, _random_snapshot

KEEP = np.setdiff1d(np.arange(len(FEATURE_NAMES)), REQUEST_COLUMNS)


def test_memos_follow_allocations_and_relabels() -> None:
    rng = np.random.default_rng(81)
    snap = _random_snapshot(rng, 16, True)
    # GPU shapes bound to models, so a relabel moves the access columns
    target = TargetWorkload.from_shapes(
        [(4000, 1000, 1, ("P100",)), (2000, 500, 1, ("T4", "V100M16")), (8000, 1000, 2, ()),
         (1000, 250, 1, ("V100M16",)), (16000, 0, 0, ())], [4, 3, 2, 2, 1])
    cache = PlacementCache(target)
    pods = [_random_pod(rng, i) for i in range(6)] + [PodSpec("s", 2000.0, 1024.0, 1, 500)]
    movers = [PodSpec("g", 0.0, 0.0, 1, 500), PodSpec("c", 8000.0, 0.0)]
    placed: list[tuple[PodSpec, int, tuple[int, ...]]] = []
    hits = relabels = 0
    for step in range(80):
        rows = rng.choice(len(snap), size=int(rng.integers(1, 4)), replace=False)
        rows = rows.astype(np.int64)
        for pod in pods:
            want, _ = featurize(pod, snap, rows, target)
            acc = cache.access(snap)
            memo = rowfeatures._ACCESS[0][2] if rowfeatures._ACCESS and \
                rowfeatures._ACCESS[0][0] is acc else {}
            hits += sum(int(r) in memo for r in rows)
            got, _ = featurize_rows(pod, snap, rows, node_block(snap, rows), cache)
            np.testing.assert_array_equal(got[:, KEEP], want[:, KEEP])
        if step % 10 == 9:  # relabel a GPU node: the access columns move
            gpu_nodes = np.flatnonzero(snap.gpu_count > 0)
            if len(gpu_nodes):
                j = int(rng.choice(gpu_nodes))
                snap.gpu_model[j] = (snap.gpu_model[j] + 1) % len(snap.gpu_models)
                relabels += 1
        pod = movers[step % 2]
        feas = feasible_nodes(pod, snap)
        if (step % 3 == 2 or not len(feas)) and placed:
            p, node, gpus = placed.pop(int(rng.integers(len(placed))))
            release(snap, p, node, gpus)
        elif len(feas):
            node = int(feas[int(rng.integers(len(feas)))])
            gpus = fgd_select_gpus(pod, snap, node, target)
            allocate(snap, pod, node, gpus)
            placed.append((pod, node, gpus))
    assert hits > 100 and relabels  # the access memo served most rows
    assert rowfeatures._FGD
    for arg, fgd in rowfeatures._FGD.items():
        assert fgd == float(1 / (1 + np.exp(arg)))
