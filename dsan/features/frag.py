"""GPU fragmentation of nodes against a target workload (Weng et al., ATC'23, §3).

For target shape k (frequency f_k) and node i: if the node can host the shape (GPU model,
CPU, ``num_gpu`` GPUs with ``gpu_milli`` free each), the idle share of every GPU too small
for it is fragment, ``sum_g free[i,g] * [free[i,g] < gpu_milli_k]``; otherwise (or for a
CPU-only shape) all its idle GPU share is. ``F_i = sum_k f_k * frag_ik``, in GPU milli.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt

from dsan.core.snapshot import BOOL, F64, ClusterSnapshot
from dsan.features.target import TargetWorkload

#: Fixed-point scale of shape frequencies (1e-9 resolution; sums stay far below 2**63).
FREQ_SCALE = 1_000_000_000


def node_frag(cpu_free: npt.NDArray[np.floating], gpu_free: npt.NDArray[np.integer],
              access: BOOL, target: TargetWorkload) -> F64:
    """Expected fragment (GPU milli) per row: ``cpu_free`` (m,), ``gpu_free`` (m, G) (absent
    GPUs hold 0), ``access`` (K, m) from :meth:`TargetWorkload.access`."""
    free = gpu_free.astype(np.int32, copy=False)
    milli, need_gpu, num_gpu, cpu_milli, weights = _constants(target)
    total = free.sum(axis=1)  # (m,)
    small = free[None, :, :] < milli  # (U,m,G): distinct shares, U <= K
    frag_small = np.where(small, free[None, :, :], 0).sum(axis=2)[target.milli_index]  # (K,m)
    fit = (free.shape[1] - small.sum(axis=2))[target.milli_index]  # GPUs that take the share
    host = access & need_gpu & (fit >= num_gpu) & (cpu_free[None, :] >= cpu_milli)
    per = np.where(host, frag_small, total[None, :]).astype(np.float64)
    # Integer weights make the sum exact in any order, so a row's value does not depend on
    # its batch (else FGD's truncated "before - after" of an unchanged node can flip).
    return np.asarray(weights @ per, dtype=np.float64) / FREQ_SCALE


_CONSTANTS: dict[int, tuple[TargetWorkload, tuple[npt.NDArray[Any], ...]]] = {}


def _constants(target: TargetWorkload) -> tuple[npt.NDArray[Any], ...]:
    """The target's broadcast-ready columns and integer weights, built once per target (hot
    path: several small :func:`node_frag` calls per decision)."""
    hit = _CONSTANTS.get(id(target))
    if hit is not None and hit[0] is target:
        return hit[1]
    c = (target.milli_unique[:, None, None], (target.num_gpu > 0)[:, None],
         target.num_gpu[:, None], target.cpu_milli[:, None], np.rint(target.freq * FREQ_SCALE))
    if len(_CONSTANTS) > 64:  # never grow without bound
        _CONSTANTS.clear()
    _CONSTANTS[id(target)] = (target, c)
    return c


class FragTracker:
    """Per-node fragment of a snapshot, kept current by refreshing the nodes that changed."""

    def __init__(self, snap: ClusterSnapshot, target: TargetWorkload) -> None:
        self.target = target
        self.access = target.access(snap)
        self.frag = node_frag(snap.cpu_cap - snap.cpu_used, snap.gpu_free, self.access, target)

    def refresh(self, snap: ClusterSnapshot, nodes: npt.NDArray[np.int64] | list[int]) -> None:
        idx = np.asarray(nodes, dtype=np.int64)
        self.frag[idx] = node_frag(snap.cpu_cap[idx] - snap.cpu_used[idx], snap.gpu_free[idx],
                                   self.access[:, idx], self.target)

    def amount(self) -> float:
        """Cluster fragment, GPU milli."""
        return float(self.frag.sum())
