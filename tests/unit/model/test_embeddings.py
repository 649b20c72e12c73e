"""NodeEmbeddings (numpy): incremental refreshes equal DSANNet.embed_nodes over the whole
snapshot (PyG's message passing), recomputing only the LSTM rows whose telemetry changed
(``epoch`` counts the full refreshes); the numpy mean adjacency aggregates as PyG's GraphConv
does."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch_geometric.nn import GraphConv

from dsan.core.snapshot import ClusterSnapshot
from dsan.features import node_block, telemetry_of
from dsan.model.graph import MeanAdjacency, build_graph
from dsan.model.net import DSANNet, ModelConfig
from dsan.model.serving import NodeEmbeddings
from tests.support.headworld import random_snapshot
from tests.support.models import numpy_runtime


def _snap(n: int) -> ClusterSnapshot:
    snap = random_snapshot(n, 0)
    snap.nvlink = np.where(snap.gpu_count >= 4, np.arange(n) // 2, -1).astype(np.int32)
    return snap


@pytest.fixture
def model() -> DSANNet:
    torch.manual_seed(0)
    return DSANNet(ModelConfig(hidden=16))


def _full(model: DSANNet, snap: ClusterSnapshot) -> torch.Tensor:
    """The reference: PyG's message passing over every node, nothing cached."""
    nodes = np.arange(len(snap), dtype=np.int64)
    ei, ew = (torch.from_numpy(a) for a in build_graph(snap))
    with torch.inference_mode():
        return model.embed_nodes(torch.from_numpy(node_block(snap, nodes)),
                                 torch.from_numpy(telemetry_of(snap, nodes)), ei, ew)


def _embeddings(model: DSANNet) -> tuple[NodeEmbeddings, list[int]]:
    """Embeddings of ``model`` and the row counts of every LSTM call they make."""
    rt = numpy_runtime(model)
    calls: list[int] = []
    temporal = rt.temporal
    rt.temporal = lambda tel: calls.append(len(tel)) or temporal(tel)  # type: ignore[method-assign]
    return NodeEmbeddings(rt), calls


def _check(e: NodeEmbeddings, model: DSANNet, snap: ClusterSnapshot) -> None:
    nodes = np.arange(len(snap), dtype=np.int64)
    np.testing.assert_array_equal(e.node_cols, node_block(snap, nodes))  # bit for bit
    full = _full(model, snap).numpy()
    rt = e.runtime
    # the streams the runtime holds: compare through its keys (a linear map of both streams)
    np.testing.assert_allclose(rt._keys, full @ rt._w_key, atol=1e-4, rtol=1e-4)


def test_telemetry_change_recomputes_only_those_rows_and_equals_full(model: DSANNet) -> None:
    snap = _snap(60)
    e, calls = _embeddings(model)
    e.refresh(snap)
    _check(e, model, snap)
    assert (e.epoch, calls) == (1, [60])
    assert snap.telemetry is not None and snap.telemetry_age_s is not None
    snap.telemetry[[3, 17, 41], -1] = 0.95  # in place, as the sidecar's rings are written
    snap.telemetry_age_s[:] += 7.0  # every node's age moves with the clock
    e.refresh(snap)
    _check(e, model, snap)
    assert (e.epoch, calls) == (1, [60, 3])
    e.refresh(snap)  # nothing changed: no LSTM row, still equal
    assert calls == [60, 3]
    _check(e, model, snap)


def test_static_and_topology_writes_in_place_are_noticed(model: DSANNet) -> None:
    snap = _snap(60)
    e = NodeEmbeddings(numpy_runtime(model))
    e.refresh(snap)
    snap.cpu_cap[5] *= 2  # a resized node: every static-derived column may move
    e.refresh(snap)
    assert e.epoch == 2
    _check(e, model, snap)
    assert snap.rack is not None
    snap.rack[:10] = 99  # relabelled racks: new edges, so a new adjacency
    e.refresh(snap)
    _check(e, model, snap)


def test_nan_telemetry_rows_stay_exact(model: DSANNet) -> None:
    snap = _snap(30)
    assert snap.telemetry is not None
    snap.telemetry[2, 0, 1] = np.nan
    e, calls = _embeddings(model)
    e.refresh(snap)
    e.refresh(snap)
    assert calls == [30, 1]  # NaN != NaN: that row is redone, harmlessly
    nodes = np.arange(len(snap), dtype=np.int64)
    np.testing.assert_array_equal(e.node_cols, node_block(snap, nodes))


@pytest.mark.parametrize("edges", ["graph", "none", "isolated"])
def test_the_mean_adjacency_aggregates_as_pyg(edges: str) -> None:
    torch.manual_seed(1)
    n = 50
    conv = GraphConv(12, 8, aggr="mean")
    x = torch.randn(n, 12)
    if edges == "none":
        ei, ew = torch.zeros((2, 0), dtype=torch.long), torch.zeros(0)
    else:
        g = torch.Generator().manual_seed(2)
        hi = n if edges == "graph" else n // 2  # the upper half has no in-edges at all
        ei = torch.unique(torch.randint(0, hi, (2, 300), generator=g), dim=1)
        ew = torch.rand(ei.shape[1], generator=g)
    adj = MeanAdjacency.build(ei.numpy(), ew.numpy(), n)
    with torch.inference_mode():
        ref = conv(x, ei, ew).numpy()
        w_rel, b_rel = conv.lin_rel.weight.numpy(), conv.lin_rel.bias.numpy()
        w_root = conv.lin_root.weight.numpy()
    got = (adj @ x.numpy()) @ w_rel.T + b_rel + x.numpy() @ w_root.T
    np.testing.assert_allclose(got, ref, atol=1e-5, rtol=1e-5)


def test_a_node_pulling_an_image_is_noticed(model: DSANNet) -> None:
    snap = _snap(30)
    snap.images = [frozenset({1}) if i % 3 else frozenset() for i in range(len(snap))]
    e = NodeEmbeddings(numpy_runtime(model))
    e.refresh(snap)
    snap.images[4] = frozenset({1, 2})  # replaced in the list, as the sidecar's cache does
    e.refresh(snap)
    assert e.epoch == 2
    _check(e, model, snap)
