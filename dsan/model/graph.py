"""The node graph of the spatial stream: edges inside an NVLink domain, rack or zone.

Weights stand for inverse latency (the strongest relation wins). Zones can hold hundreds of
nodes, so a zone links each node only to its next :data:`ZONE_DEGREE` neighbours in zone order,
keeping E ~ O(N) instead of O(N^2). Without topology the graph is empty: the GNN acts per node.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from dsan.core.snapshot import I32, I64, ClusterSnapshot

F32 = npt.NDArray[np.float32]
W_NVLINK, W_RACK, W_ZONE = 1.0, 0.5, 0.2
ZONE_DEGREE, MAX_RACK, MAX_NVLINK = 2, 64, 16


def _clique_edges(ids: I32, max_group: int) -> I64:
    """Directed edges between nodes sharing an id (>= 0), groups capped to ``max_group``."""
    order = np.argsort(ids, kind="stable")
    sid = ids[order]
    out: list[I64] = []
    # Offsets 1..max_group-1 inside sorted runs: vectorised per offset, not per node.
    for k in range(1, max_group):
        same = (sid[k:] == sid[:-k]) & (sid[k:] >= 0)
        a, b = order[:-k][same], order[k:][same]
        out += [np.stack([a, b]), np.stack([b, a])]
    return np.concatenate(out, axis=1) if out else np.zeros((2, 0), dtype=np.int64)


@dataclass(frozen=True)
class MeanAdjacency:
    r"""GraphConv's weighted mean aggregation as a CSR matrix in numpy.

    .. math:: A_{ij} = w_{ji} / \deg_{in}(i), \qquad (A x)_i = \frac{1}{\deg_{in}(i)}
              \sum_{j \to i} w_{ji} x_j

    so ``A @ x`` is what ``GraphConv(aggr="mean")`` aggregates before ``lin_rel``; nodes
    without in-edges get a zero row, as PyG's mean of nothing. Built once per topology.
    """

    n: int
    #: Row i's in-edges are ``src[indptr[i]:indptr[i + 1]]`` with weights ``weight[...]``.
    indptr: I64
    src: I64
    weight: F32

    @classmethod
    def build(cls, edge_index: I64, edge_weight: F32, n: int) -> MeanAdjacency:
        src, dst = edge_index
        order = np.argsort(dst, kind="stable")
        counts = np.bincount(dst, minlength=n)
        deg = np.maximum(counts, 1).astype(np.float32)
        indptr = np.zeros(n + 1, dtype=np.int64)
        np.cumsum(counts, out=indptr[1:])
        return cls(n, indptr, src[order].astype(np.int64),
                   (edge_weight[order] / deg[dst[order]]).astype(np.float32))

    def __matmul__(self, x: F32) -> F32:
        """``A @ x`` for ``x`` (n, d): a gather and one segment sum."""
        out = np.zeros((self.n, x.shape[1]), dtype=np.float32)
        if len(self.src):
            rows = np.flatnonzero(self.indptr[1:] > self.indptr[:-1])
            msg = x[self.src] * self.weight[:, None]
            out[rows] = np.add.reduceat(msg, self.indptr[rows], axis=0)
        return out


def build_graph(snap: ClusterSnapshot) -> tuple[I64, F32]:
    """``edge_index`` (2, E) int64 and ``edge_weight`` (E,) float32 for ``snap`` (numpy:
    training wraps them with ``torch.from_numpy``)."""
    parts: list[tuple[I64, float]] = []
    if snap.zone is not None:
        parts.append((_clique_edges(snap.zone, ZONE_DEGREE + 1), W_ZONE))
    if snap.rack is not None:
        parts.append((_clique_edges(snap.rack, MAX_RACK), W_RACK))
    if snap.nvlink is not None:
        parts.append((_clique_edges(snap.nvlink, MAX_NVLINK), W_NVLINK))
    if not parts:
        return np.zeros((2, 0), dtype=np.int64), np.zeros(0, dtype=np.float32)
    edges = np.concatenate([e for e, _ in parts], axis=1)
    weights = np.concatenate([np.full(e.shape[1], w) for e, w in parts])
    n = len(snap)
    key = edges[0] * n + edges[1]
    # Keep the strongest weight per (src, dst): sort by weight descending, unique on key.
    order = np.argsort(-weights, kind="stable")
    _, first = np.unique(key[order], return_index=True)
    keep = order[first]
    return edges[:, keep].astype(np.int64), weights[keep].astype(np.float32)


@dataclass(frozen=True)
class Graph:
    """A snapshot's topology graph: its edges (what PyG's message passing reads) and their
    mean adjacency (what the numpy runtime multiplies by)."""

    edge_index: I64
    edge_weight: F32
    adjacency: MeanAdjacency

    @classmethod
    def of(cls, snap: ClusterSnapshot) -> Graph:
        ei, ew = build_graph(snap)
        return cls(ei, ew, MeanAdjacency.build(ei, ew, len(snap)))
