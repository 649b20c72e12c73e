"""An Event and the ``dsan.io/scored-by`` annotation on every pod the dsan-scheduler bound.

:meth:`Recorder.offer` queues a binding (a full queue drops and counts it); one background
thread writes under a token bucket, off the scoring path. A failed write is counted by reason
(:data:`FAILURES`) and logged once per reason.
"""

from __future__ import annotations

import json
import logging
import queue
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Generic, Protocol, TypeVar

from dsan.api.types import (
    ANNOTATION_SCORED_BY,
    EVENT_ACTION,
    EVENT_CONTROLLER,
    EVENT_REASON_NOT_SCORED,
    EVENT_REASON_SCORED,
    ScoredBy,
)
from sidecar.decisions import Decision, Decisions

log = logging.getLogger("dsan.sidecar.recorder")
T = TypeVar("T")
#: Why a binding's Event or annotation was not written (the metric's label values); dropped:
#: the queue was full.
FAILURES = ("forbidden", "not_found", "invalid", "unavailable", "error", "dropped")
#: What gets written per binding.
WRITES = ("event", "annotation")
#: events.k8s.io/v1 limits: the note is at most 1 KiB; reportingInstance 128 characters.
NOTE_MAX_BYTES = 1024
INSTANCE_MAX = 128


class WriteError(Exception):
    """A write the API refused or could not take; ``reason`` is one of :data:`FAILURES`."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        if reason not in FAILURES:
            raise ValueError(f"unknown write failure reason {reason!r}")
        self.reason = reason


def reason_of_status(status: int) -> str:
    """The :data:`FAILURES` reason of an HTTP status the API answered a write with."""
    if status in (401, 403):
        return "forbidden"
    if status in (404, 410):
        return "not_found"
    if status in (400, 409, 422):
        return "invalid"
    if status == 429 or status >= 500:
        return "unavailable"
    return "error"


class ClusterWriter(Protocol):
    """The two writes the recorder makes; each raises :class:`WriteError` on failure."""

    def create_event(self, namespace: str, event: Mapping[str, Any]) -> None: ...

    def annotate_pod(self, namespace: str, name: str,
                     annotations: Mapping[str, str]) -> None: ...


class KubeClusterWriter:
    """The real writer, raw JSON through a kubernetes ``ApiClient``: the typed Event model
    drops ``eventTime``'s microseconds when they are 0, which the apiserver refuses."""

    def __init__(self, api_client: Any) -> None:
        self._api = api_client

    def _send(self, method: str, path: str, body: Any, content_type: str) -> bytes:
        api = self._api
        try:
            m, url, headers, data, post = api.param_serialize(
                method, path, header_params={"Content-Type": content_type,
                                             "Accept": "application/json"},
                body=body, auth_settings=["BearerToken"])
            resp = api.call_api(m, url, headers, data, post, _request_timeout=10.0)
            out = resp.read() or b""
        except Exception as exc:  # connection refused, timeout, TLS: the API is unreachable
            status = getattr(exc, "status", None)
            reason = reason_of_status(status) if isinstance(status, int) and status else \
                "unavailable"
            raise WriteError(reason, f"{method} {path}: {type(exc).__name__}: {exc}") from None
        if not 200 <= resp.status < 300:
            text = (resp.data or b"")[:300].decode("utf-8", "replace")
            raise WriteError(reason_of_status(resp.status),
                             f"{method} {path}: HTTP {resp.status}: {text}")
        return bytes(out)

    def create_event(self, namespace: str, event: Mapping[str, Any]) -> None:
        self._send("POST", f"/apis/events.k8s.io/v1/namespaces/{namespace}/events",
                   dict(event), "application/json")

    def annotate_pod(self, namespace: str, name: str, annotations: Mapping[str, str]) -> None:
        self._send("PATCH", f"/api/v1/namespaces/{namespace}/pods/{name}",
                   {"metadata": {"annotations": dict(annotations)}},
                   "application/strategic-merge-patch+json")

    # The elastic shrink's writes (sidecar/shrinker.py, WorkloadWriter).
    def read_pod(self, namespace: str, name: str) -> Mapping[str, Any]:
        out = json.loads(self._send("GET", f"/api/v1/namespaces/{namespace}/pods/{name}",
                                    None, "application/json"))
        if not isinstance(out, dict):
            raise WriteError("error", f"GET pod {namespace}/{name}: not a JSON object")
        return out

    def json_patch_pod(self, namespace: str, name: str, ops: list[dict[str, Any]]) -> None:
        self._send("PATCH", f"/api/v1/namespaces/{namespace}/pods/{name}", ops,
                   "application/json-patch+json")


class TokenBucket:
    """``rate`` tokens a second, at most ``burst`` saved up; starts full."""

    def __init__(self, rate: float, burst: int,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.rate, self.burst = rate, burst
        self._clock = clock
        self._tokens = float(burst)
        self._at = clock()

    def delay(self) -> float:
        """Seconds until a token is there (0: now)."""
        now = self._clock()
        self._tokens = min(self.burst, self._tokens + (now - self._at) * self.rate)
        self._at = now
        return 0.0 if self._tokens >= 1 else (1 - self._tokens) / self.rate

    def take(self) -> bool:
        """Take a token if there is one."""
        if self.delay() > 0:
            return False
        self._tokens -= 1
        return True

    def acquire(self, stop: threading.Event) -> bool:
        """Wait for a token and take it; False if ``stop`` was set meanwhile."""
        while not self.take():
            if stop.wait(self.delay()):
                return False
        return not stop.is_set()


@dataclass(frozen=True, slots=True)
class Binding:
    """Pod namespace/name (UID) seen bound to ``node`` at wall time ``at``."""

    namespace: str
    name: str
    uid: str
    node: str
    at: float


def _fit(text: str, limit: int) -> str:
    data = text.encode()
    if len(data) <= limit:
        return text
    return data[: limit - 3].decode("utf-8", "ignore") + "..."


def note_of(b: Binding, d: Decision | None) -> str:
    """The Event's note: the best node, its score, the runner-up and the policy@version."""
    if d is None:
        return _fit(f"bound to {b.node}; the sidecar did not score this pod (kube-scheduler "
                    "scores nothing when one node passes Filter, or it was scored before "
                    "the sidecar started)", NOTE_MAX_BYTES)
    top = d.max_score
    scored_by = d.scored_by(d.result.best)
    parts = [f"{scored_by} scored {len(d.candidate_names())} nodes: best {d.winner} "
             f"{d.winner_score}/{top}"]
    ru = d.runner_up()
    if ru >= 0:
        parts.append(f"runner-up {d.name_at(ru)} {int(d.result.scores[ru])}/{top}")
    if scored_by != d.policy:
        parts.append(f"the fallback scored the best node (the served policy is {d.policy})")
    where = f"bound to {b.node}"
    if b.node != d.winner:
        where += " (kube-scheduler added its other scores)"
    parts.append(where)
    parts.append(f"why: dsan explain pod {b.namespace}/{b.name}")
    return _fit("; ".join(parts), NOTE_MAX_BYTES)


def event_of(b: Binding, d: Decision | None, instance: str, at: float) -> dict[str, Any]:
    """The events.k8s.io/v1 Event of a binding (named like client-go's: pod name + time)."""
    stamp = datetime.fromtimestamp(at, UTC)
    base = b.name[:236].rstrip(".-") or "pod"
    return {
        "apiVersion": "events.k8s.io/v1", "kind": "Event",
        "metadata": {"name": f"{base}.{int(at * 1e9):x}", "namespace": b.namespace},
        # MicroTime: RFC 3339 with exactly six fractional digits
        "eventTime": stamp.strftime("%Y-%m-%dT%H:%M:%S.%fZ"),
        "reportingController": EVENT_CONTROLLER,
        "reportingInstance": instance[:INSTANCE_MAX],
        "action": EVENT_ACTION,
        "reason": EVENT_REASON_SCORED if d is not None else EVENT_REASON_NOT_SCORED,
        "type": "Normal",
        "note": note_of(b, d),
        "regarding": {"apiVersion": "v1", "kind": "Pod", "namespace": b.namespace,
                      "name": b.name, "uid": b.uid},
    }


def annotations_of(d: Decision | None) -> dict[str, str]:
    """The pod's :data:`ANNOTATION_SCORED_BY`: who scored the node the sidecar put first."""
    by = ScoredBy.of(d.scored_by(d.result.best)) if d is not None else ScoredBy("")
    return {ANNOTATION_SCORED_BY: str(by)}


class QueueWriter(Generic[T]):
    """Items queued by :meth:`_offer` (a full queue drops one and counts it as "dropped"),
    handled by one daemon thread off the scoring path. Outcomes are counted by reason in
    :attr:`counts`; a reason in ``quiet`` is not logged, any other once (a missing RBAC rule
    fails every write the same way)."""

    def __init__(self, name: str, maxsize: int, reasons: tuple[str, ...], log: logging.Logger,
                 what: str, quiet: tuple[str, ...] = ()) -> None:
        self._name, self._log, self._what, self._quiet = name, log, what, quiet
        self._queue: queue.Queue[T] = queue.Queue(maxsize=maxsize)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.counts = dict.fromkeys(reasons, 0)
        self._logged: set[str] = set()

    def _offer(self, item: T, what: str) -> None:
        """Queue ``item``, or drop it (counted) when full; never blocks."""
        try:
            self._queue.put_nowait(item)
        except queue.Full:
            self._count("dropped", f"the queue of {self._queue.maxsize} is full: {what}")

    def _handle(self, item: T) -> None:
        raise NotImplementedError

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name=self._name, daemon=True)
        self._thread.start()

    def stop(self, timeout: float = 5.0) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout)

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                item = self._queue.get(timeout=0.2)
            except queue.Empty:
                continue
            try:
                self._handle(item)
            except Exception as exc:  # a bug here must not end the thread
                self._count("error", f"{type(exc).__name__}: {exc}")
            finally:
                self._queue.task_done()

    def _count(self, reason: str, message: str) -> str:
        self.counts[reason] += 1
        if reason not in self._quiet and reason not in self._logged:
            self._logged.add(reason)
            self._log.warning("%s (%s; logged once per reason): %s", self._what, reason,
                              message)
        return reason


class Recorder(QueueWriter[Binding]):
    """Bindings -> Events and annotations, written by one thread at most ``qps`` a second."""

    def __init__(self, writer: ClusterWriter, decisions: Decisions, instance: str,
                 qps: float, burst: int, queue_max: int) -> None:
        super().__init__("recorder", queue_max, FAILURES, log, "recording a decision failed")
        self._writer = writer
        self._decisions = decisions
        self._instance = instance
        self._bucket = TokenBucket(qps, burst)
        #: Writes made, by :data:`WRITES` (failures: ``counts``, by :data:`FAILURES`).
        self.recorded = dict.fromkeys(WRITES, 0)

    def offer(self, namespace: str, name: str, uid: str, node: str) -> None:
        """The cache's ``on_bound``: queued, or dropped and counted when full."""
        self._offer(Binding(namespace, name, uid, node, time.time()),
                    "record_qps too low for the binding rate")

    def _handle(self, b: Binding) -> None:
        d = self._decisions.note_bound(f"{b.namespace}/{b.name}", b.uid, b.node)
        if d is not None and d.key not in (b.uid, d.name):
            d = None  # a decision about an earlier pod of the same name
        writes: tuple[tuple[str, Callable[[], None]], ...] = (
            ("event", lambda: self._writer.create_event(
                b.namespace, event_of(b, d, self._instance, b.at))),
            ("annotation", lambda: self._writer.annotate_pod(
                b.namespace, b.name, annotations_of(d))),
        )
        for what, write in writes:
            if not self._bucket.acquire(self._stop):
                return
            try:
                write()
            except WriteError as exc:
                self._count(exc.reason, f"{what} for {b.namespace}/{b.name}: {exc}")
                continue
            self.recorded[what] += 1
