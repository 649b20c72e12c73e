"""Serving DSAN: cached node embeddings, a small per-pod head.

The LSTM + GNN embeddings of all nodes depend only on static node columns, telemetry and
topology, never on the pod or on allocations, so :class:`ServingModel` keeps them keyed by a
fingerprint of exactly those inputs and recomputes them only when telemetry (or the node
set) changes. Per pod the hot path is: featurize the candidates, index the cached
embeddings, run the head. No per-node Python, no logging.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

import numpy as np
import numpy.typing as npt
import torch

from dsan.features import (
    N_NODE_FEATURES,
    PlacementCache,
    TargetWorkload,
    default_workload,
    featurize,
    node_block,
    telemetry_of,
)
from dsan.model.export import DEFAULT_DIR, load
from dsan.model.graph import build_graph
from dsan.model.net import DSANNet
from dsan.snapshot import ClusterSnapshot, PodSpec


def _fingerprint(snap: ClusterSnapshot) -> bytes:
    h = hashlib.blake2b(digest_size=16)
    for arr in (
        snap.cpu_cap,
        snap.mem_cap,
        snap.gpu_count,
        snap.gpu_model,
        snap.zone,
        snap.rack,
        snap.nvlink,
        snap.telemetry,
        snap.telemetry_age_s,
        snap.hourly_cost,
    ):
        h.update(b"-" if arr is None else np.ascontiguousarray(arr).tobytes())
    h.update("\0".join(snap.names).encode())  # node set and order (name rank feature)
    return h.digest()


class ServingModel:
    """A DSAN model plus the node-embedding cache of the last snapshot seen."""

    def __init__(self, model: DSANNet, workload: TargetWorkload | None = None) -> None:
        self.model = model.eval()
        self.workload = workload
        self._key: bytes | None = None
        self._emb = torch.zeros(0)
        self._node_cols = np.zeros((0, N_NODE_FEATURES), dtype=np.float32)
        #: How many times the embeddings were recomputed (observability and tests).
        self.embed_count = 0
        self._cache: PlacementCache | None = None

    @classmethod
    def from_dir(
        cls, model_dir: str | Path = DEFAULT_DIR, workload: TargetWorkload | None = None
    ) -> ServingModel:
        model, _ = load(model_dir)
        return cls(model, workload)

    def refresh(self, snap: ClusterSnapshot) -> None:
        """Recompute node embeddings if telemetry, static columns or topology changed."""
        key = _fingerprint(snap)
        if key == self._key:
            return
        nodes = np.arange(len(snap), dtype=np.int64)
        self._node_cols = node_block(snap, nodes)
        ei, ew = build_graph(snap)
        with torch.inference_mode():
            self._emb = self.model.embed_nodes(
                torch.from_numpy(self._node_cols),
                torch.from_numpy(telemetry_of(snap, nodes)),
                ei,
                ew,
            )
        self._key = key
        self.embed_count += 1

    def logits(
        self, pod: PodSpec, snap: ClusterSnapshot, nodes: npt.NDArray[np.int64]
    ) -> npt.NDArray[np.float64]:
        """One logit per entry of ``nodes`` (all assumed feasible)."""
        if len(nodes) == 0:
            return np.zeros(0)
        self.refresh(snap)
        nodes = np.asarray(nodes, dtype=np.int64)
        w = self.workload or default_workload()
        if self._cache is None or self._cache.workload is not w:
            self._cache = PlacementCache(w)
        x, _ = featurize(pod, snap, nodes, w, node_cols=self._node_cols[nodes], cache=self._cache)
        idx = torch.from_numpy(nodes)
        with torch.inference_mode():
            logit, _ = self.model.score(
                torch.from_numpy(x),
                self._emb.index_select(0, idx),
                torch.ones(len(nodes), dtype=torch.bool),
                torch.zeros(len(nodes), dtype=torch.long),
                1,
            )
        return logit.double().numpy()
