"""LinearFGDScorer: its columns are featurize's, zero weights are FGD, and a residual DSAN
carrying the same skip weights (skipweights.apply) ranks candidates the same way."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from dsan.core.filtering import allocate, feasible_nodes
from dsan.core.snapshot import ClusterSnapshot, PodSpec, empty_snapshot
from dsan.features import FEATURE_NAMES, PlacementCache, featurize, fgd_select_gpus
from dsan.features.target import TargetWorkload
from dsan.model.export import save, serving_model
from dsan.model.net import DSANNet, ModelConfig
from dsan.policies.fgd import FGDScorer
from dsan.train.linear import SUPPORTED, LinearFGDScorer, columns
from dsan.train.skipweights import apply, linear_from_model, skip_args

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


@pytest.mark.parametrize("pod", PODS, ids=[p.name for p in PODS])
def test_columns_equal_featurize(pod: PodSpec) -> None:
    snap = _snap()
    nodes = feasible_nodes(pod, snap)
    assert nodes.size > 5
    target = TargetWorkload.default()
    x, _ = featurize(pod, snap, nodes, target)
    got = columns(list(SUPPORTED), pod, snap, nodes)
    want = x[:, [FEATURE_NAMES.index(n) for n in SUPPORTED]]
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)
    assert np.ptp(got, axis=0).max() > 0  # the columns really vary over candidates


def test_zero_weights_are_fgd_and_unknown_features_are_refused() -> None:
    snap, target = _snap(1), TargetWorkload.default()
    pod = PODS[0]
    nodes = feasible_nodes(pod, snap)
    lin = LinearFGDScorer(["node_idle"], [0.0], target=target)
    np.testing.assert_array_equal(
        lin.score(pod, snap, nodes), FGDScorer(target).score(pod, snap, nodes)
    )
    with pytest.raises(ValueError, match="unsupported"):
        LinearFGDScorer(["fgd_score"], [1.0], target=target)
    with pytest.raises(ValueError, match="weights"):
        LinearFGDScorer(["node_idle"], [1.0, 2.0], target=target)


@pytest.mark.parametrize("mode", ["all", "gpu_only", "by_class"])
def test_applied_model_ranks_like_the_linear_scorer(mode: str) -> None:
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
    lin = LinearFGDScorer(names, weights, extra, target=target)
    both = LinearFGDScorer(names, weights, target=target)
    for pod in PODS:
        nodes = feasible_nodes(pod, snap)
        a, b = lin.score(pod, snap, nodes), served.logits(pod, snap, nodes)
        np.testing.assert_allclose(a, b, atol=1e-3)
        assert np.argmax(a) == np.argmax(b)
        fgd = FGDScorer(target).score(pod, snap, nodes)
        if gpu_only and pod.num_gpu == 0:  # CPU-only pods: the GPU-pod skip does not apply
            np.testing.assert_allclose(b, fgd, atol=1e-3)
        else:
            assert np.ptp(a - fgd) > 0  # w changes scores
        if mode == "by_class":  # CPU-only pods see skip alone, GPU pods skip + gpu_skip
            same = np.allclose(a, both.score(pod, snap, nodes))
            assert same == (pod.num_gpu == 0)


def test_linear_from_model_reads_both_skip_layers(tmp_path: Path) -> None:
    names, weights, extra = ["gpu_max_free", "node_idle"], [-0.5, 0.0], [0.5, -0.05]
    torch.manual_seed(0)
    net = apply(DSANNet(ModelConfig(hidden=8, head="residual")), names, weights, extra)
    save(net, tmp_path / "m", "v", exports=False)
    got = linear_from_model(tmp_path / "m")
    assert got[0] == names
    assert got[1] == pytest.approx(weights) and got[2] == pytest.approx(extra)


def test_linear_from_model_round_trips_and_refuses_a_trained_mlp(tmp_path: Path) -> None:
    names, weights = ["gpu_max_free", "gpu_min_free"], [-0.5, -0.05]
    torch.manual_seed(0)
    net = apply(DSANNet(ModelConfig(hidden=8, head="residual")), names, weights)
    save(net, tmp_path / "m", "v", exports=False)
    got = linear_from_model(tmp_path / "m")
    assert got[0] == names and got[1] == pytest.approx(weights) and got[2] is None
    out = net.head.mlp[2]
    assert isinstance(out, torch.nn.Linear)
    with torch.no_grad():
        out.bias.fill_(0.1)
    save(net, tmp_path / "mlp", "v", exports=False)
    with pytest.raises(ValueError, match="zero MLP"):
        linear_from_model(tmp_path / "mlp")


def test_skip_args_reads_a_gpu_pods_only_result_as_gpu_weights() -> None:
    res = {"features": ["node_idle"], "weights": [0.5], "gpu_pods_only": True}
    assert skip_args(res) == (["node_idle"], [0.0], [0.5])


def test_fragmentation_columns_through_the_placement_cache_stay_exact() -> None:
    """The scorer's PlacementCache (kept across pods) gives featurize's frag columns after
    every allocation, not only on a fresh snapshot."""
    snap, target = _snap(5), TargetWorkload.default()
    names = ["frag_before", "frag_after", "frag_delta"]
    cache = PlacementCache(target)
    for step in range(6):
        pod = PODS[step % len(PODS)]
        nodes = feasible_nodes(pod, snap)
        x, _ = featurize(pod, snap, nodes, target)
        got = columns(names, pod, snap, nodes, target=target, cache=cache)
        want = x[:, [FEATURE_NAMES.index(n) for n in names]]
        np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)
        best = int(nodes[int(np.argmin(got[:, 2]))])
        allocate(snap, pod, best, fgd_select_gpus(pod, snap, best, target))


def test_logits_tie_at_the_dsan_policy_resolution() -> None:
    """The fast scorer chooses at the DSAN policy's resolution (dsan.policies.dsan): its
    float64 sum with the near-best ties set to the best."""
    from dsan.policies.dsan import quantize_logits

    snap, target = _snap(3), TargetWorkload.default()
    names, weights = ["gpu_max_free", "node_cpu_per_gpu"], [-0.5, 0.5]
    on = LinearFGDScorer(names, weights, target=target)
    off = LinearFGDScorer(names, weights, target=target, quantize=False)
    for pod in PODS:
        nodes = feasible_nodes(pod, snap)
        raw = off.score(pod, snap, nodes)
        np.testing.assert_array_equal(on.score(pod, snap, nodes), quantize_logits(raw))
        assert np.ptp(raw - np.round(raw)) > 0  # the skip weights really moved the logits
