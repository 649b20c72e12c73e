"""The openb stage's skip weights: a residual DSAN carrying them (skipweights.apply) scores FGD's
integer score plus the weighted featurize columns, per pod class; the shipped file is a
tie-break of FGD's score."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from dsan.core.filtering import feasible_nodes
from dsan.core.snapshot import ClusterSnapshot, PodSpec, empty_snapshot
from dsan.features import FEATURE_NAMES, NODE_FEATURES, featurize, node_block
from dsan.features.target import TargetWorkload
from dsan.model.net import DSANNet, ModelConfig
from dsan.policies.fgd import FGDScorer
from dsan.sim import paths
from dsan.sim.openb import load_nodes
from dsan.train.skipweights import apply, load_openb_skip
from tests.support.models import serving_model

PODS = [
    PodSpec("share", 4000, 8000, 1, 450),
    PodSpec("whole", 8000, 16000, 2, 1000),
    PodSpec("cpu", 6000, 4000, 0, 0),
]


def _snap(seed: int = 0, n: int = 30) -> ClusterSnapshot:
    rng = np.random.default_rng(seed)
    snap = empty_snapshot(
        [f"n{i}" for i in range(n)],
        rng.choice([32000.0, 64000.0, 96000.0], n),
        np.full(n, 2.6e5),
        rng.choice([0, 2, 4, 8], n),
        rng.integers(0, 3, n),
        ["M0", "M1", "M2"],
    )
    snap.gpu_free[:] = np.where(snap.gpu_present, rng.choice([0, 300, 500, 1000], (n, 8)), 0)
    snap.cpu_used[:] = rng.choice([0.0, 4000.0, 16000.0], n)
    return snap


@pytest.mark.parametrize("mode", ["all", "gpu_only", "by_class"])
def test_applied_model_scores_fgd_plus_the_weighted_features(mode: str) -> None:
    snap, target = _snap(2), TargetWorkload.default()
    names = ["gpu_min_free", "node_idle", "node_gpu_model_1", "cpu_free_after"]
    weights = [-0.4, -0.3, 0.7, 0.25]
    gpu_only = mode == "gpu_only"
    # gpu_only: GPU pods alone get the weights (head.gpu_skip); by_class: GPU pods add these,
    # cancelling two of the CPU-pod weights
    extra = [0.4, 0.0, -0.7, 0.3] if mode == "by_class" else (weights if gpu_only else None)
    if gpu_only:
        weights = [0.0] * len(names)
    torch.manual_seed(0)
    net = apply(DSANNet(ModelConfig(hidden=8, head="residual")), names, weights, extra)
    served = serving_model(net, target)
    cols = [FEATURE_NAMES.index(n) for n in names]
    for pod in PODS:
        nodes = feasible_nodes(pod, snap)
        x = featurize(pod, snap, nodes, target)
        w = np.asarray(weights) + (np.asarray(extra) if extra and pod.num_gpu else 0.0)
        fgd = FGDScorer(target).score(pod, snap, nodes)
        want = fgd + x[:, cols].astype(np.float64) @ w
        got = served.logits(pod, snap, nodes)
        np.testing.assert_allclose(got, want, atol=1e-3)
        if gpu_only and pod.num_gpu == 0:  # CPU-only pods: the GPU-pod skip does not apply
            np.testing.assert_allclose(got - got.max(), fgd - fgd.max(), atol=1e-3)
        else:
            assert np.ptp(want - fgd) > 0  # w changes scores


def test_shipped_openb_skip_is_a_tie_break_of_fgd() -> None:
    names, weights, gpu_weights = load_openb_skip()
    assert names and len(names) == len(weights)
    # How far each feature can differ between two openb candidates, which is all a tie-break
    # acts on: the static node block's range over the inventory (node_has_gpu is 1 on every
    # openb node, so it cannot reorder them); the allocation-dependent columns lie in [0, 1].
    nodes = load_nodes(paths.openb_csv(paths.DEFAULT_NODES))
    snap = nodes.snapshot()
    static = node_block(snap, np.arange(len(snap), dtype=np.int64))
    top = [
        float(np.ptp(static[:, i])) if (i := FEATURE_NAMES.index(n)) < len(NODE_FEATURES) else 1.0
        for n in names
    ]
    per_class = [weights]  # CPU-only pods: head.skip
    per_class.append(
        [a + b for a, b in zip(weights, gpu_weights or [0.0] * len(names), strict=True)]
    )
    spans = [sum(abs(x) * t for x, t in zip(w, top, strict=True)) for w in per_class]
    # GPU pods: below one FGD integer point, so the skip only reorders nodes FGD scores
    # equally. CPU-only pods (node_cpu_per_gpu +0.5 on top of gpu_max_free -0.5, and
    # shape1_hostable_after +0.29): up to ~1.4, so a one-point FGD difference can
    # flip on extreme nodes, never two points.
    assert spans[1] < 1.0
    assert spans[0] < 2.0
