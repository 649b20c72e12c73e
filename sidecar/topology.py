"""Topology edges of the cluster graph, from the snapshot's zone / rack / NVLink-domain ids."""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from dsan.core.snapshot import ClusterSnapshot


def topology_edges(snap: ClusterSnapshot) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int8]]:
    """Undirected topology edges as (2, E) node indices plus an edge type per edge.

    Type 0: same NVLink domain; type 1: same rack. Zones are too coarse for cliques and stay
    a node attribute (``snap.zone``). Loops run per group, not per node.
    """
    src: list[npt.NDArray[np.int64]] = []
    dst: list[npt.NDArray[np.int64]] = []
    kinds: list[npt.NDArray[np.int8]] = []
    for kind, ids in enumerate((snap.nvlink, snap.rack)):
        if ids is None:
            continue
        for gid in np.unique(ids[ids >= 0]):
            members = np.flatnonzero(ids == gid)
            if members.size < 2:
                continue
            a, b = np.meshgrid(members, members, indexing="ij")
            off = a != b
            src.append(a[off])
            dst.append(b[off])
            kinds.append(np.full(int(off.sum()), kind, dtype=np.int8))
    if not src:
        return np.zeros((2, 0), dtype=np.int64), np.zeros(0, dtype=np.int8)
    return np.stack([np.concatenate(src), np.concatenate(dst)]), np.concatenate(kinds)
