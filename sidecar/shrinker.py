"""A workload owner's ``dsan.io/desired-members``, written through its own annotation
(docs/sidecar.md, "Elastic workloads"): the served policy's grant when the owner first shows
up with a ``dsan.io/max-members`` and no count, and the shrink by the elastic members the
preempt verb evicts, so the owner's controller does not recreate them. Writes run off the
informer's thread and off the verb's reply (kube-scheduler's extender timeout covers the
reply only).
"""

from __future__ import annotations

import logging
from collections import OrderedDict
from collections.abc import Callable, Mapping
from typing import Any, Protocol

from dsan.api.types import ANNOTATION_DESIRED_MEMBERS, ANNOTATION_MIN_MEMBERS, parse_member_count
from sidecar.recorder import QueueWriter, WriteError

log = logging.getLogger("dsan.sidecar.shrinker")
#: How a shrink ended: ok (count lowered), at_minimum (already at dsan.io/min-members or 0),
#: no_count (the owner carries no valid count), conflict (still changing after every attempt),
#: dropped (queue full), or the WriteError reasons of sidecar.recorder.
RESULTS = ("ok", "at_minimum", "no_count", "conflict", "dropped", "forbidden", "not_found",
           "invalid", "unavailable", "error")
#: How a grant ended: ok (count written), already_set (the owner has a count: its own, or an
#: earlier grant), conflict (changed under every attempt), dropped (queue full), or the
#: WriteError reasons of sidecar.recorder.
GRANT_RESULTS = ("ok", "already_set", "conflict", "dropped", "forbidden", "not_found",
                 "invalid", "unavailable", "error")
ATTEMPTS = 3
#: Owner UIDs already offered a grant (a pod's every update reaches the hook).
_GRANTED_MAX = 10_000
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


class _CountWriter(QueueWriter[tuple[str, str, int]]):
    """Writes of a workload owner's desired count, by compare-and-swap."""

    def __init__(self, writer: WorkloadWriter, name: str, maxsize: int,
                 reasons: tuple[str, ...], what: str, quiet: tuple[str, ...]) -> None:
        super().__init__(name, maxsize, reasons, log, what, quiet=quiet)
        self._writer = writer

    def _patch(self, namespace: str, owner: str,
               make_ops: Callable[[Mapping[str, Any]], tuple[str, list[dict[str, Any]]]]
               ) -> tuple[str, list[dict[str, Any]]]:
        """Read ``owner`` and apply ``make_ops``' patch, read again when its ``test`` op
        fails (the owner changed meanwhile), at most :data:`ATTEMPTS` times; the result is
        counted. Returns (result, the patch applied or [])."""
        where = f"{namespace}/{owner}"
        for _ in range(ATTEMPTS):
            try:
                result, ops = make_ops(self._writer.read_pod(namespace, owner))
                if result != "ok":
                    return self._count(result, f"{where}: {result}"), []
                self._writer.json_patch_pod(namespace, owner, ops)
                return self._count("ok", ""), ops
            except WriteError as exc:
                if exc.reason != "invalid":  # invalid: a test op failed, read again
                    return self._count(exc.reason, f"{where}: {exc}"), []
        return self._count("conflict", f"{where}: changed under every attempt"), []


class Shrinker(_CountWriter):
    """Queued shrinks, written by one daemon thread."""

    def __init__(self, writer: WorkloadWriter, maxsize: int = 1000) -> None:
        super().__init__(writer, "elastic-shrink", maxsize, RESULTS,
                         "elastic shrink not written", ("ok", "at_minimum"))

    def offer(self, namespace: str, owner: str, members: int) -> None:
        self._offer((namespace, owner, members), f"{namespace}/{owner} not shrunk by {members}")

    def _handle(self, item: tuple[str, str, int]) -> None:
        self.shrink(*item)

    def shrink(self, namespace: str, owner: str, members: int) -> str:
        """Lower ``owner``'s count by ``members`` now; returns the result (counted)."""
        result, ops = self._patch(namespace, owner, lambda pod: shrink_ops(pod, members))
        if result == "ok":
            log.info("shrank %s/%s by %d (%s -> %s)", namespace, owner, members,
                     ops[0]["value"], ops[1]["value"])
        return result


def grant_ops(owner: Mapping[str, Any], count: int) -> tuple[str, list[dict[str, Any]]]:
    """(result, JSON patch) adding ``owner``'s desired count ``count`` where it has none; the
    patch tests the resourceVersion it was read at, so a count written meanwhile stands."""
    meta = owner.get("metadata")
    meta = meta if isinstance(meta, Mapping) else {}
    ann = meta.get("annotations")
    if not isinstance(ann, Mapping) or ANNOTATION_DESIRED_MEMBERS in ann:
        return "already_set", []
    return "ok", [{"op": "test", "path": "/metadata/resourceVersion",
                   "value": meta.get("resourceVersion")},
                  {"op": "add", "path": _PATH, "value": str(count)}]


class Granter(_CountWriter):
    """Queued grants, written by one daemon thread, once per owner."""

    def __init__(self, writer: WorkloadWriter, maxsize: int = 1000) -> None:
        super().__init__(writer, "elastic-grant", maxsize, GRANT_RESULTS,
                         "elastic grant not written", ("ok", "already_set"))
        self._offered: OrderedDict[str, None] = OrderedDict()

    def offer(self, namespace: str, owner: str, uid: str, count: int) -> None:
        """Grant ``count`` members to ``owner`` unless it was offered before (by UID)."""
        if uid in self._offered:
            return
        self._offered[uid] = None
        if len(self._offered) > _GRANTED_MAX:
            self._offered.popitem(last=False)
        self._offer((namespace, owner, count), f"{namespace}/{owner} not granted {count}")

    def _handle(self, item: tuple[str, str, int]) -> None:
        self.grant(*item)

    def grant(self, namespace: str, owner: str, count: int) -> str:
        """Write ``owner``'s desired count ``count`` now; returns the result (counted)."""
        result, _ = self._patch(namespace, owner, lambda pod: grant_ops(pod, count))
        if result == "ok":
            log.info("granted %s/%s %d members", namespace, owner, count)
        return result
