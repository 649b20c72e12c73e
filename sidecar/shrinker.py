"""Elastic shrink: lower a workload owner's ``dsan.io/desired-members`` by the elastic members
the preempt verb evicts, so its own controller does not recreate them (docs/sidecar.md,
"Elastic shrink"). Writes run off the verb's reply, since kube-scheduler's extender timeout
covers the reply only.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any, Protocol

from dsan.api.types import ANNOTATION_DESIRED_MEMBERS, ANNOTATION_MIN_MEMBERS, parse_member_count
from sidecar.recorder import QueueWriter, WriteError

log = logging.getLogger("dsan.sidecar.shrinker")
#: How a shrink ended: ok (count lowered), at_minimum (already at dsan.io/min-members or 0),
#: no_count (the owner carries no valid count), conflict (still changing after every attempt),
#: dropped (queue full), or the WriteError reasons of sidecar.recorder.
RESULTS = ("ok", "at_minimum", "no_count", "conflict", "dropped", "forbidden", "not_found",
           "invalid", "unavailable", "error")
ATTEMPTS = 3
_PATH = "/metadata/annotations/" + ANNOTATION_DESIRED_MEMBERS.replace("~", "~0").replace("/", "~1")


class WorkloadWriter(Protocol):
    """Reads and patches a workload owner (a pod); raises :class:`WriteError` on failure."""

    def read_pod(self, namespace: str, name: str) -> Mapping[str, Any]: ...

    def json_patch_pod(self, namespace: str, name: str, ops: list[dict[str, Any]]) -> None:
        """An RFC 6902 JSON patch; a failed ``test`` op is a WriteError ``invalid``."""
        ...


def shrink_ops(owner: Mapping[str, Any], members: int) -> tuple[str, list[dict[str, Any]]]:
    """(result, JSON patch) lowering ``owner``'s desired count by ``members``, never below
    its minimum (or 0); the patch is empty unless the result is "ok"."""
    meta = owner.get("metadata")
    ann = meta.get("annotations") if isinstance(meta, Mapping) else None
    ann = ann if isinstance(ann, Mapping) else {}
    raw = ann.get(ANNOTATION_DESIRED_MEMBERS)
    current = parse_member_count(raw)
    if current is None:
        return "no_count", []
    floor = parse_member_count(ann.get(ANNOTATION_MIN_MEMBERS)) or 0
    new = max(floor, current - members, 0)
    if new >= current:
        return "at_minimum", []
    return "ok", [{"op": "test", "path": _PATH, "value": raw},
                  {"op": "replace", "path": _PATH, "value": str(new)}]


class Shrinker(QueueWriter[tuple[str, str, int]]):
    """Queued shrinks, written by one daemon thread."""

    def __init__(self, writer: WorkloadWriter, maxsize: int = 1000) -> None:
        super().__init__("elastic-shrink", maxsize, RESULTS, log, "elastic shrink not written",
                         quiet=("ok", "at_minimum"))
        self._writer = writer
        #: How shrinks ended, by :data:`RESULTS` (read by the metrics at scrape time).
        self.results = self.counts

    def offer(self, namespace: str, owner: str, members: int) -> None:
        self._offer((namespace, owner, members), f"{namespace}/{owner} not shrunk by {members}")

    def _handle(self, item: tuple[str, str, int]) -> None:
        self.shrink(*item)

    def shrink(self, namespace: str, owner: str, members: int) -> str:
        """Lower ``owner``'s count by ``members`` now; returns the result (counted)."""
        for _ in range(ATTEMPTS):
            try:
                result, ops = shrink_ops(self._writer.read_pod(namespace, owner), members)
                if result != "ok":
                    return self._count(result, f"{namespace}/{owner}: {result}")
                self._writer.json_patch_pod(namespace, owner, ops)
                log.info("shrank %s/%s by %d (%s -> %s)", namespace, owner, members,
                         ops[0]["value"], ops[1]["value"])
                return self._count("ok", "")
            except WriteError as exc:
                if exc.reason != "invalid":  # invalid: the test op failed, read again
                    return self._count(exc.reason, f"{namespace}/{owner}: {exc}")
        return self._count("conflict", f"{namespace}/{owner}: changed under every attempt")
