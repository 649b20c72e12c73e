"""The metrics listener: ``/metrics``, ``/healthz`` and ``/readyz`` on an address of their own.

The extender and gRPC stay on loopback (they are not authenticated); Prometheus and the
kubelet's probes reach only the pod's IP. This listener serves exactly those three read-only
paths there, so nothing that scores is exposed.
"""

from __future__ import annotations

import socket
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

#: prometheus_client's text exposition format.
METRICS_TYPE = "text/plain; version=0.0.4; charset=utf-8"
#: A refused request's body is read (and dropped) up to this size.
MAX_DRAINED_BODY = 1 << 16


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    #: An idle or silent client is dropped after this long instead of holding a thread.
    timeout = 30
    server: MetricsServer

    def log_message(self, format: str, *args: Any) -> None:
        pass  # scrapes and probes every few seconds: no per-request log lines

    def do_GET(self, head_only: bool = False) -> None:
        path = self.path.split("?", 1)[0]
        status, body, ctype = 200, b"ok", "text/plain"
        if path == "/metrics":
            body, ctype = self.server.body(), METRICS_TYPE
        elif path == "/readyz" and not self.server.ready():
            status, body = 503, b"informers not synced"
        elif path not in ("/healthz", "/readyz"):
            status, body = 404, (f"no such endpoint: {path} (this port serves /metrics, "
                                 "/healthz and /readyz)").encode()
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if not head_only:
            self.wfile.write(body)

    def do_HEAD(self) -> None:
        self.do_GET(head_only=True)

    def _refuse(self) -> None:
        # Read a small body first: a reply sent while the client still writes it can reach
        # it as a reset instead of a 405. The connection closes after the reply either way.
        try:
            n = int(self.headers.get("Content-Length") or 0)
        except ValueError:
            n = -1
        if 0 <= n <= MAX_DRAINED_BODY:
            self.rfile.read(n)
        self.send_response(405)
        self.send_header("Connection", "close")  # the client must not reuse it
        self.send_header("Allow", "GET, HEAD")
        self.send_header("Content-Length", "0")
        self.end_headers()

    do_POST = do_PUT = do_DELETE = do_PATCH = _refuse


class MetricsServer(ThreadingHTTPServer):
    """Serves ``body()`` at /metrics and ``ready()`` at /readyz, in a background thread."""

    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, host: str, port: int, body: Callable[[], bytes],
                 ready: Callable[[], bool]) -> None:
        if ":" in host:  # an IPv6 address such as "::" (every address of a dual-stack pod)
            self.address_family = socket.AF_INET6
        super().__init__((host, port), _Handler)
        self.body = body
        self.ready = ready
        self._thread: threading.Thread | None = None

    @property
    def port(self) -> int:
        return int(self.server_address[1])

    def start(self) -> None:
        self._thread = threading.Thread(target=self.serve_forever, kwargs={"poll_interval": 0.2},
                                        name="metrics-http", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self.shutdown()
        self.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)
