"""Node embeddings of the cluster, recomputed at the cost of what changed.

The sidecar's telemetry moves a few nodes at a time (one GPUTelemetry object per node), yet
each change used to recompute every node: at 1,000 nodes ~70 ms on one CPU thread, nearly
all of it PyG's scatter path in the GNN, paid by the next request. Now, per refresh:

- **temporal stream** (LSTM): only the nodes whose telemetry values changed; a node's LSTM
  state depends on its own samples alone;
- **node columns** (:func:`dsan.features.node_block`): the same rows, plus the two age
  columns of every node (they grow with the clock); everything else is static unless the
  static inputs' *values* change, which is compared (copies are kept), since the sidecar
  writes its snapshot in place;
- **spatial stream** (2 GraphConv layers): every node, as one sparse matmul per layer over
  the mean adjacency (:func:`dsan.model.graph.mean_adjacency`), rebuilt only when the
  topology's values change. The GNN mixes every node's age columns into its neighbours, so
  no row is exempt; the matmul makes that cheap (~1 ms at 1,000 nodes).

The result equals :meth:`DSANNet.embed_nodes` on the whole snapshot up to float32 rounding
(the LSTM over a subset of rows, the matmul's summation order; tests pin it at 1e-5).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt
import torch

from dsan.features import AGE_COLUMNS, N_NODE_FEATURES, age_columns, node_block, telemetry_of
from dsan.model.graph import build_graph, mean_adjacency
from dsan.model.net import DSANNet
from dsan.snapshot import ClusterSnapshot

F32 = npt.NDArray[np.float32]
#: The snapshot columns node_block's non-telemetry, non-age columns are made of.
_STATIC = ("cpu_cap", "mem_cap", "gpu_count", "gpu_model", "zone", "rack", "nvlink",
           "hourly_cost", "taint_mask")
_TOPOLOGY = ("zone", "rack", "nvlink")


def _copy(a: Any) -> Any:
    return None if a is None else a.copy()


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, np.ndarray) and isinstance(b, np.ndarray):
        return np.array_equal(a, b)
    return bool(a == b)


class NodeEmbeddings:
    """The (N, 2, H) temporal and spatial embeddings of the last snapshot seen."""

    def __init__(self, model: DSANNet) -> None:
        self.model = model
        #: node_block of every node as last computed (a new array per refresh).
        self.node_cols: F32 = np.zeros((0, N_NODE_FEATURES), dtype=np.float32)
        self.emb = torch.zeros(0)
        self._ht = torch.zeros(0)
        self._tel: F32 | None = None
        self._static: tuple[Any, ...] | None = None
        self._topo: tuple[Any, ...] | None = None
        self._adj = torch.zeros(0)
        #: Nodes whose absolute columns the last refresh changed (their telemetry moved);
        #: None after a full refresh (everything may have moved).
        self.moved: npt.NDArray[np.int64] | None = None
        #: Refreshes that recomputed everything, and LSTM rows recomputed by the others.
        self.full_refreshes = 0
        self.rows_recomputed = 0

    def refresh(self, snap: ClusterSnapshot, full: bool = False) -> None:
        """Bring the embeddings to ``snap``; ``full`` recomputes every node (new weights)."""
        n = len(snap)
        nodes = np.arange(n, dtype=np.int64)
        tel = telemetry_of(snap, nodes)
        static = self._static_key(snap)
        model = self.model
        with torch.inference_mode():
            old = self._tel
            if full or old is None or old.shape != tel.shape or not all(
                map(_same, static, self._static or ())
            ):
                cols = node_block(snap, nodes)
                ht = model.temporal(torch.from_numpy(tel))
                self.full_refreshes += 1
                self.moved = None
            else:
                # NaN readings compare unequal: such rows are simply recomputed every time.
                changed = np.flatnonzero((tel != old).any(axis=(1, 2)))
                cols, ht = self.node_cols.copy(), self._ht.clone()
                if changed.size:
                    cols[changed] = node_block(snap, changed)
                    ht[torch.from_numpy(changed)] = model.temporal(torch.from_numpy(tel[changed]))
                cols[:, AGE_COLUMNS] = age_columns(snap, nodes)
                self.rows_recomputed += int(changed.size)
                self.moved = changed
            hs = model.spatial.forward_adj(torch.from_numpy(cols), self._adjacency(snap))
            self.emb = torch.stack([ht, hs], dim=1)
        self.node_cols, self._ht, self._tel, self._static = cols, ht, tel, static

    @staticmethod
    def _static_key(snap: ClusterSnapshot) -> tuple[Any, ...]:
        # node_block reads only how many images a node holds: counts, not copies of 5,000
        # sets (each refresh's garbage would feed the cyclic GC a full collection now and then)
        images = (None if snap.images is None
                  else np.fromiter(map(len, snap.images), dtype=np.int64, count=len(snap)))
        return (len(snap), list(snap.names), images,
                *(_copy(getattr(snap, c)) for c in _STATIC))

    def _adjacency(self, snap: ClusterSnapshot) -> torch.Tensor:
        """The spatial stream's mean adjacency, rebuilt only when the topology's values
        change (building it costs ~7 ms at 1,000 nodes; telemetry changes far more often)."""
        topo = (len(snap), *(getattr(snap, c) for c in _TOPOLOGY))
        if self._topo is None or not all(map(_same, self._topo, topo)):
            ei, ew = build_graph(snap)
            self._adj = mean_adjacency(ei, ew, len(snap))
            self._topo = tuple(_copy(a) if isinstance(a, np.ndarray) else a for a in topo)
        return self._adj
