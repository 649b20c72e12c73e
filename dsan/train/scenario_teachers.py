"""Scenario-stage teachers added in session 7, and the registry the trainer looks names up in.

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
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial

import numpy as np
import numpy.typing as npt

from dsan.policies.target import TargetWorkload
from dsan.snapshot import ClusterSnapshot, PodSpec
from dsan.train.teachers import SCENARIO_TEACHERS, Anchored, Composite


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


#: Every scenario-stage teacher by name (``dsan train --scenario ... --scenario-teacher NAME``).
TEACHERS: dict[str, Callable[[TargetWorkload | None], Composite]] = {
    **SCENARIO_TEACHERS,
    "anchored-gpufill": partial(AnchoredGpuFill, spread_drivers=True),
}
