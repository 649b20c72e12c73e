"""The ``pool:`` rows of ``bench/scenario_boot_frontier.py``: the always-on pool's size, and
GPU pods.

The ``anchored`` teachers keep a pool of nodes powered all day with one web replica each
(``anchored-drivers``: every node of 32 cores or more, 120 nodes); their utilisation then
moves only with the powered set. Two ways to shrink it, measured side by side:

* ``PoolSubset``: the pool is the 64-core nodes plus the first ``k32`` 32-core nodes by name
  (``node_name_rank`` is a DSAN feature, so a student could learn the subset); the 32-core
  nodes left out host no web and may run hot, like the 16-core ones.
* GPU pods (10 nodes, a third of the metric): ``anchored-gpufill``
  (``scenario_teachers.py``: the fullest powered GPU node first, FGD inside one
  allocation level), ``GpuOrder`` ``fgd-then-fullest`` (FGD first, the fullest node as its
  tie-break) and ``spread`` (the emptiest powered GPU node first).

Both are written as a change to ``anchored-drivers``' score, not as a copy of it.

Usage::

    .venv/bin/python bench/scenario_boot_frontier.py --seeds 1-3 --baselines tetris \
        --rows "pool:"
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
from scenario_teachers import Anchored, AnchoredGpuFill, gpu_allocated  # bench/, next to this file

from dsan.core.snapshot import ClusterSnapshot, PodSpec
from dsan.features.target import TargetWorkload
from dsan.policies.base import Scorer
from dsan.train.teachers import WEB_TYPE


class PoolSubset(Anchored):
    """``anchored-drivers`` with the pool cut to the 64-core nodes + the first ``k32``
    32-core nodes by name: a left-out 32-core node loses web's home bonus (500) and, for
    batch, the must-stay-cool term that only web-hosting nodes carry."""

    def __init__(self, target: TargetWorkload | None, k32: int) -> None:
        super().__init__(target, spread_drivers=True)
        self.k32 = k32
        self._out: np.ndarray | None = None

    def left_out(self, snap: ClusterSnapshot) -> np.ndarray:
        if self._out is None:
            rank = np.argsort(np.argsort(np.asarray(snap.names)))
            mid = np.flatnonzero((snap.cpu_cap == 32000) & (snap.gpu_count == 0))
            out = np.zeros(len(snap), dtype=bool)
            out[mid[np.argsort(rank[mid])][self.k32 :]] = True
            self._out = out
        return self._out

    def score(self, pod: PodSpec, snap: ClusterSnapshot, nodes: np.ndarray) -> np.ndarray:
        s = np.asarray(super().score(pod, snap, nodes), dtype=np.float64)
        if pod.num_gpu > 0:
            return s
        out = self.left_out(snap)[nodes]
        if pod.task_type == WEB_TYPE:
            return s - 500.0 * out
        after = (snap.cpu_used[nodes] + pod.cpu_milli) / np.maximum(snap.cpu_cap[nodes], 1.0)
        return s + 200.0 * (out & (after > self.cool))


class GpuOrder(AnchoredGpuFill):
    """``anchored-gpufill`` with the GPU fill order changed: ``fgd-then-fullest`` ranks by FGD
    (weight 10, as ``anchored-drivers``) and breaks its ties by allocation (weight 1);
    ``spread`` takes the emptiest powered GPU node first (allocation weight -10)."""

    def __init__(self, target: TargetWorkload | None, order: str) -> None:
        super().__init__(target, spread_drivers=True)
        if order not in ("fgd-then-fullest", "spread"):
            raise ValueError(order)
        self.order = order

    def score(self, pod: PodSpec, snap: ClusterSnapshot, nodes: np.ndarray) -> np.ndarray:
        s = np.asarray(super().score(pod, snap, nodes), dtype=np.float64)
        if pod.num_gpu == 0:
            return s
        alloc = gpu_allocated(snap, nodes)
        if self.order == "spread":
            return s - 20.0 * alloc
        f = np.asarray(self.fgd.score(pod, snap, nodes), dtype=np.float64)
        fn = (f - f.min()) / max(float(f.max() - f.min()), 1e-9)
        return s + 9.0 * fn - 9.0 * alloc


ROWS: dict[str, Callable[[TargetWorkload], Scorer]] = {
    **{
        f"pool: anchored-drivers, pool = 64c + {k} of the 70 32c nodes": (
            lambda t, k=k: PoolSubset(t, k)
        )
        for k in (65, 60, 50, 40, 30)
    },
    "pool: anchored-gpufill (GPU pods: the fullest powered GPU node first)": (
        lambda t: AnchoredGpuFill(t, spread_drivers=True)
    ),
    "pool: anchored-drivers, GPU pods FGD first, the fullest node as tie-break": (
        lambda t: GpuOrder(t, "fgd-then-fullest")
    ),
    "pool: anchored-drivers, GPU pods to the emptiest powered GPU node": (
        lambda t: GpuOrder(t, "spread")
    ),
}
