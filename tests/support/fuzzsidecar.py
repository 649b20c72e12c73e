"""A whole sidecar in a process of its own, for the fuzz suite
(tests/integration/sidecar/test_fuzz.py): 10 nodes on a fake cluster view, real HTTP and
gRPC servers, every request's CPU time measured on the thread that serves it.

Its own process, like `dsan serve`: the test runner's heap (Hypothesis keeps every example
it generated) would otherwise be the sidecar's too, and its collector pauses of hundreds of
milliseconds would be charged to whichever request or /healthz probe met them. Here, as in
`dsan serve` once synced (``gc_freeze_after_sync``), the start-up heap is frozen out of the
collector. The test drives it through a pipe: cluster objects to apply, meter readings.
A /healthz prober runs in a third process (:func:`probe_healthz`), so that what it measures
is the sidecar's answer time, not the test runner's.
"""

from __future__ import annotations

import gc
import http.client
import threading
import time
from collections.abc import Callable
from multiprocessing.connection import Connection
from typing import Any

NAMES = [f"node-{i:05d}" for i in range(10)]


class Meter:
    """The largest CPU time (of the serving thread) any one request took, and how many."""

    def __init__(self) -> None:
        self.cpu_max = 0.0
        self.worst = ""
        self.requests = 0
        self._lock = threading.Lock()

    def wrap(self, fn: Callable[..., Any], label: str) -> Callable[..., Any]:
        def measured(*a: Any, **k: Any) -> Any:
            t0 = time.thread_time()
            try:
                return fn(*a, **k)
            finally:
                dt = time.thread_time() - t0
                with self._lock:
                    self.requests += 1
                    if dt > self.cpu_max:
                        self.cpu_max, self.worst = dt, label
        return measured


def serve(conn: Connection, pending_uids: list[str], healthz_thread: Any) -> None:
    """The child process: start the sidecar, send its ports, then answer commands:
    ``("apply", [(resource, event, obj), ...])`` -> per object (bad objects counted by it,
    its name in the node table), ``("meter",)`` -> the meter's readings, ``("stop",)``."""
    from sidecar import extender, grpc_server
    from sidecar.app import Sidecar, load_policies
    from sidecar.config import SidecarConfig
    from tests.support import kubeobjects as ko
    from tests.support.fakes import FakeClusterView

    meter = Meter()
    # Measured where each request is served: the HTTP handler's methods and the gRPC
    # servicer's (bound when the server is built, so patched first).
    for name in ("do_POST", "do_GET", "_not_allowed"):
        setattr(extender._Handler, name, meter.wrap(getattr(extender._Handler, name),
                                                    f"http {name}"))
    do_get = extender._Handler.do_GET

    def do_get_noting_the_thread(self: Any) -> None:
        if self.path == "/healthz":
            healthz_thread.value = threading.get_native_id()
        do_get(self)

    extender._Handler.do_GET = do_get_noting_the_thread  # type: ignore[method-assign]
    for name in ("score", "node_table"):
        setattr(grpc_server.ScoreHandler, name,
                meter.wrap(getattr(grpc_server.ScoreHandler, name), f"grpc {name}"))
    cfg = SidecarConfig(http_port=0, grpc_port=0, policy="fgd", max_body_bytes=65536,
                        max_grpc_message_bytes=65536)
    views: list[FakeClusterView] = []

    def factory(cache: Any) -> FakeClusterView:
        views.append(FakeClusterView(cache, nodes=ko.cluster(10),
                                     pods=[ko.pod("p", uid=u) for u in pending_uids]))
        return views[0]

    sc = Sidecar(cfg, view_factory=factory, policies=load_policies(cfg))
    sc.start()
    assert sc.wait_ready(10)  # and gc.freeze(), as in dsan serve (gc_freeze_after_sync)
    view, cache = views[0], sc.cache
    conn.send((sc.http.port, sc.grpc_target))
    try:
        while True:
            cmd = conn.recv()
            if cmd[0] == "apply":
                out = []
                for resource, event, obj in cmd[1]:
                    before = sum(cache.bad_objects.values())
                    try:
                        view.apply(resource, event, obj)
                        raised = ""
                    except Exception as exc:  # reported to the test, which fails on it
                        raised = repr(exc)
                    bad = sum(cache.bad_objects.values()) - before
                    pub = cache.snapshot()
                    name = obj.get("metadata", {}).get("name") if isinstance(obj, dict) and \
                        isinstance(obj.get("metadata"), dict) else None
                    out.append((raised, bad, isinstance(name, str) and name in pub.index,
                                set(NAMES) <= set(pub.index)))
                conn.send(out)
            elif cmd[0] == "meter":
                conn.send({"cpu_max": meter.cpu_max, "worst": meter.worst,
                           "requests": meter.requests, "synced": view.synced(),
                           "bad_objects": dict(cache.bad_objects)})
            else:
                break
    finally:
        sc.stop()
        gc.unfreeze()


def _run_delay(path: str = "/proc/self/schedstat") -> float:
    """Seconds a process (or thread: /proc/PID/task/TID/schedstat) has spent runnable but
    waiting for a CPU (Linux schedstat; 0 where there is none)."""
    try:
        with open(path) as f:
            return int(f.read().split()[1]) / 1e9
    except (OSError, IndexError, ValueError):
        return 0.0


def probe_healthz(conn: Connection, port: int, sidecar_pid: int, healthz_thread: Any,
                  interval: float = 0.01) -> None:
    """The prober process: GET /healthz on one keep-alive connection every ``interval``;
    on "read" sends (probes, slowest answer in seconds, non-200 answers) so far, on "stop"
    sends them and ends. An answer's time leaves out what the machine, not the sidecar,
    made it wait: the time the prober and the sidecar's thread serving /healthz (one thread:
    one connection) were runnable but waited for a CPU. Time that thread waited for the
    sidecar's GIL still counts (it sleeps on a lock then, it does not wait for a CPU)."""
    client = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    probes, slowest, failed = 0, 0.0, 0
    while True:
        if conn.poll(interval):
            msg = conn.recv()
            conn.send((probes, slowest, failed))
            if msg == "stop":
                return
        server = f"/proc/{sidecar_pid}/task/{healthz_thread.value}/schedstat"
        waited = _run_delay() + _run_delay(server)
        t0 = time.perf_counter()
        client.request("GET", "/healthz")
        resp = client.getresponse()
        resp.read()
        took = time.perf_counter() - t0
        if healthz_thread.value:  # known from the first probe on
            took -= _run_delay() + _run_delay(server) - waited
        slowest = max(slowest, took)
        probes += 1
        failed += resp.status != 200
