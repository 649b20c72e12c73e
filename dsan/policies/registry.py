"""Policy names -> scorers: the one place the simulator, the sidecar and training look up a
policy by name. Each policy's module is imported only when it is asked for."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from dsan.features.target import TargetWorkload
from dsan.policies.base import Scorer


@dataclass(frozen=True, slots=True)
class PolicyNeeds:
    """What whoever makes a policy's scorer must pass it, declared here rather than read off
    the policy's name."""

    #: It scores against a target workload (FGD's fragmentation measure): a simulator run
    #: passes its own pod mix, the sidecar openb's ``default``.
    target_workload: bool = False
    #: It loads a trained model: :func:`make_scorer` takes the model's options (``model_dir``,
    #: ``runtime``, ...), and making it can fail where the model is missing or unreadable.
    model: bool = False


#: Every registered policy, in the order listings show them.
POLICIES: dict[str, PolicyNeeds] = {
    "k8s-default": PolicyNeeds(), "tetris": PolicyNeeds(), "random": PolicyNeeds(),
    "dotprod": PolicyNeeds(), "gpu-clustering": PolicyNeeds(), "gpu-packing": PolicyNeeds(),
    "bestfit": PolicyNeeds(), "fgd": PolicyNeeds(target_workload=True),
    "dsan": PolicyNeeds(target_workload=True, model=True)}
POLICY_NAMES: tuple[str, ...] = tuple(POLICIES)
#: The policies that need no trained model (nothing beyond numpy): the sidecar's fallbacks.
MODEL_FREE: tuple[str, ...] = tuple(n for n, needs in POLICIES.items() if not needs.model)
#: The six policies the FGD authors published results for, in their order.
PUBLISHED_POLICIES: tuple[str, ...] = ("random", "dotprod", "gpu-clustering", "gpu-packing",
                                       "bestfit", "fgd")
#: Our name -> the FGD simulator's ``sc_policy`` label in the published CSVs.
PUBLISHED_LABELS: dict[str, str] = dict(zip(PUBLISHED_POLICIES, (
    "01-Random", "02-DotProd", "03-GpuClustering", "04-GpuPacking", "05-BestFit", "06-FGD"),
    strict=True))


def needs(name: str) -> PolicyNeeds:
    """:data:`POLICIES`' entry for ``name``; ValueError for an unknown policy."""
    if name not in POLICIES:
        raise ValueError(f"unknown policy {name!r}; known policies: {', '.join(POLICY_NAMES)}")
    return POLICIES[name]


def make_scorer(
    name: str, *, seed: int = 0, target_workload: TargetWorkload | None = None, **kwargs: Any
) -> Scorer:
    """A fresh scorer (scorers may keep per-run state, so never share one across runs).
    ``seed`` feeds policies that draw random numbers; ``target_workload`` is FGD's (default:
    openb ``default``); other ``kwargs`` go to DSAN's ``make``."""
    needs(name)
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
    return simple[name]()
