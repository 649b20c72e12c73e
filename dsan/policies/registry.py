"""Policy names -> scorers: the one place the simulator, the sidecar and training look up a
policy by name. Each policy's module is imported only when it is asked for."""

from __future__ import annotations

from typing import Any

from dsan.features.target import TargetWorkload
from dsan.policies.base import Scorer

#: Every registered policy; the first eight need nothing beyond numpy.
POLICY_NAMES: tuple[str, ...] = ("k8s-default", "tetris", "random", "dotprod", "gpu-clustering",
                                 "gpu-packing", "bestfit", "fgd", "dsan")
#: The six policies the FGD authors published results for, in their order.
PUBLISHED_POLICIES: tuple[str, ...] = ("random", "dotprod", "gpu-clustering", "gpu-packing",
                                       "bestfit", "fgd")
#: Our name -> the FGD simulator's ``sc_policy`` label in the published CSVs.
PUBLISHED_LABELS: dict[str, str] = dict(zip(PUBLISHED_POLICIES, (
    "01-Random", "02-DotProd", "03-GpuClustering", "04-GpuPacking", "05-BestFit", "06-FGD"),
    strict=True))


def make_scorer(
    name: str, *, seed: int = 0, target_workload: TargetWorkload | None = None, **kwargs: Any
) -> Scorer:
    """A fresh scorer (scorers may keep per-run state, so never share one across runs).
    ``seed`` feeds policies that draw random numbers; ``target_workload`` is FGD's (default:
    openb ``default``); other ``kwargs`` go to DSAN's ``make``."""
    if name == "dsan":
        from dsan.policies.dsan import make

        return make(seed=seed, target_workload=target_workload, **kwargs)
    if kwargs:
        raise ValueError(f"policy {name!r} takes no options, got {sorted(kwargs)}")
    if name == "fgd":
        from dsan.policies.fgd import FGDScorer

        return FGDScorer(target_workload)
    from dsan.policies import baselines

    if name == "random":
        return baselines.RandomScorer(seed)
    simple: dict[str, type[Scorer]] = {
        "k8s-default": baselines.K8sDefaultScorer,
        "tetris": baselines.TetrisScorer,
        "dotprod": baselines.DotProdScorer,
        "gpu-clustering": baselines.GpuClusteringScorer,
        "gpu-packing": baselines.GpuPackingScorer,
        "bestfit": baselines.BestFitScorer,
    }
    if name in simple:
        return simple[name]()
    raise ValueError(f"unknown policy {name!r}; known policies: {', '.join(POLICY_NAMES)}")
