"""Actions beyond node choice, other than reclamation (:mod:`dsan.policies.reclaim`): how many
pods an elastic job is granted, which nodes its pods may use (quota), and the order pending
pods are tried in (priority adjustment within a class). One contract for every policy; the
heuristics keep Kubernetes' static behaviour, :class:`StaticController`.

In the simulator (:mod:`dsan.sim.scenario.scheduling`) ``grant`` is asked when an elastic job
starts (a Spark driver requesting executors, a training gang adding workers), ``allowed``
before every placement, and ``rank`` on every scheduling pass. In a cluster the sidecar's
filter verb and gRPC ``Filter`` apply ``allowed``; ``grant`` and ``rank`` act in the
simulator only (their counterparts would be the workload's own setting, Spark's
``maxExecutors`` or ``dsan.io/desired-members``, and the queue-sort order).
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable

from dsan.core.snapshot import I64, ClusterSnapshot, PodSpec

__all__ = ["Controller", "StaticController"]


@runtime_checkable
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
