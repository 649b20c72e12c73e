"""The teachers imitation learns from.

openb (:data:`OPENB_TEACHERS`, :func:`make_teacher`): registry heuristics plus ``fgd-pack``.
Seed scenario (:class:`Composite`): hand-made per-task-type rules that read only what DSAN's
features hold (docs/model.md).
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from dsan.api.types import TASK_TYPES
from dsan.core.snapshot import ClusterSnapshot, PodSpec
from dsan.features.target import TargetWorkload
from dsan.policies.base import Scorer
from dsan.policies.registry import make_scorer

F64 = npt.NDArray[np.float64]
WEB_TYPE = TASK_TYPES.index("web")
OPENB_TEACHERS = ("fgd-pack", "fgd", "bestfit", "dotprod", "gpu-packing", "tetris")


class FGDPack(Scorer):
    """FGD with ties broken by BestFit (the fullest node) instead of by node name: it
    consolidates like the simulator's name order, for a reason the features show."""

    name = "fgd-pack"

    def __init__(self, target: TargetWorkload | None) -> None:
        self.fgd = make_scorer("fgd", target_workload=target)
        self.bestfit = make_scorer("bestfit")

    def score(self, pod: PodSpec, snap: ClusterSnapshot, nodes: npt.NDArray[np.int64]) -> F64:
        f = np.asarray(self.fgd.score(pod, snap, nodes), dtype=np.float64)
        b = np.asarray(self.bestfit.score(pod, snap, nodes), dtype=np.float64)
        span = float(b.max() - b.min()) if b.size else 0.0
        # FGD scores are integers: a tie-break term in [0, 0.5] never overrides them.
        return f + (0.5 * (b - b.min()) / span if span > 0 else 0.0)

    def select_gpus(self, pod: PodSpec, snap: ClusterSnapshot, node: int) -> tuple[int, ...]:
        return self.fgd.select_gpus(pod, snap, node)


def make_teacher(name: str, target: TargetWorkload | None, seed: int = 0) -> Scorer:
    if name == "fgd-pack":
        return FGDPack(target)
    if name not in OPENB_TEACHERS:
        raise ValueError(f"unknown teacher {name!r}; known: {', '.join(OPENB_TEACHERS)}")
    return make_scorer(name, seed=seed, target_workload=target)


def image_cache(
    snap: ClusterSnapshot, pod: PodSpec, nodes: npt.NDArray[np.int64]
) -> tuple[F64, F64]:
    """Per node: the pod's image is cached; the image cache is warm (the node is powered)."""
    imgs, n = snap.images, len(nodes)
    if imgs is None:
        return np.zeros(n), np.zeros(n)
    warm = np.fromiter((len(imgs[i]) > 0 for i in nodes), dtype=np.float64, count=n)
    if pod.image < 0:
        return np.zeros(n), warm
    return np.fromiter((pod.image in imgs[i] for i in nodes), dtype=np.float64, count=n), warm


class Composite(Scorer):
    """The packing teacher DSAN imitates on the seed scenario (``scenario``).

    Packing raises utilisation and lowers cost, but a node whose CPU demand passes the
    contention threshold slows its web replicas, and a pod on a scaled-down node waits its
    boot. So, lexicographically: CPU-only pods keep off GPU nodes; every pod prefers a powered
    node (pods bound or a warm image cache) whose requested CPU after the pod stays under
    ``cool``; then GPU pods follow FGD and CPU pods pack, with a bonus for a cached image.
    """

    name = "scenario"
    #: Imitation targets are the nodes within this many points of the best.
    tolerance = 2.0

    def __init__(
        self, target: TargetWorkload | None, cool: float = 0.8, web_cpu_milli: float = 16000.0
    ) -> None:
        self.fgd = make_scorer("fgd", target_workload=target)
        self.cool = cool
        self.web_cpu_milli = web_cpu_milli

    def score(self, pod: PodSpec, snap: ClusterSnapshot, nodes: npt.NDArray[np.int64]) -> F64:
        cap = np.maximum(snap.cpu_cap[nodes], 1.0)
        after = (snap.cpu_used[nodes] + pod.cpu_milli) / cap
        cached, warm = image_cache(snap, pod, nodes)
        count = np.zeros(len(nodes)) if snap.pod_count is None else snap.pod_count[nodes]
        on = ((count > 0) | (warm > 0)).astype(np.float64)
        cool = (after <= self.cool).astype(np.float64)
        if pod.num_gpu > 0:
            f = np.asarray(self.fgd.score(pod, snap, nodes), dtype=np.float64)
            span = max(float(f.max() - f.min()), 1e-9)
            return 100.0 * on + 200.0 * cool + 10.0 * (f - f.min()) / span + cached
        gpu_node = (snap.gpu_count[nodes] > 0).astype(np.float64)
        small = snap.cpu_cap[nodes] <= self.web_cpu_milli
        if pod.task_type == WEB_TYPE:
            home = small.astype(np.float64)
        else:  # batch may run hot on the larger nodes, which never host web replicas
            home = np.ones(len(nodes))
            cool = np.where(small, cool, 1.0)
        return (
            1000.0 * (1 - gpu_node)
            + 500.0 * home
            + 100.0 * on
            + 200.0 * cool
            + 10.0 * np.minimum(after, 1.0)
            + cached
        )

    def select_gpus(self, pod: PodSpec, snap: ClusterSnapshot, node: int) -> tuple[int, ...]:
        return self.fgd.select_gpus(pod, snap, node)
