"""Node embeddings of the cluster, recomputed at the cost of what changed: the LSTM and node
columns of the nodes whose telemetry changed (everything when a static input's values change;
compared against copies, as the sidecar writes its snapshot in place), the GNN over every node
(it mixes every node's age columns into its neighbours). Equal to a full recompute up to
float32 rounding.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from dsan.core.snapshot import ClusterSnapshot
from dsan.features import AGE_COLUMNS, N_NODE_FEATURES, age_columns, node_block, telemetry_of
from dsan.model.graph import F32, Graph
from dsan.model.runtime import Runtime

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
    """Every node's pod-independent columns and both streams, as of the last refresh."""

    def __init__(self, runtime: Runtime) -> None:
        self.runtime = runtime
        #: node_block of every node as last computed (a new array per refresh).
        self.node_cols: F32 = np.zeros((0, N_NODE_FEATURES), dtype=np.float32)
        #: Bumped by every refresh: logits computed before it are stale.
        self.version = 0
        #: Bumped when the node set or a static column changed: per-node rows computed
        #: before it (features, not only logits) are stale.
        self.epoch = 0
        self._ht: F32 = np.zeros((0, 0), dtype=np.float32)
        self._tel: F32 | None = None
        self._static: tuple[Any, ...] | None = None
        self._topo: tuple[Any, ...] | None = None
        self._graph: Graph | None = None
        #: Refreshes that recomputed everything, and LSTM rows recomputed by the others.
        self.full_refreshes = 0
        self.rows_recomputed = 0

    def refresh(self, snap: ClusterSnapshot) -> None:
        """Bring the node columns and streams to ``snap``."""
        n = len(snap)
        nodes = np.arange(n, dtype=np.int64)
        tel = telemetry_of(snap, nodes)
        static = self._static_key(snap)
        rt = self.runtime
        old = self._tel
        if old is None or old.shape != tel.shape or not all(
                map(_same, static, self._static or ())):
            cols = node_block(snap, nodes)
            ht = rt.temporal(tel)
            self.full_refreshes += 1
            self.epoch += 1
        else:
            # NaN readings compare unequal: such rows are simply recomputed every time.
            changed = np.flatnonzero((tel != old).any(axis=(1, 2)))
            cols, ht = self.node_cols.copy(), self._ht.copy()
            if changed.size:
                cols[changed] = node_block(snap, changed)
                ht[changed] = rt.temporal(tel[changed])
            cols[:, AGE_COLUMNS] = age_columns(snap, nodes)
            self.rows_recomputed += int(changed.size)
        rt.set_streams(ht, rt.spatial(cols, self._graph_of(snap)))
        self.node_cols, self._ht, self._tel, self._static = cols, ht, tel, static
        self.version += 1

    @staticmethod
    def _static_key(snap: ClusterSnapshot) -> tuple[Any, ...]:
        # node_block reads only how many images a node holds: counts, not copies of the sets
        images = (None if snap.images is None
                  else np.fromiter(map(len, snap.images), dtype=np.int64, count=len(snap)))
        return (len(snap), list(snap.names), images,
                *(_copy(getattr(snap, c)) for c in _STATIC))

    def _graph_of(self, snap: ClusterSnapshot) -> Graph:
        """The topology graph, rebuilt only when the topology's values change."""
        topo = (len(snap), *(getattr(snap, c) for c in _TOPOLOGY))
        if self._graph is None or self._topo is None or not all(map(_same, self._topo, topo)):
            self._graph = Graph.of(snap)
            self._topo = tuple(_copy(a) if isinstance(a, np.ndarray) else a for a in topo)
        return self._graph
