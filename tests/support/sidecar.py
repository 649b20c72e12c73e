"""Run the real sidecar (`dsan serve`) against a loopback control plane, and a recording proxy.

The proxy sits between kube-scheduler and the sidecar's extender API and remembers, per pod,
the scores the sidecar answered, so an e2e test can check the pod landed on the node the
sidecar scored highest without reaching into the sidecar's internals.
"""

from __future__ import annotations

import dataclasses
import http.client
import json
import shutil
import sys
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from dsan.model.artifact import DEFAULT_DIR
from dsan.policies.dsan_actions import LearnedController, load_actions, save_actions
from tests.support.procs import Proc, free_port, http_ok, wait_until

URL_PREFIX = "/dsan"


@dataclass
class Sidecar:
    """`dsan serve` as a child process on free loopback ports."""

    kubeconfig: Path
    workdir: Path
    #: Policy to serve; None = the sidecar's own default.
    policy: str | None = "bestfit"
    extra_args: tuple[str, ...] = ()
    http_port: int = field(default_factory=free_port)
    grpc_port: int = field(default_factory=free_port)
    #: The interpreter (an environment without torch, say) and the checkout it runs: the
    #: current ones by default; another tree runs from its own root (``python -m`` reads
    #: the working directory first).
    python: str = sys.executable
    tree: Path | None = None
    proc: Proc | None = None
    #: Seconds from process start to /readyz, and its resident memory then (bytes).
    start_s: float = 0.0
    ready_rss: int = 0

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.http_port}"

    @property
    def extender_url(self) -> str:
        return self.url + URL_PREFIX

    def start(self, ready_timeout: float = 60.0) -> Sidecar:
        # Fresh ports only on first start: a restart reuses them, as a restarted Pod would.
        t0 = time.monotonic()
        self.proc = Proc(
            "dsan serve",
            [
                self.python,
                "-m",
                "dsan.cli",
                "serve",
                f"--kubeconfig={self.kubeconfig}",
                f"--http-port={self.http_port}",
                f"--grpc-port={self.grpc_port}",
                *([f"--policy={self.policy}"] if self.policy else []),
                *self.extra_args,
            ],
            self.workdir / "sidecar.log",
            env=None if self.tree is None else {"PYTHONPATH": str(self.tree)},
            cwd=self.tree,
        ).start()
        wait_until(
            "sidecar /readyz", lambda: http_ok(f"{self.url}/readyz"), ready_timeout, [self.proc],
            interval=0.02,
        )
        self.start_s = time.monotonic() - t0
        self.ready_rss = rss_bytes(self.proc.pid)
        return self

    def stop(self) -> None:
        if self.proc is not None:
            self.proc.stop()

    def kill(self) -> None:
        if self.proc is not None:
            self.proc.kill()

    def prioritize(self, pod: dict[str, Any], node_names: list[str]) -> dict[str, int]:
        """POST the extender request kube-scheduler sends; returns {node: score 0..10}."""
        body = json.dumps({"Pod": pod, "Nodes": None, "NodeNames": node_names})
        status, reply = _post(self.http_port, f"{URL_PREFIX}/prioritize", body.encode())
        if status != 200:
            raise RuntimeError(f"prioritize answered {status}: {reply[:300]!r}")
        return {e["Host"]: int(e["Score"]) for e in json.loads(reply)}

    def filter(self, pod: dict[str, Any], node_names: list[str]) -> dict[str, Any]:
        """POST the extender filter request kube-scheduler sends; returns the
        ExtenderFilterResult (``NodeNames`` passed, ``FailedNodes`` {node: reason})."""
        body = json.dumps({"Pod": pod, "Nodes": None, "NodeNames": node_names})
        status, reply = _post(self.http_port, f"{URL_PREFIX}/filter", body.encode())
        if status != 200:
            raise RuntimeError(f"filter answered {status}: {reply[:300]!r}")
        return dict(json.loads(reply))

    def metrics(self) -> str:
        conn = http.client.HTTPConnection("127.0.0.1", self.http_port, timeout=10)
        try:
            conn.request("GET", "/metrics")
            return conn.getresponse().read().decode()
        finally:
            conn.close()


def rss_bytes(pid: int) -> int:
    """Resident memory of process ``pid`` (VmRSS), 0 if it is gone."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


def _post(port: int, path: str, body: bytes, timeout: float = 10.0) -> tuple[int, bytes]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        conn.request("POST", path, body, {"Content-Type": "application/json"})
        resp = conn.getresponse()
        return resp.status, resp.read()
    finally:
        conn.close()


class RecordingProxy:
    """Forwards extender POSTs to the sidecar unchanged and records {pod name: {node: score}},
    every answered filter call as (ExtenderArgs, ExtenderFilterResult) and every answered
    preempt call as (ExtenderPreemptionArgs, ExtenderPreemptionResult). ``late`` names the
    pods whose prioritize reply took at least ``LATE_S``: kube-scheduler may have given up on
    it (httpTimeout 100 ms, ``ignorable``) and scored without the sidecar."""

    LATE_S = 0.08

    def __init__(self, upstream_port: int) -> None:
        self.upstream_port = upstream_port
        self.scores: dict[str, dict[str, int]] = {}
        self.late: set[str] = set()
        self.filters: list[tuple[dict[str, Any], dict[str, Any]]] = []
        self.preempts: list[tuple[dict[str, Any], dict[str, Any]]] = []
        self._lock = threading.Lock()
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            # Nagle + a split response stalls keep-alive clients ~40 ms (field notes).
            disable_nagle_algorithm = True
            protocol_version = "HTTP/1.1"

            def do_POST(self) -> None:
                started = time.perf_counter()
                body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                try:
                    status, reply = _post(proxy.upstream_port, self.path, body)
                except OSError as e:
                    status, reply = 502, str(e).encode()
                if status == 200 and self.path.endswith("/prioritize"):
                    pod = json.loads(body)["Pod"]["metadata"]["name"]
                    with proxy._lock:
                        proxy.scores[pod] = {e["Host"]: int(e["Score"]) for e in json.loads(reply)}
                        if time.perf_counter() - started >= proxy.LATE_S:
                            proxy.late.add(pod)
                if status == 200 and self.path.endswith("/filter"):
                    with proxy._lock:
                        proxy.filters.append((json.loads(body), json.loads(reply)))
                if status == 200 and self.path.endswith("/preempt"):
                    with proxy._lock:
                        proxy.preempts.append((json.loads(body), json.loads(reply)))
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(reply)))
                self.end_headers()
                self.wfile.write(reply)

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = int(self.server.server_address[1])
        self._thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}{URL_PREFIX}"

    def __enter__(self) -> RecordingProxy:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()


def model_with_headroom(dst: Path, headroom: float) -> Path:
    """A copy of the shipped DSAN model at ``dst`` whose learned quota keeps elastic pods
    within ``headroom`` of a web node's cores (``ActionParams.ls_headroom``)."""
    shutil.copytree(DEFAULT_DIR, dst)
    _, controller, manifest = load_actions(dst)
    assert isinstance(controller, LearnedController), controller
    save_actions(dst, dataclasses.replace(controller.p, ls_headroom=headroom), manifest)
    return dst
