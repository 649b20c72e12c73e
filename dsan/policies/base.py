"""The one scoring interface of the simulator, the sidecar and DSAN: a :class:`Scorer` ranks the
feasible nodes for one pod and never mutates the snapshot; :class:`BaseScorer` has every
member's default, so callers never probe for one."""

from __future__ import annotations

from typing import Protocol, runtime_checkable

from dsan.core.filtering import best_fit_gpus
from dsan.core.snapshot import F64, I64, ClusterSnapshot, PodSpec
from dsan.policies.control import Controller, StaticController
from dsan.policies.reclaim import DefaultReclaimer, Reclaimer

__all__ = ["MAX_NODE_SCORE", "BaseScorer", "Scorer", "best_fit_gpus"]

MAX_NODE_SCORE = 100


@runtime_checkable
class Scorer(Protocol):
    """Scores candidate nodes for one pod."""

    #: Registry name, e.g. ``"fgd"``.
    name: str
    @property
    def version(self) -> str:
        """What exactly scores (a model's version; a heuristic's name): shown in metrics."""

    #: Whether scores read GPU telemetry: the sidecar scores nodes whose telemetry is stale
    #: by its fallback instead.
    reads_telemetry: bool

    #: Chooses the victims when a pod fits nowhere (:mod:`dsan.policies.reclaim`).
    reclaimer: Reclaimer

    #: Grants elastic work, sets node quotas and the pending order (:mod:`dsan.policies.control`).
    controller: Controller

    def score(self, pod: PodSpec, snap: ClusterSnapshot, nodes: I64) -> F64:
        """One score per entry of ``nodes`` (indices into ``snap``), higher is better."""

    def select_gpus(self, pod: PodSpec, snap: ClusterSnapshot, node: int) -> tuple[int, ...]:
        """GPU slots of ``node`` that ``pod`` gets; ``()`` for CPU-only pods."""

    def on_bind(self, pod: PodSpec, snap: ClusterSnapshot, node: int,
                gpus: tuple[int, ...]) -> None:
        """The simulator bound ``pod`` to ``node`` (for scorers that count per node what the
        snapshot does not hold)."""

    def on_release(self, pod: PodSpec, snap: ClusterSnapshot, node: int,
                   gpus: tuple[int, ...]) -> None:
        """The simulator released ``pod`` from ``node``."""

    def prepare(self, pod: PodSpec, snap: ClusterSnapshot) -> None:
        """Off the request path, bring what the scorer keeps for pods like ``pod`` up to
        ``snap``. Never changes a score."""


class BaseScorer:
    """The defaults of :class:`Scorer`'s members; policies override what they need."""

    name = "base"
    reads_telemetry = False
    reclaimer: Reclaimer = DefaultReclaimer()
    controller: Controller = StaticController()

    @property
    def version(self) -> str:
        return self.name

    def select_gpus(self, pod: PodSpec, snap: ClusterSnapshot, node: int) -> tuple[int, ...]:
        return best_fit_gpus(pod, snap, node)

    def on_bind(self, pod: PodSpec, snap: ClusterSnapshot, node: int,
                gpus: tuple[int, ...]) -> None:
        return None

    def on_release(self, pod: PodSpec, snap: ClusterSnapshot, node: int,
                   gpus: tuple[int, ...]) -> None:
        return None

    def prepare(self, pod: PodSpec, snap: ClusterSnapshot) -> None:
        return None
