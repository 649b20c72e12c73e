"""The one scoring interface of the simulator, the sidecar and DSAN: a :class:`Scorer` ranks the
feasible nodes for one pod and never mutates the snapshot; it has every member's default, so
callers never probe for one.

A scorer's actions beyond node choice, other than reclamation (:mod:`dsan.policies.reclaim`),
are its :class:`Controller`'s: how many pods an elastic job is granted, which nodes its pods
may use (quota), and the order pending pods are tried in (priority adjustment within a class).
The heuristics keep Kubernetes' static behaviour, :class:`StaticController`. In the simulator
(:mod:`dsan.sim.scenario.scheduling`) ``grant`` is asked when an elastic job starts (a Spark
driver requesting executors, a training gang adding workers), ``allowed`` before every
placement, and ``rank`` on every scheduling pass. In a cluster the sidecar's filter verb and
gRPC ``Filter`` apply ``allowed``; ``grant`` and ``rank`` act in the simulator only (their
counterparts would be the workload's own setting, Spark's ``maxExecutors`` or
``dsan.io/desired-members``, and the queue-sort order).
"""

from __future__ import annotations

from typing import Protocol

from dsan.core.filtering import best_fit_gpus
from dsan.core.snapshot import F64, I64, ClusterSnapshot, PodSpec
from dsan.policies.reclaim import DefaultReclaimer, Reclaimer

MAX_NODE_SCORE = 100


class Controller(Protocol):
    #: Shown in metrics and docs, e.g. ``"kubernetes"``.
    name: str

    def grant(self, task_type: str, minimum: int, maximum: int) -> int:
        """Pods (``minimum`` .. ``maximum``) an elastic job of ``task_type`` may run."""

    def allowed(self, pod: PodSpec, snap: ClusterSnapshot, nodes: I64) -> I64:
        """The entries of ``nodes`` (feasible for ``pod``) the pod may use; empty: it waits."""

    def rank(self, pod: PodSpec, waited_s: float) -> float:
        """The order pending pods are tried in, highest first: the priority, possibly raised
        within its class (below ``priority + 1``) for a pod that waited ``waited_s``.
        Preemption always uses the pod's own priority."""


class StaticController:
    """Kubernetes without quotas: every elastic job gets its maximum, every feasible node is
    allowed, pods are tried by static priority."""

    name = "kubernetes"

    def grant(self, task_type: str, minimum: int, maximum: int) -> int:
        return maximum

    def allowed(self, pod: PodSpec, snap: ClusterSnapshot, nodes: I64) -> I64:
        return nodes

    def rank(self, pod: PodSpec, waited_s: float) -> float:
        return float(pod.priority)


class Scorer:
    """Scores candidate nodes for one pod. Every policy subclasses it and overrides
    :meth:`score` and what else it needs; the rest are Kubernetes' defaults."""

    #: Registry name, e.g. ``"fgd"``.
    name = "base"
    #: Whether scores read GPU telemetry: the sidecar scores nodes whose telemetry is stale
    #: by its fallback instead.
    reads_telemetry = False
    #: Chooses the victims when a pod fits nowhere (:mod:`dsan.policies.reclaim`).
    reclaimer: Reclaimer = DefaultReclaimer()
    #: Grants elastic work, sets node quotas and the pending order (:class:`Controller`).
    controller: Controller = StaticController()

    @property
    def version(self) -> str:
        """What exactly scores (a model's version; a heuristic's name): shown in metrics."""
        return self.name

    def score(self, pod: PodSpec, snap: ClusterSnapshot, nodes: I64) -> F64:
        """One score per entry of ``nodes`` (indices into ``snap``), higher is better."""
        raise NotImplementedError

    def select_gpus(self, pod: PodSpec, snap: ClusterSnapshot, node: int) -> tuple[int, ...]:
        """GPU slots of ``node`` that ``pod`` gets; ``()`` for CPU-only pods."""
        return best_fit_gpus(pod, snap, node)

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
