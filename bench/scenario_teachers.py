"""Boot-aware variants of the scenario stage's packing teacher (:class:`Composite`), run as
policies by ``scenario_boot_frontier.py``, ``scenario_pool_rows.py`` and
``scenario_teacher_eval.py`` (docs/results/table1.md, *What sets the P99*): every one that
gets the P99 under the boot budget keeps a peak-sized pool powered.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from dsan.core.snapshot import ClusterSnapshot, PodSpec
from dsan.features.target import TargetWorkload
from dsan.train.teachers import WEB_TYPE, Composite, image_cache

F64 = npt.NDArray[np.float64]
#: The seed scenario's batch driver priority (dsan/scenarios/seed-table1.yaml).
DRIVER_PRIORITY = 400


class Anchored(Composite):
    """Boot-aware teacher (``anchored``): trades packing for fewer pods waiting on boots.

    Web replicas spread one per node over the nodes of at least ``web_min_cpu``, largest
    first, keeping an always-on pool powered; other CPU pods prefer a powered node, a booting
    one (pods bound, no CPU use yet in the last sample) ``booting`` as much, then fill to
    ``tau``; nodes that host web stay under ``cool``. GPU pods as :class:`Composite`.
    """

    name = "anchored"

    def __init__(
        self,
        target: TargetWorkload | None,
        cool: float = 0.8,
        web_min_cpu: float = 32000.0,
        tau: float = 0.0,
        w_on: float = 300.0,
        booting: float = 0.5,
        spread_drivers: bool = False,
    ) -> None:
        super().__init__(target, cool=cool)
        if not 0.0 <= booting <= 1.0 or w_on >= 1000.0:
            raise ValueError("Anchored: booting in [0, 1]; w_on < 1000 keeps CPU pods off GPUs")
        self.web_min_cpu, self.tau, self.w_on, self.booting = web_min_cpu, tau, w_on, booting
        #: Batch drivers to the powered node with the fewest pods, larger first.
        self.spread_drivers = spread_drivers

    def score(self, pod: PodSpec, snap: ClusterSnapshot, nodes: npt.NDArray[np.int64]) -> F64:
        if pod.num_gpu > 0:
            return super().score(pod, snap, nodes)
        cap = np.maximum(snap.cpu_cap[nodes], 1.0)
        after = (snap.cpu_used[nodes] + pod.cpu_milli) / cap
        cool = (after <= self.cool).astype(np.float64)
        gpu_node = (snap.gpu_count[nodes] > 0).astype(np.float64)
        home = (snap.cpu_cap[nodes] >= self.web_min_cpu).astype(np.float64)
        count = np.zeros(len(nodes)) if snap.pod_count is None else snap.pod_count[nodes]
        if pod.task_type == WEB_TYPE:
            return (
                1000.0 * (1 - gpu_node)
                + 500.0 * home
                + 200.0 * cool
                - 10.0 * np.minimum(count, 10)
                + 2.0 * cap / 64000.0
            )
        cached, warm = image_cache(snap, pod, nodes)
        on = ((count > 0) | (warm > 0)).astype(np.float64)
        if snap.telemetry is not None:
            last = snap.telemetry[nodes, -1]
            booting = (count > 0) & (last[:, 0] <= 0.0) & (last[:, 1] > 0.0)
            on = np.where(booting, self.booting, on)
        cool = np.where(home > 0, cool, 1.0)  # only nodes that host web must stay cool
        t = self.tau
        fill = np.where(after <= t, after, 2 * t - after)
        out = 1000.0 * (1 - gpu_node) + self.w_on * on + 200.0 * cool + 10.0 * fill + cached
        if self.spread_drivers and pod.priority == DRIVER_PRIORITY:
            out += 100.0 * (on > 0) - 15.0 * np.minimum(count, 10) + 2.0 * cap / 64000.0
        return out


def gpu_allocated(snap: ClusterSnapshot, nodes: npt.NDArray[np.int64]) -> F64:
    """Allocated fraction of each node's GPU shares (0 on a CPU-only node)."""
    cap = snap.gpu_count[nodes].astype(np.float64) * 1000.0
    free = snap.gpu_free[nodes].sum(axis=1).astype(np.float64)
    return np.where(cap > 0, (cap - free) / np.maximum(cap, 1.0), 0.0)


class AnchoredGpuFill(Anchored):
    """``anchored-drivers`` whose GPU pods fill the fullest powered GPU node first, FGD only
    ordering one allocation level, so the other GPU nodes empty and power off."""

    name = "anchored-gpufill"

    def score(self, pod: PodSpec, snap: ClusterSnapshot, nodes: npt.NDArray[np.int64]) -> F64:
        if pod.num_gpu == 0:
            return super().score(pod, snap, nodes)
        # Composite's GPU branch with FGD's weight turned from 10 down to 1, ranked by
        # allocation first (10 x the allocated fraction).
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
    """The packing teacher plus, for CPU pods other than web: a powered-off node is taken
    largest first (``-10 after + 20 cap / 64 cores``), and a powered node with no pod (in
    its scale-down grace period) gets ``rescue`` before it powers off."""

    name = "packing-rescue"

    def __init__(self, target: TargetWorkload | None, rescue: float = 50.0) -> None:
        super().__init__(target)
        self.rescue = rescue

    def score(self, pod: PodSpec, snap: ClusterSnapshot, nodes: npt.NDArray[np.int64]) -> F64:
        s = np.asarray(super().score(pod, snap, nodes), dtype=np.float64)
        if pod.num_gpu > 0 or pod.task_type == WEB_TYPE:
            return s
        assert snap.pod_count is not None
        on, count = powered(snap)[nodes], snap.pod_count[nodes]
        cap = snap.cpu_cap[nodes]
        after = np.minimum((snap.cpu_used[nodes] + pod.cpu_milli) / cap, 1.0)
        s = s + np.where(on, 0.0, -10.0 * after + 20.0 * cap / 64000.0)
        return s + self.rescue * ((count == 0) & on)
