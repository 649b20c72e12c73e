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

from dsan.policies.base import Scorer
from dsan.policies.registry import make_scorer
from dsan.policies.target import TargetWorkload
from dsan.snapshot import ClusterSnapshot, PodSpec

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
