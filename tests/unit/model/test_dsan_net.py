"""DSANNet: shapes, masking, serving cache and the scorer behind the registry."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from dsan.core.filtering import feasible_nodes
from dsan.core.snapshot import PodSpec, empty_snapshot
from dsan.features import N_FEATURES, N_NODE_FEATURES
from dsan.model.graph import build_graph
from dsan.model.net import DSANNet, ModelConfig
from tests.support.models import serving_model


def _inputs(n: int = 20, m: int = 12, seed: int = 0) -> tuple[torch.Tensor, ...]:
    g = torch.Generator().manual_seed(seed)
    return (
        torch.randn(m, N_FEATURES, generator=g),
        torch.randn(n, N_NODE_FEATURES, generator=g),
        torch.rand(n, 6, 5, generator=g),
        torch.randint(0, n, (2, 40), generator=g),
        torch.rand(40, generator=g),
        torch.randperm(n, generator=g)[:m],
        torch.rand(m, generator=g) > 0.5,
    )


def test_shapes_of_logits_values_and_embeddings() -> None:
    net = DSANNet(ModelConfig(hidden=16)).eval()
    x, nx, tel, ei, ew, cand, mask = _inputs()
    logits, value = net(x, nx, tel, ei, ew, cand, mask)
    assert logits.shape == (12,) and value.shape == (1,)
    emb = net.embed_nodes(nx, tel, ei, ew)
    assert emb.shape == (20, 2, 16)
    seg = torch.tensor([0] * 5 + [1] * 7)
    lg, v = net.score(x, emb[cand], torch.ones(12, dtype=torch.bool), seg, 2)
    assert lg.shape == (12,) and v.shape == (2,)


@pytest.mark.parametrize("seed", range(8))
def test_an_infeasible_node_never_wins(seed: int) -> None:
    torch.manual_seed(seed)
    net = DSANNet(ModelConfig(hidden=8)).eval()
    x, nx, tel, ei, ew, cand, mask = _inputs(seed=seed)
    mask[0] = True
    # Make every infeasible row look irresistible to the skip connection.
    with torch.no_grad():
        x[~mask] = 50.0 * torch.sign(net.head.skip.weight[0])
        logits, _ = net(x, nx, tel, ei, ew, cand, mask)
    assert bool(mask[int(torch.argmax(logits))])
    assert torch.softmax(logits, 0)[~mask].sum() < 1e-6


def test_bad_config_is_refused() -> None:
    with pytest.raises(ValueError, match="hidden"):
        ModelConfig(hidden=1)


def test_graph_links_racks_nvlink_and_zones_with_latency_weights() -> None:
    snap = empty_snapshot([f"n{i}" for i in range(6)], [1e3] * 6, [1e3] * 6, [0] * 6, [-1] * 6, [])
    snap.zone = np.array([0, 0, 0, 0, 1, 1], dtype=np.int32)
    snap.rack = np.array([0, 0, 1, 1, 2, -1], dtype=np.int32)
    snap.nvlink = np.array([0, -1, -1, -1, -1, -1], dtype=np.int32)
    ei, ew = build_graph(snap)
    pairs = {
        (int(a), int(b)): float(w) for (a, b), w in zip(ei.T.tolist(), ew.tolist(), strict=True)
    }
    assert pairs[(0, 1)] == 0.5 and pairs[(1, 0)] == 0.5  # same rack beats same zone
    assert pairs[(4, 5)] == pytest.approx(0.2)  # same zone, different/unknown rack
    assert (0, 4) not in pairs  # different zones are not linked
    assert all(a != b for a, b in pairs)


def test_serving_recomputes_embeddings_only_when_telemetry_changes(tmp_path) -> None:
    n = 10
    snap = empty_snapshot(
        [f"n{i}" for i in range(n)], [64000] * n, [262144] * n, [4] * n, [0] * n, ["M0"]
    )
    snap.telemetry = np.zeros((n, 6, 5), dtype=np.float32)
    sm = serving_model(DSANNet(ModelConfig(hidden=8)))
    pod = PodSpec("p", 1000, 1000, 1, 500)
    nodes = feasible_nodes(pod, snap)
    sm.logits(pod, snap, nodes)
    snap.gpu_free[0, 0] = 500  # an allocation: embeddings stay
    snap.cpu_used[0] = 1000
    s2 = sm.logits(pod, snap, nodes)
    assert sm.embeddings.version == 1
    snap.telemetry[3, -1, 2] = 0.9  # new telemetry sample, announced: recompute
    snap.telemetry_version += 1
    s3 = sm.logits(pod, snap, nodes)
    assert sm.embeddings.version == 2
    assert s2.shape == s3.shape == (n,)


def test_untrained_residual_head_is_fgd_and_training_moves_it() -> None:
    from dsan.features import FEATURE_NAMES

    torch.manual_seed(3)
    net = DSANNet(ModelConfig(hidden=8, head="residual"))
    x, nx, tel, ei, ew, cand, mask = _inputs(seed=3)
    col = FEATURE_NAMES.index("fgd_score_int")
    x[:, col] = torch.randint(0, 100, (x.shape[0],)).float() / 100
    logits, _ = net(x, nx, tel, ei, ew, cand, mask)
    want = torch.where(mask, x[:, col] * 100, torch.full_like(logits, -1e9))
    # softplus(0.5413) = 0.99998: FGD points up to a common scale, nothing else
    assert torch.allclose(logits, want, rtol=1e-4, atol=1e-4)
    # the residual is trainable: one gradient step on a non-FGD target changes the ranking
    opt = torch.optim.SGD(net.parameters(), lr=0.5)
    target = int(torch.argmin(torch.where(mask, want, torch.full_like(want, 1e9))))
    loss = -torch.log_softmax(net(x, nx, tel, ei, ew, cand, mask)[0], 0)[target]
    loss.backward()
    opt.step()
    moved, _ = net(x, nx, tel, ei, ew, cand, mask)
    assert not torch.allclose(moved, want, atol=1e-3)


def test_unknown_head_is_refused() -> None:
    with pytest.raises(ValueError, match="head"):
        ModelConfig(head="transformer")
