"""Reclamation: which pods to evict so that a pending pod can run, chosen among the candidates
Kubernetes' preemption proposes. One contract for the simulator and the sidecar's preempt verb.

Kubernetes (DefaultPreemption, or the simulator's :mod:`dsan.sim.scenario.preemption`) finds,
per candidate node, a small set of lower-priority victims whose eviction lets the pod fit. A
:class:`Reclaimer` picks one candidate, or none (then nothing is evicted and the pod waits).
Every policy owns one (``Scorer.reclaimer``); the heuristics keep Kubernetes' own choice,
:class:`DefaultReclaimer`.

What every reclaimer must hold, whoever proposed the candidates: a victim never has the
preemptor's priority or a higher one (:func:`admissible`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from dsan.api.types import LATENCY_SENSITIVE_TYPES, TASK_TYPES

__all__ = ["RECLAIMERS", "Candidate", "DefaultReclaimer", "ProtectingReclaimer", "Reclaimer",
           "Victim", "admissible", "latency_sensitive"]


@dataclass(frozen=True, slots=True)
class Victim:
    """One pod a candidate would evict, as both the simulator and the sidecar can see it."""

    priority: int
    #: One of :data:`dsan.api.types.TASK_TYPES`.
    task_type: str
    #: GPUs it holds (a shared GPU counts as its fraction) and cores it requests.
    gpus: float
    cores: float
    #: Seconds of its work an eviction throws away: progress since its last checkpoint (all
    #: of it for a notebook), the in-flight tasks of a Spark executor, the restart of an
    #: elastic training job. Multiplied by ``gpus``/``cores`` it is the cost to reclaimed work.
    lost_s: float
    #: Its workload shrinks and goes on without it (an extra executor or worker above the
    #: job's minimum) instead of stopping.
    elastic: bool
    #: When it started, in seconds on any clock common to one call's victims.
    start: float

    def __post_init__(self) -> None:
        if self.task_type not in TASK_TYPES:
            raise ValueError(f"task_type {self.task_type!r} is not one of {TASK_TYPES}")


@dataclass(frozen=True, slots=True)
class Candidate:
    """One way to make room: the victims on one node (``node`` is the caller's key for it)."""

    node: int
    victims: tuple[Victim, ...]


def latency_sensitive(v: Victim) -> bool:
    return v.task_type in LATENCY_SENSITIVE_TYPES


def admissible(priority: int, candidate: Candidate) -> bool:
    """Whether evicting ``candidate``'s victims for a pod of ``priority`` is allowed at all:
    only strictly lower priorities, and at least one victim."""
    return bool(candidate.victims) and all(v.priority < priority for v in candidate.victims)


@runtime_checkable
class Reclaimer(Protocol):
    """Picks the candidate whose victims are evicted for a pending pod."""

    #: Shown in metrics and docs, e.g. ``"kubernetes"``.
    name: str

    def choose(self, priority: int, candidates: Sequence[Candidate]) -> int | None:
        """Index into ``candidates`` of the one to evict, or None to evict nothing. Never a
        candidate that is not :func:`admissible` for ``priority``."""


class DefaultReclaimer:
    """kube-scheduler's ``pickOneNodeForPreemption`` without PodDisruptionBudgets: the lowest
    highest victim priority, then the smallest sum of priorities, then the fewest victims, then
    the latest start among the highest-priority victims, then the first candidate."""

    name = "kubernetes"

    def choose(self, priority: int, candidates: Sequence[Candidate]) -> int | None:
        best: tuple[int, int, int, float, int] | None = None
        for i, c in enumerate(candidates):
            if not admissible(priority, c):
                continue
            top = max(v.priority for v in c.victims)
            earliest_top = min(v.start for v in c.victims if v.priority == top)
            key = (top, sum(v.priority for v in c.victims), len(c.victims), -earliest_top, i)
            if best is None or key < best:
                best = key
        return None if best is None else best[-1]


class ProtectingReclaimer:
    """:class:`DefaultReclaimer`'s order among the candidates that evict no latency-sensitive
    pod (:func:`latency_sensitive`); None when every candidate would evict one."""

    name = "protect-latency"

    def choose(self, priority: int, candidates: Sequence[Candidate]) -> int | None:
        keep = [i for i, c in enumerate(candidates)
                if not any(latency_sensitive(v) for v in c.victims)]
        best = DefaultReclaimer().choose(priority, [candidates[i] for i in keep])
        return None if best is None else keep[best]


#: Reclaimers by name, for a sidecar told to use one other than its policy's own.
RECLAIMERS: dict[str, Callable[[], Reclaimer]] = {
    DefaultReclaimer.name: DefaultReclaimer, ProtectingReclaimer.name: ProtectingReclaimer}
