"""Elastic shrink: when the preempt verb evicts elastic members of a workload, lower its owner's
``dsan.io/desired-members`` by as many, so the workload's own controller does not recreate them.

The owner is a pod in the members' namespace (a Spark-driver-like pod) whose controller reads
the annotation; the sidecar changes nothing else of it. Writes run on one background thread,
off the verb's reply (kube-scheduler's extender timeout covers the reply only), each as a JSON
patch whose ``test`` op makes it a compare-and-swap against concurrent writers: on a conflict
the owner is read again, up to :data:`ATTEMPTS` times. Results are counted by
:data:`RESULTS`; a failure is logged, and the eviction goes ahead regardless.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from dsan.api.types import ANNOTATION_DESIRED_MEMBERS, ANNOTATION_MIN_MEMBERS, parse_member_count
from sidecar.recorder import WriteError

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


class Shrinker:
    """Queued shrinks, written by one daemon thread."""

    def __init__(self, writer: WorkloadWriter, maxsize: int = 1000) -> None:
        self._writer = writer
        self._queue: queue.Queue[tuple[str, str, int] | None] = queue.Queue(maxsize)
        #: How shrinks ended, by :data:`RESULTS` (read by the metrics at scrape time).
        self.results = dict.fromkeys(RESULTS, 0)
        self._logged: set[str] = set()
        self._thread: threading.Thread | None = None

    def offer(self, namespace: str, owner: str, members: int) -> None:
        try:
            self._queue.put_nowait((namespace, owner, members))
        except queue.Full:
            self._count("dropped", f"queue full: {namespace}/{owner} not shrunk by {members}")

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="elastic-shrink", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        if self._thread is not None:
            self._queue.put(None)
            self._thread.join(timeout=5)

    def wait_idle(self, timeout: float = 5.0) -> bool:
        """For tests: True once everything offered so far was written (or failed)."""
        deadline = time.monotonic() + timeout
        while self._queue.unfinished_tasks:
            if time.monotonic() >= deadline:
                return False
            time.sleep(0.01)
        return True

    def _run(self) -> None:
        while True:
            item = self._queue.get()
            try:
                if item is None:
                    return
                self.shrink(*item)
            except Exception:  # a bug must not end the thread
                log.exception("elastic shrink failed")
            finally:
                self._queue.task_done()

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

    def _count(self, result: str, message: str) -> str:
        self.results[result] += 1
        if result not in ("ok", "at_minimum") and result not in self._logged:
            self._logged.add(result)  # once per reason: a flood of failures logs one line each
            log.warning("elastic shrink not written (%s): %s", result, message)
        return result


@dataclass
class FakeWorkloads:
    """Pods by (namespace, name) in memory, with JSON patch ``test``/``replace`` semantics on
    annotations; ``fail`` is raised by every write."""

    pods: dict[tuple[str, str], dict[str, Any]] = field(default_factory=dict)
    fail: WriteError | None = None
    patches: list[tuple[str, str, list[dict[str, Any]]]] = field(default_factory=list)

    def read_pod(self, namespace: str, name: str) -> Mapping[str, Any]:
        pod = self.pods.get((namespace, name))
        if pod is None:
            raise WriteError("not_found", f"pod {namespace}/{name} not found")
        return {"metadata": {"annotations": dict(pod["metadata"].get("annotations") or {})}}

    def json_patch_pod(self, namespace: str, name: str, ops: list[dict[str, Any]]) -> None:
        if self.fail is not None:
            raise self.fail
        pod = self.pods.get((namespace, name))
        if pod is None:
            raise WriteError("not_found", f"pod {namespace}/{name} not found")
        ann = pod["metadata"].setdefault("annotations", {})
        key = ANNOTATION_DESIRED_MEMBERS
        for op in ops:
            if op["op"] == "test" and ann.get(key) != op["value"]:
                raise WriteError("invalid", "test failed")
        for op in ops:
            if op["op"] == "replace":
                ann[key] = op["value"]
        self.patches.append((namespace, name, ops))
