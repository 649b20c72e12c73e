"""The kube-scheduler extender HTTP API, plus /healthz, /readyz and /metrics.

Wire format (k8s.io/kube-scheduler/extender/v1, Go types without JSON tags, so keys are the
capitalised field names): the request is ``ExtenderArgs`` ``{"Pod": {...}, "Nodes": null,
"NodeNames": [...]}`` with ``nodeCacheCapable: true`` (``Nodes.items`` is read when
NodeNames is absent); ``prioritize`` answers a ``HostPriorityList``
``[{"Host": ..., "Score": 0..10}]`` (MaxExtenderPriority is 10), ``filter`` an
``ExtenderFilterResult``.

Server: the stdlib's threading HTTP server with HTTP/1.1 keep-alive, Nagle disabled and every
response sent in one write: without both, a keep-alive client stalls ~44 ms per request in
the kernel (field notes). No per-request logging.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import numpy as np
import numpy.typing as npt
import orjson

from sidecar.inbox import Inbox
from sidecar.podspec import PodError, PodSpecMemo, pod_key
from sidecar.scoreresult import scores_past
from sidecar.service import RequestError, ScoringService, internal_error

MAX_EXTENDER_PRIORITY = 10
_REASONS = {200: "OK", 400: "Bad Request", 404: "Not Found", 405: "Method Not Allowed",
            411: "Length Required", 413: "Payload Too Large", 500: "Internal Server Error",
            503: "Service Unavailable"}
Route = Callable[[bytes], tuple[int, bytes]]


#: What follows each host name in the reply, by score: the score, then the next entry's start.
_SUFFIX = np.array([f'","Score":{s}}},{{"Host":"' for s in range(MAX_EXTENDER_PRIORITY + 1)],
                   dtype=object)


def encode_priorities(names: Sequence[str], scores: npt.ArrayLike) -> bytes:
    """``[{"Host": n, "Score": s}, ...]`` for scores 0..10, without a dict or a format call
    per node: orjson escapes all names in one call, and the ``","`` between two encoded
    strings cannot occur inside one (an inner quote is always escaped), so splitting there
    yields each escaped name; names and per-score suffixes are then interleaved in numpy
    and joined once (3x faster than a format per node at 5,000 nodes)."""
    m = len(names)
    if m == 0:
        return b"[]"
    s = np.asarray(scores, dtype=np.int64)
    if s.shape != (m,) or scores_past(s, MAX_EXTENDER_PRIORITY):
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


def _refusal(err: RequestError) -> tuple[int, bytes]:
    return err.http_status, _error_body(err.message, err.request_id)


def parse_args(body: bytes) -> tuple[dict[str, Any], list[str]]:
    """ExtenderArgs -> (Pod, node names); RequestError names what is wrong."""
    try:
        args = orjson.loads(body)
    except (orjson.JSONDecodeError, UnicodeDecodeError) as exc:
        raise RequestError("malformed_json", f"request body is not JSON: {exc}") from None
    if not isinstance(args, dict):
        raise RequestError("bad_request", "ExtenderArgs must be a JSON object")
    pod = args.get("Pod")
    if not isinstance(pod, dict):
        raise RequestError("bad_pod", "ExtenderArgs.Pod is missing or not an object")
    names = args.get("NodeNames")
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
    return pod, names


class ExtenderApp:
    """Request bodies in, (status, body) out: the extender's logic, independent of the server."""

    def __init__(self, service: ScoringService) -> None:
        self.service = service
        self.metrics = service.metrics
        # The labelled child once, not a label lookup per request.
        self._prioritized = self.metrics.requests.labels("http", "prioritize")
        #: Pods parsed once per shape (a workload's replicas come one after another).
        self._specs = PodSpecMemo()

    def prioritize(self, body: bytes) -> tuple[int, bytes]:
        t0 = time.perf_counter()
        try:
            self.service.check_ready()
            pod, names = parse_args(body)
            try:
                spec = self._specs.get(pod, self.service.cache.models)
            except PodError as exc:
                raise RequestError("bad_pod", str(exc)) from None
            res = self.service.score("http", spec, pod_key(pod), names, MAX_EXTENDER_PRIORITY,
                                     defer=True)
            out = encode_priorities(names, res.scores)
        except RequestError as err:
            self.service.refuse("http", err)
            return _refusal(err)
        except Exception as exc:  # a bug: 500, logged with the id the reply carries
            return _refusal(self.service.internal("http", exc))
        self._prioritized.inc()
        self.service.record("http", res, time.perf_counter() - t0, len(names))
        return 200, out

    def settle(self, waiting: Callable[[], bool] | None = None) -> None:
        """Bookkeeping the reply did not wait for (the winner's assumption, latency
        observations); the server calls it after each POST's reply is written, with
        ``waiting`` telling whether the connection's next request is already there
        (:meth:`ScoringService.settle`)."""
        self.service.settle(waiting, "http")

    def filter(self, body: bytes) -> tuple[int, bytes]:
        try:
            self.service.check_ready()
            pod, names = parse_args(body)
            try:
                spec = self._specs.get(pod, self.service.cache.models)
            except PodError as exc:
                raise RequestError("bad_pod", str(exc)) from None
            passed, failed = self.service.engine.filter(spec, names)
        except RequestError as err:
            self.service.refuse("http", err)
            return _refusal(err)
        except Exception as exc:  # a bug: 500, logged with the id the reply carries
            return _refusal(self.service.internal("http", exc))
        self.metrics.requests.labels("http", "filter").inc()
        return 200, orjson.dumps({"Nodes": None, "NodeNames": passed, "FailedNodes": failed,
                                  "FailedAndUnresolvableNodes": {}, "Error": ""})


class NoopExtenderApp:
    """The latency floor: same server, same parsing and reply encoding, every score 0."""

    def prioritize(self, body: bytes) -> tuple[int, bytes]:
        try:
            _, names = parse_args(body)
        except RequestError as err:
            return err.http_status, _error_body(err.message)
        return 200, encode_priorities(names, np.zeros(len(names), dtype=np.int64))


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True
    #: Idle keep-alive connections are dropped after this long, so a client that connects
    #: and sends nothing cannot hold a server thread forever.
    timeout = 120
    server: ExtenderServer

    def setup(self) -> None:
        super().setup()
        self._inbox = Inbox(self.connection)

    def log_message(self, format: str, *args: Any) -> None:
        pass  # no per-request logging; errors are counted in /metrics

    def _send(self, status: int, body: bytes, ctype: str = "application/json",
              close: bool = False) -> None:
        head = (f"HTTP/1.1 {status} {_REASONS.get(status, 'Error')}\r\n"
                f"Content-Type: {ctype}\r\nContent-Length: {len(body)}\r\n"
                + ("Connection: close\r\n" if close else "") + "\r\n")
        if close:
            self.close_connection = True
        self.wfile.write(head.encode() + body)  # one write: see the module docstring

    def send_error(self, code: int, message: str | None = None,
                   explain: str | None = None) -> None:
        # The stdlib's own errors (bad request line, unsupported method) leave any body
        # unread: close, or its bytes would be parsed as the next request.
        self.close_connection = True
        super().send_error(code, message, explain)

    def do_POST(self) -> None:
        length = self.headers.get("Content-Length")
        if length is None:
            self.server.count_error("bad_request")
            self._send(411, _error_body("Content-Length is required"), close=True)
            return
        try:
            n = int(length)
            if n < 0:
                raise ValueError
        except ValueError:
            self.server.count_error("bad_request")
            self._send(400, _error_body(f"bad Content-Length {length!r}"), close=True)
            return
        if n > self.server.max_body:
            # Refuse without reading: the body may be huge; closing drops the rest.
            self.server.count_error("too_large")
            self._send(413, _error_body(
                f"request body of {n} bytes exceeds the limit of {self.server.max_body}"),
                close=True)
            return
        body = self.rfile.read(n)
        route = self.server.post_routes.get(self.path.split("?", 1)[0])
        if route is None:
            self._send(404, _error_body(f"no such endpoint: POST {self.path}"))
            return
        try:
            status, out = route(body)
        except Exception as exc:  # a bug must not take the server down (the apps catch theirs)
            self.server.count_error("internal")
            status, out = _refusal(internal_error("http", exc))
        self._send(status, out)
        if self.server.after_reply is not None:
            # off the client's clock: the reply is already out
            self.server.after_reply(self._inbox.waiting)

    def do_GET(self) -> None:
        path = self.path.split("?", 1)[0]
        srv = self.server
        if path == "/healthz":
            self._send(200, b"ok", "text/plain")
        elif path == "/readyz":
            ok = srv.ready()
            self._send(200 if ok else 503, b"ok" if ok else b"informers not synced",
                       "text/plain")
        elif path == "/metrics" and srv.metrics_body is not None:
            self._send(200, srv.metrics_body(), "text/plain; version=0.0.4; charset=utf-8")
        else:
            self._send(404, _error_body(f"no such endpoint: GET {path}"))


class ExtenderServer(ThreadingHTTPServer):
    """Serves one app's routes under ``prefix`` on (host, port) in a background thread."""

    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, host: str, port: int, prefix: str, app: ExtenderApp | NoopExtenderApp,
                 max_body: int, ready: Callable[[], bool] = lambda: True,
                 metrics_body: Callable[[], bytes] | None = None,
                 count_error: Callable[[str], None] = lambda reason: None) -> None:
        super().__init__((host, port), _Handler)
        self.post_routes: dict[str, Route] = {f"{prefix}/prioritize": app.prioritize}
        if isinstance(app, ExtenderApp):
            self.post_routes[f"{prefix}/filter"] = app.filter
        #: Run after every POST reply is written (the app's deferred bookkeeping).
        self.after_reply: Callable[[Callable[[], bool]], None] | None = getattr(
            app, "settle", None)
        self.max_body = max_body
        self.ready = ready
        self.metrics_body = metrics_body
        self.count_error = count_error
        self._thread: threading.Thread | None = None

    @property
    def port(self) -> int:
        return int(self.server_address[1])

    def start(self) -> None:
        self._thread = threading.Thread(target=self.serve_forever, kwargs={"poll_interval": 0.2},
                                        name="extender-http", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self.shutdown()
        self.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)
