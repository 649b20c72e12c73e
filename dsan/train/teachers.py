"""Teachers for the imitation warm start: registry heuristics plus ``fgd-pack``.

``fgd-pack`` is FGD (engineer A's scorer, integer scores as in the FGD simulator) with ties
broken by BestFit instead of by node name: among the nodes FGD cannot tell apart it prefers
the fullest one, which consolidates like the simulator's fixed name order does, but with a
reason the network can see in its features (``is_best_fgd``, ``rel_bestfit``). On openb
``default`` it allocates more than FGD; on some files less (docs/model.md).
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from dsan.api.types import TASK_TYPES
from dsan.policies.base import Scorer
from dsan.policies.registry import make_scorer
from dsan.policies.target import TargetWorkload
from dsan.snapshot import ClusterSnapshot, PodSpec

WEB_TYPE = TASK_TYPES.index("web")
TEACHERS = ("fgd-pack", "fgd", "bestfit", "dotprod", "gpu-packing", "tetris")


class FGDPack:
    name = "fgd-pack"

    def __init__(self, target: TargetWorkload | None) -> None:
        self.fgd = make_scorer("fgd", target_workload=target)
        self.bestfit = make_scorer("bestfit")

    def score(
        self, pod: PodSpec, snap: ClusterSnapshot, nodes: npt.NDArray[np.int64]
    ) -> npt.NDArray[np.float64]:
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
    if name not in TEACHERS:
        raise ValueError(f"unknown teacher {name!r}; known: {', '.join(TEACHERS)}")
    return make_scorer(name, seed=seed, target_workload=target)


class Composite:
    """Per-task-type teacher for the seed scenario (``scenario``): what DSAN should learn there.

    The scenario's three metrics pull apart (docs/results/table1.md): packing raises
    utilisation and lowers cost, but a node whose CPU demand passes the contention threshold
    (0.8) slows its web replicas into SLO misses, and a pod bound to a scaled-down node pays a
    90 s boot that sets the P99. So, in lexicographic order of a summed score:

    1. CPU-only pods keep off GPU nodes (their cores belong to the training workers);
    2. every pod prefers a node that is powered on (``pod_count > 0`` or a warm image cache:
       a scaled-down node comes back with neither) and one whose requested CPU after the pod
       stays under ``cool`` x capacity (executors use their whole request, so requests bound
       the demand);
    3. GPU pods then follow FGD; CPU pods pack (the fullest cool node first) with a small
       bonus for a cached image.

    Everything it reads is in DSAN's features (pod count, image cache, requests, FGD score).
    """

    name = "scenario"
    #: Imitation targets are the nodes within this many points of the best: the same class
    #: (GPU/home/on/cool) and a fill within 0.2 of the fullest.
    tolerance = 2.0

    def __init__(
        self, target: TargetWorkload | None, cool: float = 0.8, web_cpu_milli: float = 16000.0
    ) -> None:
        self.fgd = make_scorer("fgd", target_workload=target)
        self.cool = cool
        self.web_cpu_milli = web_cpu_milli

    def score(
        self, pod: PodSpec, snap: ClusterSnapshot, nodes: npt.NDArray[np.int64]
    ) -> npt.NDArray[np.float64]:
        cap = np.maximum(snap.cpu_cap[nodes], 1.0)
        after = (snap.cpu_used[nodes] + pod.cpu_milli) / cap
        imgs = snap.images
        cached = (
            np.zeros(len(nodes))
            if imgs is None or pod.image < 0
            else np.fromiter(
                (pod.image in imgs[i] for i in nodes), dtype=np.float64, count=len(nodes)
            )
        )
        warm = (
            np.zeros(len(nodes))
            if imgs is None
            else np.fromiter((len(imgs[i]) > 0 for i in nodes), dtype=np.float64, count=len(nodes))
        )
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
