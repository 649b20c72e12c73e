"""Bound pods as preemption victims: what the preempt verb needs to know of a pod kube-scheduler
names only by UID (ExtenderPreemptionArgs.NodeNameToMetaVictims).

The cache records each bound pod here on every informer event (a status update brings its
``startTime``); annotations are kept raw and parsed only when a preemption asks, so the
informer's path stays a few dict reads.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from dsan.api.types import (
    ANNOTATION_ELASTIC,
    ANNOTATION_LOST_SECONDS,
    ANNOTATION_TASK_TYPE,
    ANNOTATION_WORKLOAD_OWNER,
    parse_elastic,
    parse_lost_seconds,
    parse_task_type,
    parse_workload_owner,
)
from dsan.core.snapshot import PodSpec
from dsan.policies.reclaim import Victim

#: The annotations a victim is built from.
_KEYS = (ANNOTATION_TASK_TYPE, ANNOTATION_ELASTIC, ANNOTATION_LOST_SECONDS,
         ANNOTATION_WORKLOAD_OWNER)


@dataclass(frozen=True, slots=True)
class PodRecord:
    """One bound pod as the informer last showed it."""

    namespace: str
    node: str
    #: What the cache charged it with.
    spec: PodSpec
    #: ``status.startTime`` as the API wrote it (RFC 3339), or "" before the pod started.
    start: str
    #: The values of :data:`_KEYS` that are strings, raw.
    annotations: tuple[tuple[str, str], ...]

    def victim(self, now: float) -> Victim:
        """The pod as :mod:`dsan.policies.reclaim` sees it, at wall time ``now``: a pod
        not started yet starts now, and without ``dsan.io/lost-seconds`` everything it did
        since its start is lost."""
        ann = dict(self.annotations)
        start = parse_start(self.start)
        start = now if start is None else min(start, now)
        lost = parse_lost_seconds(ann.get(ANNOTATION_LOST_SECONDS))
        spec = self.spec  # a shared GPU counts as its fraction
        return Victim(priority=spec.priority,
                      task_type=parse_task_type(ann.get(ANNOTATION_TASK_TYPE)),
                      gpus=spec.num_gpu * spec.gpu_milli / 1000.0, cores=spec.cpu_milli / 1000.0,
                      lost_s=now - start if lost is None else lost,
                      elastic=parse_elastic(ann.get(ANNOTATION_ELASTIC)), start=start)

    @property
    def owner(self) -> str | None:
        """The workload owner an elastic member names (same namespace), if any."""
        ann = dict(self.annotations)
        if not parse_elastic(ann.get(ANNOTATION_ELASTIC)):
            return None
        return parse_workload_owner(ann.get(ANNOTATION_WORKLOAD_OWNER))


def parse_start(value: str) -> float | None:
    """RFC 3339 (``2026-12-06T10:00:00Z``) -> epoch seconds; None when empty or malformed."""
    if not value or len(value) > 40:
        return None
    try:
        dt = datetime.fromisoformat(value)
    except ValueError:
        return None
    return dt.timestamp() if dt.tzinfo is not None else None


def record(pod: Mapping[str, Any], node: str, spec: PodSpec) -> PodRecord:
    """A bound pod's record; ``spec`` is what the cache charged it with (already parsed)."""
    meta = pod.get("metadata") or {}
    ann = meta.get("annotations") if isinstance(meta, Mapping) else None
    kept = tuple((k, v) for k in _KEYS
                 if isinstance(ann, Mapping) and isinstance(v := ann.get(k), str))
    status = pod.get("status")
    start = status.get("startTime") if isinstance(status, Mapping) else None
    return PodRecord(namespace=str(meta.get("namespace", "default")), node=node, spec=spec,
                     start=start if isinstance(start, str) else "", annotations=kept)
