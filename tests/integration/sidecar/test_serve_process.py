"""`dsan serve` as a process, synced from a stand-in apiserver (tests/support/fakeapiserver):
signals (SIGTERM drains, SIGHUP is logged and ignored) and a malformed cluster object that
must not keep the sidecar from becoming ready."""

from __future__ import annotations

import json
import os
import signal
import socket
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.support import kubeobjects as ko
from tests.support.fakeapiserver import FakeApiServer
from tests.support.procs import Proc, free_port, http_ok, wait_until

pytestmark = pytest.mark.integration
NAMES = [f"node-{i:05d}" for i in range(10)]


class Served:
    def __init__(self, proc: Proc, port: int) -> None:
        self.proc, self.port = proc, port
        self.url = f"http://127.0.0.1:{port}"

    def log(self) -> str:
        return self.proc.log.read_text(errors="replace")


@pytest.fixture
def serve(tmp_path: Path) -> Iterator[Any]:
    started: list[tuple[FakeApiServer, Proc]] = []

    def start(pods: list[dict[str, Any]] | None = None, *flags: str) -> Served:
        api = FakeApiServer(nodes=ko.cluster(10), pods=pods or []).__enter__()
        port = free_port()
        proc = Proc("dsan serve", [
            sys.executable, "-m", "dsan.cli", "serve",
            f"--kubeconfig={api.write_kubeconfig(tmp_path / 'kubeconfig')}",
            f"--http-port={port}", "--grpc-port=-1", "--policy=fgd",
            "--gc-freeze-after-sync=false", *flags], tmp_path / "serve.log").start()
        started.append((api, proc))
        wait_until("dsan serve /readyz", lambda: http_ok(f"http://127.0.0.1:{port}/readyz"),
                   60, [proc])
        return Served(proc, port)

    yield start
    for api, proc in started:
        proc.stop(sig=signal.SIGKILL)
        api.__exit__()


def test_a_malformed_bound_pod_is_counted_logged_once_and_readiness_comes(serve: Any) -> None:
    """Issue 34, defect 2, end to end: before, this pod's overflowing CPU request raised out
    of the cache, the pods informer relisted every 5 s forever and /readyz never said ok."""
    hog = ko.pod("hog", cpu="1e999999", node_name="node-00000", namespace="team")
    ok = ko.pod("ok", cpu="3", node_name="node-00000")
    sc = serve([hog, ok, {"metadata": ["not", "a", "pod"]}])
    metrics = httpx.get(sc.url + "/metrics", timeout=5).text
    assert 'dsan_sidecar_bad_objects_total{kind="pod"} 2.0' in metrics
    assert sc.log().count("team/hog") == 1 and "requests[cpu]" in sc.log()


def _post_head(port: int, body: bytes) -> socket.socket:
    s = socket.create_connection(("127.0.0.1", port), timeout=10)
    s.sendall(b"POST /dsan/prioritize HTTP/1.1\r\nHost: x\r\nContent-Type: application/json"
              b"\r\nContent-Length: " + str(len(body)).encode() + b"\r\n\r\n")
    return s


def _reply(s: socket.socket) -> bytes:
    out = b""
    while chunk := s.recv(65536):
        out += chunk
    return out


def test_sigterm_drains_requests_in_flight_then_exits_0(serve: Any) -> None:
    sc = serve(None, "--drain-timeout-s=10")
    body = json.dumps({"Pod": ko.pod("p", cpu="1"), "NodeNames": NAMES}).encode()
    # A request in flight: its headers and half of its body are in when SIGTERM comes.
    slow = _post_head(sc.port, body)
    slow.sendall(body[:40])
    time.sleep(0.2)
    os.kill(sc.proc.pid, signal.SIGTERM)
    time.sleep(0.5)
    with pytest.raises(OSError):  # draining: new connections are refused
        socket.create_connection(("127.0.0.1", sc.port), timeout=2).close()
    assert sc.proc.alive()  # still waiting for the request in flight
    slow.sendall(body[40:])
    reply = _reply(slow)
    assert reply.startswith(b"HTTP/1.1 200 OK") and b"Connection: close" in reply
    assert json.loads(reply.split(b"\r\n\r\n", 1)[1])[0]["Host"] == NAMES[0]
    assert sc.proc.popen is not None and sc.proc.popen.wait(10) == 0
    log = sc.log()
    assert "SIGTERM received" in log and "drained in" in log


def test_sighup_is_logged_and_ignored(serve: Any) -> None:
    sc = serve()
    os.kill(sc.proc.pid, signal.SIGHUP)
    wait_until("SIGHUP logged", lambda: "SIGHUP received: ignored" in sc.log(), 10, [sc.proc])
    assert sc.proc.alive() and httpx.get(sc.url + "/healthz", timeout=5).status_code == 200


def test_sigterm_with_nothing_in_flight_exits_at_once(serve: Any) -> None:
    sc = serve()
    with httpx.Client() as c:  # an idle keep-alive connection does not hold the drain up
        assert c.get(sc.url + "/healthz").status_code == 200
        t0 = time.monotonic()
        os.kill(sc.proc.pid, signal.SIGTERM)
        assert sc.proc.popen is not None and sc.proc.popen.wait(10) == 0
    assert time.monotonic() - t0 < 3
