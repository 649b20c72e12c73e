"""The kube-scheduler extender HTTP API (docs/sidecar.md), plus /healthz, /readyz, /metrics
and /explain.

Server: the stdlib's threading HTTP server with HTTP/1.1 keep-alive, Nagle disabled and every
response sent in one write: without both, a keep-alive client stalls ~44 ms per request.
"""

from __future__ import annotations

import contextlib
import select
import socket
import threading
import time
from collections.abc import Callable, Sequence
from email.message import Message
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Protocol

import numpy as np
import numpy.typing as npt
import orjson

from dsan.core.snapshot import PodSpec
from sidecar.podspec import PodSpecMemo, pod_key
from sidecar.preemption import Reclamation, encode_result, parse_preemption_args
from sidecar.scoring import ScoreResult
from sidecar.service import RequestError, ScoringService, internal_error, json_object

MAX_EXTENDER_PRIORITY = 10
_REASONS = {200: "OK", 400: "Bad Request", 404: "Not Found", 405: "Method Not Allowed",
            411: "Length Required", 413: "Payload Too Large", 429: "Too Many Requests",
            500: "Internal Server Error", 501: "Not Implemented", 503: "Service Unavailable"}
Route = Callable[[bytes], tuple[int, bytes]]
#: GET <EXPLAIN_PREFIX><namespace>/<pod>: a scored pod's explanation (sidecar/explainer.py).
EXPLAIN_PREFIX = "/explain/"
#: A refused request's body is read (and dropped) up to this size.
MAX_DRAINED_BODY = 1 << 16


#: What follows each host name in the reply, by score: the score, then the next entry's start.
_SUFFIX = np.array([f'","Score":{s}}},{{"Host":"' for s in range(MAX_EXTENDER_PRIORITY + 1)],
                   dtype=object)


def encode_priorities(names: Sequence[str], scores: npt.ArrayLike) -> bytes:
    """``[{"Host": n, "Score": s}, ...]`` for scores 0..10 without a format call per node:
    orjson escapes all names at once, and ``","`` cannot occur inside an encoded string, so
    splitting there yields each escaped name, interleaved with per-score suffixes."""
    m = len(names)
    if m == 0:
        return b"[]"
    s = np.asarray(scores, dtype=np.int64)
    if s.shape != (m,) or s.min() < 0 or s.max() > MAX_EXTENDER_PRIORITY:
        raise ValueError(f"need {m} scores in 0..{MAX_EXTENDER_PRIORITY}")
    parts = np.empty(2 * m, dtype=object)
    parts[0::2] = orjson.dumps(names).decode()[2:-2].split('","')
    parts[1::2] = _SUFFIX[s]
    parts[-1] = f'","Score":{int(s[-1])}}}]'
    return ('[{"Host":"' + "".join(parts.tolist())).encode()


def _error_body(message: str, request_id: str = "") -> bytes:
    if request_id:
        return orjson.dumps({"error": message, "requestId": request_id})
    return orjson.dumps({"error": message})


def _reply(out: bytes | RequestError) -> tuple[int, bytes]:
    """200 with a reply, or a refusal's status with its error."""
    if isinstance(out, RequestError):
        return out.http_status, _error_body(out.message, out.request_id)
    return 200, out


def parse_args(body: bytes) -> tuple[dict[str, Any], list[str], list[Any] | None]:
    """ExtenderArgs -> (Pod, node names, the whole Nodes.items when they came instead of
    NodeNames, else None); RequestError names what is wrong."""
    args = json_object(body, "ExtenderArgs")
    pod = args.get("Pod")
    if not isinstance(pod, dict):
        raise RequestError("bad_pod", "ExtenderArgs.Pod is missing or not an object")
    names, items = args.get("NodeNames"), None
    if names is None:
        items = (args.get("Nodes") or {}).get("items") if isinstance(args.get("Nodes"),
                                                                      dict) else None
        if not isinstance(items, list):
            raise RequestError("bad_request", "ExtenderArgs has neither NodeNames nor Nodes.items")
        try:
            names = [str(it["metadata"]["name"]) for it in items]
        except (KeyError, TypeError):
            raise RequestError("bad_request", "Nodes.items[] without metadata.name") from None
    # set(map(type, ...)) runs in C: no Python-level loop over the candidate names.
    if not isinstance(names, list) or not set(map(type, names)) <= {str}:
        raise RequestError("bad_request", "ExtenderArgs.NodeNames must be a list of strings")
    return pod, names, items


def _scheduler_name(pod: dict[str, Any]) -> str:
    """The Pod's spec.schedulerName; Kubernetes defaults an absent one to default-scheduler."""
    name = pod["spec"].get("schedulerName")  # spec is an object: the pod parsed
    return name if isinstance(name, str) and name else "default-scheduler"


class ExtenderApp:
    """Request bodies in, (status, body) out: the extender's logic, independent of the server."""

    def __init__(self, service: ScoringService, reclamation: Reclamation | None = None) -> None:
        self.service = service
        #: Serves the preempt verb (required by :meth:`preempt`).
        self.reclamation = reclamation
        #: Pods parsed once per shape (a workload's replicas come one after another).
        self._specs = PodSpecMemo()

    def _parse(self, body: bytes) -> tuple[dict[str, Any], PodSpec, list[str], list[Any] | None]:
        pod, names, items = parse_args(body)
        return pod, self._specs.get(pod, self.service.cache.models), names, items

    def prioritize(self, body: bytes) -> tuple[int, bytes]:
        def serve() -> tuple[bytes, ScoreResult]:
            pod, spec, names, _ = self._parse(body)
            key = self.service.assume_key(pod_key(pod), _scheduler_name(pod))
            res = self.service.score("http", spec, key, names, MAX_EXTENDER_PRIORITY)
            return encode_priorities(names, res.scores), res

        return _reply(self.service.handle("http", "prioritize", serve))

    def settle(self) -> None:
        """Bookkeeping the reply did not wait for; the server calls it after each POST's
        reply is written (:meth:`ScoringService.settle`)."""
        self.service.settle()

    def filter(self, body: bytes) -> tuple[int, bytes]:
        def serve() -> tuple[bytes, None]:
            _, spec, names, items = self._parse(body)
            passed, failed = self.service.engine.filter(spec, names)
            # A scheduler that sent whole nodes (no nodeCacheCapable) reads only Nodes back.
            nodes = None if items is None else {
                "items": [it for it, n in zip(items, names, strict=True) if n not in failed]}
            return orjson.dumps({"Nodes": nodes, "NodeNames": passed, "FailedNodes": failed,
                                 "FailedAndUnresolvableNodes": {}, "Error": ""}), None

        return _reply(self.service.handle("http", "filter", serve))

    def preempt(self, body: bytes) -> tuple[int, bytes]:
        def serve() -> tuple[bytes, None]:
            if self.reclamation is None:
                raise RequestError("bad_request", "this extender serves no preempt verb")
            pod, proposals = parse_preemption_args(body)
            spec = self._specs.get(pod, self.service.cache.models)
            # kube-scheduler's preemption dry run never asks an extender's filter, so a node
            # the quota refuses can be proposed; the gRPC Filter keeps it out in plugin mode.
            _, refused = self.service.engine.filter(spec, [p.node for p in proposals],
                                                    fit=False)
            return encode_result(self.reclamation.choose(spec.priority, proposals, refused)), None

        return _reply(self.service.handle("http", "preempt", serve))


class App(Protocol):
    """What the server routes, and the bookkeeping it runs once each reply is written."""

    def prioritize(self, body: bytes) -> tuple[int, bytes]: ...

    def filter(self, body: bytes) -> tuple[int, bytes]: ...

    def settle(self) -> None: ...


#: Framing of a request body sent chunked (Transfer-Encoding: chunked).
CHUNKED = -1
#: Longest chunk-size line (hex size plus extensions) and most trailer lines read.
_CHUNK_LINE_MAX = 1024
_TRAILERS_MAX = 64


def body_length(headers: Message) -> int:
    """The request body's length, or :data:`CHUNKED`; a RequestError for conflicting or
    malformed framing (a length must be 1*DIGIT: ``int()`` would take ``+5`` or ``5_0``)."""
    lengths = headers.get_all("Content-Length")
    codings = headers.get_all("Transfer-Encoding")
    if codings is not None:
        if lengths is not None:
            raise RequestError("bad_request", "both Content-Length and Transfer-Encoding "
                               "are set: conflicting framing")
        coding = [c.strip().lower() for v in codings for c in v.split(",")]
        if coding != ["chunked"]:
            raise RequestError("bad_request", f"Transfer-Encoding {', '.join(coding)!r} "
                               "is not supported (only chunked)", http_status=501)
        return CHUNKED
    if lengths is None:
        raise RequestError("bad_request", "Content-Length is required", http_status=411)
    values = {v.strip() for h in lengths for v in h.split(",")}
    if len(values) != 1:
        raise RequestError("bad_request", "conflicting Content-Length values: "
                           + ", ".join(sorted(v[:20] for v in values)[:4]))
    value = values.pop()
    if not (value.isascii() and value.isdigit()) or len(value) > 18:
        raise RequestError("bad_request", f"bad Content-Length {value[:20]!r}")
    return int(value)


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True
    #: Idle keep-alive connections are dropped after this long, freeing their thread.
    timeout = 120
    server: ExtenderServer

    def setup(self) -> None:
        super().setup()
        self._poll = select.poll()  # descriptors past 1024, unlike select.select
        self._poll.register(self.connection.fileno(), select.POLLIN)
        #: True while a request is being answered (ExtenderServer.drain waits for it).
        self.busy = False
        self._read_shut = False
        self._head_only = False
        with self.server.conns_lock:
            self.server.conns.add(self)

    def finish(self) -> None:
        try:
            super().finish()
        finally:
            with self.server.conns_lock:
                self.server.conns.discard(self)

    def idle_waiting(self) -> bool:
        """For drain: True if the client's next request has (partly) arrived."""
        return bool(self._poll.poll(0))

    def shut_read(self) -> None:
        """For drain: end an idle keep-alive connection (its thread's read sees EOF)."""
        if not self._read_shut:
            self._read_shut = True
            with contextlib.suppress(OSError):
                self.connection.shutdown(socket.SHUT_RD)

    def log_message(self, format: str, *args: Any) -> None:
        pass  # no per-request logging; errors are counted in /metrics

    def _send(self, status: int, body: bytes, ctype: str = "application/json",
              close: bool = False, extra: str = "") -> None:
        """One response in one write; ``extra``: more header lines, each ending in CRLF."""
        close = close or self.server.draining  # a draining server ends every connection
        reason = _REASONS.get(status) or HTTPStatus(status).phrase
        head = (f"HTTP/1.1 {status} {reason}\r\n"
                f"Content-Type: {ctype}\r\nContent-Length: {len(body)}\r\n{extra}"
                + ("Connection: close\r\n" if close else "") + "\r\n")
        if close:
            self.close_connection = True
        if self._head_only:
            self._head_only, body = False, b""
        self.wfile.write(head.encode() + body)  # one write: see the module docstring

    def send_error(self, code: int, message: str | None = None,
                   explain: str | None = None) -> None:
        """The stdlib's own errors (a bad request line or header, an unknown method) as JSON
        with a status line; any body is left unread, so close."""
        self.server.count_error("bad_request")
        self._send(code, _error_body(message or HTTPStatus(code).phrase), close=True)

    def _serving(self, serve: Callable[[], None]) -> None:
        self.busy = True
        try:
            serve()
        finally:
            self.busy = False

    def do_POST(self) -> None:
        if not self.server.post_routes:  # the metrics listener: nothing to POST to
            self._not_allowed()
            return
        self._serving(self._post)

    def _post(self) -> None:
        srv = self.server
        try:
            n = body_length(self.headers)
            if n == CHUNKED:
                body = self._read_chunked(srv.max_body)
            elif n > srv.max_body:
                # Refuse without reading: the body may be huge; closing drops the rest.
                raise RequestError("too_large", f"request body of {n} bytes exceeds "
                                   f"the limit of {srv.max_body}")
            else:
                body = self.rfile.read(n)
                if len(body) < n:
                    raise RequestError("bad_request", f"request body ended after "
                                       f"{len(body)} of {n} bytes")
        except RequestError as err:
            # Framing refused (RFC 9112 section 6): where the next request starts is unknown.
            srv.count_error(err.reason)
            self._send(err.http_status, _error_body(err.message), close=True)
            return
        path = self.path.split("?", 1)[0]
        route = srv.post_routes.get(path)
        if route is None:
            if srv.get_route(path):
                self._wrong_method("GET, HEAD")
            else:
                srv.count_error("not_found")
                self._send(404, _error_body(f"no such endpoint: POST {self.path[:200]}"))
            return
        try:
            status, out = route(body)
        except Exception as exc:  # a bug must not take the server down (the apps catch theirs)
            srv.count_error("internal")
            status, out = _reply(internal_error("http", exc))
        self._send(status, out)
        assert srv.app is not None  # there are routes
        srv.app.settle()  # off the client's clock: the reply is already out

    def _read_chunked(self, limit: int) -> bytes:
        """A chunked body (RFC 9112 section 7.1) of at most ``limit`` bytes; trailers dropped."""
        rfile, body = self.rfile, bytearray()
        while True:
            line = rfile.readline(_CHUNK_LINE_MAX + 1)
            size = line.split(b";", 1)[0].strip()
            if (not line.endswith(b"\n") or not size or len(size) > 8
                    or size.strip(b"0123456789abcdefABCDEF")):
                raise RequestError("bad_request", "malformed chunked body")
            n = int(size, 16)
            if n == 0:
                break
            if len(body) + n > limit:
                raise RequestError("too_large", "chunked request body exceeds the limit "
                                   f"of {limit} bytes")
            chunk = rfile.read(n)
            if len(chunk) < n or rfile.readline(3) not in (b"\r\n", b"\n"):
                raise RequestError("bad_request", "malformed chunked body")
            body += chunk
        for _ in range(_TRAILERS_MAX):
            line = rfile.readline(_CHUNK_LINE_MAX + 1)
            if line in (b"\r\n", b"\n"):
                return bytes(body)
            if not line.endswith(b"\n"):
                break
        raise RequestError("bad_request", "malformed chunked body (trailers)")

    def do_GET(self) -> None:
        self._serving(self._get)
        if "Content-Length" in self.headers or "Transfer-Encoding" in self.headers:
            # A body is never read here, so where the next request starts is unknown.
            self.close_connection = True

    def do_HEAD(self) -> None:
        self._head_only = True
        self.do_GET()

    def _not_allowed(self) -> None:
        """405 for a standard method (not the stdlib's 501), then close. A small body is read
        first: a reply sent while the client still writes it can reach it as a reset."""
        self.server.count_error("method_not_allowed")
        length = self.headers.get("Content-Length") or "0"
        if length.isascii() and length.isdigit() and int(length) <= MAX_DRAINED_BODY:
            self.rfile.read(int(length))
        allow = "GET, HEAD, POST" if self.server.post_routes else "GET, HEAD"
        self._send(405, _error_body(f"method {self.command} not allowed ({allow})"),
                   close=True, extra=f"Allow: {allow}\r\n")

    do_PUT = do_DELETE = do_PATCH = do_OPTIONS = do_TRACE = do_CONNECT = _not_allowed

    def _wrong_method(self, allow: str) -> None:
        """405 for a route of another method; the request had no body left unread, so the
        connection stays open."""
        self.server.count_error("method_not_allowed")
        self._send(405, _error_body(f"method {self.command} not allowed ({allow})"),
                   extra=f"Allow: {allow}\r\n")

    def _get(self) -> None:
        path = self.path.split("?", 1)[0]
        srv = self.server
        if not srv.get_route(path):
            if path in srv.post_routes:
                self._wrong_method("POST")
            else:
                srv.count_error("not_found")
                self._send(404, _error_body(f"no such endpoint: GET {path[:200]}"))
        elif path == "/healthz":
            self._send(200, b"ok", "text/plain")
        elif path == "/readyz":
            ok = srv.ready() and not srv.draining
            self._send(200 if ok else 503, b"ok" if ok else
                       b"draining" if srv.draining else b"informers not synced", "text/plain")
        elif path == "/metrics":
            assert srv.metrics_body is not None  # get_route
            self._send(200, srv.metrics_body(), "text/plain; version=0.0.4; charset=utf-8")
        else:
            assert srv.explain is not None  # get_route
            try:
                status, out, extra = srv.explain(path[len(EXPLAIN_PREFIX):])
            except Exception as exc:  # a bug must not take the server down
                srv.count_error("internal")
                (status, out), extra = _reply(internal_error("http", exc)), ""
            self._send(status, out, extra=extra)


class ExtenderServer(ThreadingHTTPServer):
    """Serves one app's routes under ``prefix`` on (host, port) in a background thread, one
    thread per connection; ``backlog`` is the listen queue (SidecarConfig.http_backlog).

    Without an app it is the metrics listener (``--metrics-port``): only GET and HEAD of
    /metrics, /healthz and /readyz, so it may face the pod network (Prometheus, the kubelet's
    probes) while nothing that scores does."""

    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, host: str, port: int, prefix: str, app: App | None,
                 max_body: int, ready: Callable[[], bool] = lambda: True,
                 metrics_body: Callable[[], bytes] | None = None,
                 count_error: Callable[[str], None] = lambda reason: None,
                 backlog: int = 1024,
                 explain: Callable[[str], tuple[int, bytes, str]] | None = None,
                 preempt: Route | None = None) -> None:
        """``preempt``: the route of POST <prefix>/preempt (ExtenderApp.preempt); None: 404."""
        self.request_queue_size = backlog  # read by listen() in the constructor below
        if ":" in host:  # an IPv6 address such as "::" (every address of a dual-stack pod)
            self.address_family = socket.AF_INET6
        super().__init__((host, port), _Handler)
        self.app = app
        self.post_routes: dict[str, Route] = {}
        if app is not None:
            self.post_routes = {f"{prefix}/prioritize": app.prioritize,
                                f"{prefix}/filter": app.filter}
        if preempt is not None:
            self.post_routes[f"{prefix}/preempt"] = preempt
        self.max_body = max_body
        self.ready = ready
        self.metrics_body = metrics_body
        self.count_error = count_error
        #: The rest of an /explain path -> (status, JSON body, extra header lines).
        self.explain = explain
        #: Set by drain(): /readyz answers 503 and every reply closes its connection.
        self.draining = False
        #: Open connections' handlers (drain looks at them).
        self.conns: set[_Handler] = set()
        self.conns_lock = threading.Lock()
        self._thread: threading.Thread | None = None

    def get_route(self, path: str) -> bool:
        """Whether GET serves ``path`` (the one list of GET routes: ``_get`` dispatches on
        it, POST answers 405 for it)."""
        return (path in ("/healthz", "/readyz")
                or (path == "/metrics" and self.metrics_body is not None)
                or (path.startswith(EXPLAIN_PREFIX) and self.explain is not None))

    @property
    def port(self) -> int:
        return int(self.server_address[1])

    def start(self) -> None:
        self._thread = threading.Thread(target=self.serve_forever, kwargs={"poll_interval": 0.2},
                                        name="extender-http", daemon=True)
        self._thread.start()

    def drain(self, timeout: float) -> int:
        """Stop accepting, let the requests in flight finish (each reply closes its
        connection), end idle connections; at most ``timeout`` seconds. Returns how many
        requests were still in flight (one whose first bytes arrived counts)."""
        self.draining = True
        if self._thread is not None:
            self.shutdown()  # the accept loop ends...
        self.socket.close()  # ...and new connections are refused from here on
        deadline = time.monotonic() + timeout
        quiet = 0
        while True:
            with self.conns_lock:
                conns = list(self.conns)
            busy = 0
            for h in conns:
                if h.busy or h.idle_waiting():
                    busy += 1
                else:
                    h.shut_read()
            # Quiet twice, 10 ms apart: a thread that had just read a request line when it
            # was looked at (not busy yet, nothing left waiting) is busy by the second look.
            quiet = quiet + 1 if busy == 0 else 0
            if quiet == 2 or time.monotonic() >= deadline:
                return busy
            time.sleep(0.01)

    def stop(self) -> None:
        if not self.draining:
            self.draining = True
            if self._thread is not None:
                self.shutdown()
        self.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)
