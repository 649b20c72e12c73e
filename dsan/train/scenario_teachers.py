"""Scenario-stage teachers added in sessions 7 and 14, and the registry the trainer looks
names up in.

``anchored-gpufill`` is ``anchored-drivers`` (``dsan.train.teachers.Anchored`` with batch
drivers spread) with one change for GPU pods: among the powered-on, cool GPU nodes it takes
the one whose GPUs are already the most allocated, and uses FGD only to break ties inside
that node set (``anchored-drivers`` ranks them by FGD). Why: on the seed scenario the
``anchored`` teachers keep a peak-sized CPU pool powered, so their utilisation can only move
through the powered set, and the one part of it a placement still controls is the GPU nodes
(10 nodes, a third of the utilisation metric). Filling the fullest GPU node first lets the
others empty and power off (docs/results/table1.md, session 7: +0.45 points on seeds 1-3,
+0.56 on seeds 4-15, the CPU side unchanged). Everything it reads (pod count, image cache,
the GPUs' free shares, FGD's score) is in DSAN's features.

``packing-rescue`` (session 14) is the packing teacher (``scenario``) with two boot-aware
rules for CPU pods other than web, session 5's ``Keep`` with ``rescue`` 50
(bench/scenario_boot_frontier.py): a powered-off node is taken largest first (one 64-core
boot rather than four 16-core ones), and a powered node that is empty, i.e. in its
scale-down grace period, comes first among the powered ones (otherwise it powers off and the
next wave boots it back). With cluster-autoscaler semantics and over-provisioning
placeholders (``scale_up.ready_nodes_first``, ``overprovisioning``) it is the teacher that
wins utilisation and P99 there (docs/results/table1.md, session 14).
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial

import numpy as np
import numpy.typing as npt

from dsan.core.snapshot import ClusterSnapshot, PodSpec
from dsan.features.target import TargetWorkload
from dsan.train.teachers import SCENARIO_TEACHERS, WEB_TYPE, Anchored, Composite


def gpu_allocated(snap: ClusterSnapshot, nodes: npt.NDArray[np.int64]) -> npt.NDArray[np.float64]:
    """Allocated fraction of each node's GPU shares (0 on a CPU-only node)."""
    cap = snap.gpu_count[nodes].astype(np.float64) * 1000.0
    free = snap.gpu_free[nodes].sum(axis=1).astype(np.float64)
    return np.where(cap > 0, (cap - free) / np.maximum(cap, 1.0), 0.0)


class AnchoredGpuFill(Anchored):
    """``anchored-drivers`` whose GPU pods fill the fullest powered GPU node first."""

    name = "anchored-gpufill"

    def score(
        self, pod: PodSpec, snap: ClusterSnapshot, nodes: npt.NDArray[np.int64]
    ) -> npt.NDArray[np.float64]:
        if pod.num_gpu == 0:
            return super().score(pod, snap, nodes)
        # Composite's GPU branch (what anchored-drivers gives GPU pods) is 100 x powered on
        # + 200 x CPU stays cool + 10 x FGD normalised to [0, 1] + 1 x image cached; keep its
        # class terms, turn FGD's weight down to 1 and rank by allocation first (10 x the
        # allocated fraction: 2.5 points a whole GPU), so FGD only orders one allocation level.
        f = np.asarray(self.fgd.score(pod, snap, nodes), dtype=np.float64)
        fn = (f - f.min()) / max(float(f.max() - f.min()), 1e-9)
        base = np.asarray(super().score(pod, snap, nodes), dtype=np.float64)
        return base - 9.0 * fn + 10.0 * gpu_allocated(snap, nodes)


def powered(snap: ClusterSnapshot) -> npt.NDArray[np.bool_]:
    """Powered on as DSAN can see it: pods bound or a warm image cache (booting included)."""
    assert snap.pod_count is not None and snap.images is not None
    warm = np.fromiter((len(x) > 0 for x in snap.images), dtype=bool, count=len(snap))
    return np.asarray((snap.pod_count > 0) | warm)


class PackingRescue(Composite):
    """The packing teacher, off nodes largest first, emptied powered nodes first (module
    docstring): for CPU pods other than web, ``Composite``'s score plus
    ``-10 after + 20 cap / 64 cores`` on a powered-off node (its fill term ranked those
    smallest first) and ``rescue`` on a powered node with no pod."""

    name = "packing-rescue"

    def __init__(self, target: TargetWorkload | None, rescue: float = 50.0) -> None:
        super().__init__(target)
        self.rescue = rescue

    def score(
        self, pod: PodSpec, snap: ClusterSnapshot, nodes: npt.NDArray[np.int64]
    ) -> npt.NDArray[np.float64]:
        s = np.asarray(super().score(pod, snap, nodes), dtype=np.float64)
        if pod.num_gpu > 0 or pod.task_type == WEB_TYPE:
            return s
        assert snap.pod_count is not None
        on, count = powered(snap)[nodes], snap.pod_count[nodes]
        cap = snap.cpu_cap[nodes]
        after = np.minimum((snap.cpu_used[nodes] + pod.cpu_milli) / cap, 1.0)
        s = s + np.where(on, 0.0, -10.0 * after + 20.0 * cap / 64000.0)
        return s + self.rescue * ((count == 0) & on)


#: Every scenario-stage teacher by name (``dsan train --scenario ... --scenario-teacher NAME``).
TEACHERS: dict[str, Callable[[TargetWorkload | None], Composite]] = {
    **SCENARIO_TEACHERS,
    "anchored-gpufill": partial(AnchoredGpuFill, spread_drivers=True),
    "packing-rescue": PackingRescue,
}
