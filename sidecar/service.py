"""What both APIs share: readiness, request errors and their bookkeeping, scoring one pod.

The HTTP extender and the gRPC service only decode and encode inside
:meth:`ScoringService.handle`; errors are :class:`RequestError` with a reason (the metrics
label), an HTTP status and a gRPC code.
"""

from __future__ import annotations

import logging
import secrets
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar, TypeVar

import orjson

from dsan.core.snapshot import PodSpec
from sidecar.cache import GraphCache
from sidecar.clusterview import ClusterView
from sidecar.decisions import Decisions
from sidecar.metrics import SidecarMetrics
from sidecar.podspec import PodError
from sidecar.scoring import (
    BadNodeRows,
    NodeRows,
    NoKnownNodes,
    ScoreResult,
    ScoringEngine,
    StaleNodeTable,
)

log = logging.getLogger("dsan.sidecar")
#: Why a scored pod was not assumed (ScoringService.assume_key).
ASSUME_SKIPS = ("other_scheduler", "not_pending")
T = TypeVar("T")


class RequestError(Exception):
    """A request we refuse; ``reason`` is the metrics label, the message goes to the client."""

    #: reason -> (HTTP status, gRPC status code name)
    CODES: ClassVar[dict[str, tuple[int, str]]] = {
        "malformed_json": (400, "INVALID_ARGUMENT"),
        "bad_request": (400, "INVALID_ARGUMENT"),
        "bad_pod": (400, "INVALID_ARGUMENT"),
        "bad_protobuf": (400, "INVALID_ARGUMENT"),
        "unknown_nodes": (404, "NOT_FOUND"),
        "stale_node_table": (409, "FAILED_PRECONDITION"),
        "too_large": (413, "RESOURCE_EXHAUSTED"),
        "not_ready": (503, "UNAVAILABLE"),
        "internal": (500, "INTERNAL"),
    }

    def __init__(self, reason: str, message: str, request_id: str = "",
                 http_status: int = 0) -> None:
        """``http_status`` replaces the reason's own (body framing refused with 411 or 501)."""
        super().__init__(message)
        if reason not in self.CODES:
            raise ValueError(f"unknown error reason {reason!r}")
        self.reason, self.message = reason, message
        status, self.grpc_code = self.CODES[reason]
        self.http_status = http_status or status
        #: Set on an internal error: the id its log line carries, for the reply to carry too.
        self.request_id = request_id


def json_object(body: bytes, what: str) -> dict[str, Any]:
    """A request body that must be one JSON object (``what``, e.g. ``"ExtenderArgs"``, names it
    in the error)."""
    try:
        args = orjson.loads(body)
    except (orjson.JSONDecodeError, UnicodeDecodeError) as exc:
        raise RequestError("malformed_json", f"request body is not JSON: {exc}") from None
    if not isinstance(args, dict):
        raise RequestError("bad_request", f"{what} must be a JSON object")
    return args


def internal_error(api: str, exc: BaseException) -> RequestError:
    """An unexpected exception, logged with its traceback under a fresh request id that the
    reply carries instead of the exception's text."""
    rid = secrets.token_hex(8)
    log.error("%s request %s failed: internal error", api, rid, exc_info=exc)
    return RequestError("internal", f"internal error (request id {rid}); the sidecar logged it",
                        request_id=rid)


@dataclass(frozen=True, slots=True)
class PolicyInfo:
    name: str
    version: str
    fallback: str


class ScoringService:
    def __init__(self, cache: GraphCache, view: ClusterView, engine: ScoringEngine,
                 metrics: SidecarMetrics, policy: PolicyInfo,
                 decisions: Decisions | None = None) -> None:
        self.cache = cache
        #: Where each assumed pod's decision is remembered (its Event, /explain); None: nowhere.
        self.decisions = decisions
        self.view = view
        self.engine = engine
        self.metrics = metrics
        self.policy = policy
        metrics.policy.info({"policy": policy.name, "version": policy.version,
                             "fallback": policy.fallback})
        engine.on_assume = metrics.decided
        cache.on_pending = self.pod_pending
        #: Request counters by (api, verb), bound once: no label lookup per request.
        self._served = {k: metrics.requests.labels(*k)
                        for k in (("http", "prioritize"), ("http", "preempt"), ("grpc", "score"))}
        # Latency observations wait (deque appends are atomic) until settle(), after the reply.
        self._observed: deque[tuple[str, float, float, float, int]] = deque()
        #: Settle times waiting to be observed by the next settle().
        self._settled_s: deque[float] = deque()
        #: Scored pods not assumed, by reason (assume_key).
        self.assume_skipped = dict.fromkeys(ASSUME_SKIPS, 0)

    def handle(self, api: str, verb: str,
               serve: Callable[[], tuple[bytes, ScoreResult | None]]) -> bytes | RequestError:
        """One request: ``serve()`` once the sidecar is ready, returning the reply and, for a
        score, its result (whose latency is queued for :meth:`settle`; a preemption's is
        observed at once). A refusal (a PodError
        is a bad_pod) or a bug comes back as the RequestError to answer with, counted."""
        t0 = time.perf_counter()
        try:
            if not self.view.synced():
                raise RequestError("not_ready", "the sidecar's informers have not synced yet")
            out, res = serve()
        except (RequestError, PodError) as exc:
            err = exc if isinstance(exc, RequestError) else RequestError("bad_pod", str(exc))
            self.metrics.error(api, err.reason)
            log.debug("%s request refused (%s): %s", api, err.reason, err.message)
            return err
        except Exception as exc:  # a bug: logged with the id the reply carries
            self.metrics.error(api, "internal")
            return internal_error(api, exc)
        served = self._served.get((api, verb))
        if served is None:
            served = self._served[api, verb] = self.metrics.requests.labels(api, verb)
        served.inc()
        if verb in ("preempt", "reclaim"):
            self.metrics.preempt_latency.observe(time.perf_counter() - t0)
        elif res is not None:
            self._observed.append((api, res.featurize_s, res.model_s,
                                   time.perf_counter() - t0, len(res.scores)))
        return out

    def assume_key(self, key: str, scheduler_name: str) -> str:
        """``key``, or "" (counted) if the request names another scheduler."""
        if scheduler_name != self.cache.scheduler_name:
            self.assume_skipped["other_scheduler"] += 1
            return ""
        return key

    def pod_pending(self, key: str, alias: str) -> None:
        """The cache's ``on_pending``. kube-scheduler often asks about a pod before our
        informer shows it; its decision was held (:meth:`score`) and is applied now that the
        pod is known to be ours: remembered, and the pod charged to its winner until it
        binds."""
        d = self.decisions.confirm(key, alias) if self.decisions is not None else None
        if d is not None:
            self.cache.assume(d.key, d.spec, d.winner)
            self.metrics.decided(d.winner)

    def score(self, api: str, spec: PodSpec, key: str, names: Sequence[str] | NodeRows,
              max_score: int) -> ScoreResult:
        """Score one pod's candidates and charge the pod to the winner until it binds (in
        :meth:`settle`, after the reply); ``key`` "" assumes nothing."""
        if not names:
            raise RequestError("bad_request", "no candidate node names in the request")
        ours = bool(key) and self.cache.may_assume(key)
        try:
            res = self.engine.score(spec, names, max_score=max_score,
                                    assume=key if ours else "", defer=True)
        except NoKnownNodes as exc:
            raise RequestError("unknown_nodes", str(exc)) from None
        except StaleNodeTable as exc:
            raise RequestError("stale_node_table", str(exc)) from None
        except BadNodeRows as exc:
            raise RequestError("bad_request", str(exc)) from None
        if key and not ours:
            self.assume_skipped["not_pending"] += 1
        if key and res.best >= 0 and self.decisions is not None:
            self.decisions.remember(spec, key, res, max_score, self.policy.version,
                                    self.policy.fallback, held=not ours)
            if not ours and self.cache.may_assume(key):
                self.pod_pending(key, key)  # the informer showed it while it was scored
        if res.fallback:
            self.metrics.fallbacks.inc(res.fallback)
        if res.unknown:
            self.metrics.unknown_nodes.inc(res.unknown)
        return res

    def settle(self) -> None:
        """The last request's deferred work: its assumption (:meth:`ScoringEngine.settle`),
        then the queued latency observations. Runs after a reply was sent (and before every
        scrape), so it must never raise into a server thread."""
        t0 = time.perf_counter()
        _drain(self._settled_s, self.metrics.settle.observe)
        try:
            applied = self.engine.settle()
        except Exception:  # the assumption is lost; its pod is scored again if retried
            applied = False
            self.metrics.error("inprocess", "internal")
            log.exception("applying a deferred assumption failed")
        _drain(self._observed, lambda o: self.metrics.observe(*o))
        if applied:
            self._settled_s.append(time.perf_counter() - t0)  # observed by the next settle

    def exposition(self) -> bytes:
        """/metrics: everything settled first, so a scrape sees every answered request."""
        self.settle()
        _drain(self._settled_s, self.metrics.settle.observe)
        return self.metrics.exposition()

    @property
    def assumed_count(self) -> int:
        """Assumed pods, the deferred one included."""
        self.settle()
        return self.cache.assumed_count


def _drain(queue: deque[T], observe: Callable[[T], None]) -> None:
    """Pop and observe until empty; another thread may drain the same queue."""
    while queue:
        try:
            observe(queue.popleft())
        except IndexError:  # another thread drained it first
            break
