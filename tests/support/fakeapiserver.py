"""A minimal kube-apiserver stand-in for running `dsan serve` as a process without a control
plane: it answers the three lists the sidecar's informers make (Nodes, Pods, and a 404 for
the GPUTelemetry CRD) from fixed objects, and holds each watch open, empty, until it times
out or the server stops. Enough for the sidecar to sync and serve; nothing else of the API.

The e2e tier runs the sidecar against a real apiserver; this is for the integration tier and
for benchmarks that need the real `dsan serve` process (signals, its HTTP server's own CPU).
"""

from __future__ import annotations

import json
import threading
from collections.abc import Mapping, Sequence
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit


class FakeApiServer:
    """``with FakeApiServer(nodes, pods) as api: api.write_kubeconfig(path)``."""

    def __init__(self, nodes: Sequence[Mapping[str, Any]] = (),
                 pods: Sequence[Mapping[str, Any]] = (), watch_hold_s: float = 30.0) -> None:
        self.lists = {"/api/v1/nodes": list(nodes), "/api/v1/pods": list(pods)}
        self.watch_hold_s = watch_hold_s
        self._stop = threading.Event()
        api = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:
                pass

            def do_GET(self) -> None:
                url = urlsplit(self.path)
                items = api.lists.get(url.path)
                if items is None:
                    self._reply(404, {"kind": "Status", "code": 404, "reason": "NotFound"})
                elif parse_qs(url.query).get("watch") == ["true"]:
                    self._watch(parse_qs(url.query))
                else:
                    self._reply(200, {"kind": "List", "metadata": {"resourceVersion": "1"},
                                      "items": items})

            def _reply(self, status: int, obj: Any) -> None:
                data = json.dumps(obj).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def _watch(self, query: dict[str, list[str]]) -> None:
                # An empty watch, held open like a quiet resource's, then ended cleanly.
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Transfer-Encoding", "chunked")
                self.end_headers()
                hold = min(api.watch_hold_s, float(query.get("timeoutSeconds", ["30"])[0]))
                api._stop.wait(hold)
                self.wfile.write(b"0\r\n\r\n")
                self.close_connection = True

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.port = int(self.server.server_address[1])
        self._thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def write_kubeconfig(self, path: Path) -> Path:
        path.write_text(json.dumps({
            "apiVersion": "v1", "kind": "Config", "current-context": "fake",
            "clusters": [{"name": "fake", "cluster": {"server": self.url}}],
            "users": [{"name": "fake", "user": {"token": "fake"}}],
            "contexts": [{"name": "fake", "context": {"cluster": "fake", "user": "fake"}}],
        }))
        return path

    def __enter__(self) -> FakeApiServer:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self.server.shutdown()
        self.server.server_close()
