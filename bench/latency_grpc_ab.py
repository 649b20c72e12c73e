"""gRPC server variants side by side, driven by the Go client (what kube-scheduler sees).

    nice -n 10 .venv/bin/python bench/latency_grpc_ab.py [--rounds 500] [--reps 6] \\
        noop@1000:current fgd@1000:current:names fgd@1000:current fgd@1000:worker-settle ...

Each variant is ``policy@nodes:server[:names]``; the servers all live in this process (the
Go client runs in its own, so only one of them is busy at a time) and are driven in turn, the order
reversed every repetition, so the shared machine's load falls on all of them alike:

* ``current``: :class:`sidecar.grpc_server.GrpcServer` as the sidecar runs it (the
  post-reply settle as an RPC-done callback on grpcio's poller thread);
* ``worker-settle``: the settle in the worker thread that served the RPC, right after
  grpcio's per-RPC callable returned (the reply batch started): tried in session 4 and
  kept out, it measured no faster (slower under load: the worker's settle and the poller
  dispatching the next call contend for the GIL);
* ``next-settle``: no post-reply settle at all, the next request applies the assumption
  first (what a delayed settle would do back to back): no faster either (fgd 684 vs 693 us
  p50, dsan 1,118 vs 1,062 in one run), so the settle stays right after the reply, which
  also keeps it out of the way of a paced caller;

and ``:names`` makes the Go client send node names (``scorebench -names``, the session-3
request) instead of node-table indices (pkg/scoreclient, what the DSANScore plugin sends).

Requests are bench/test_score_latency.py's (same worlds, pods and rotated candidate lists,
back to back). Prints per repetition and pooled p50 / p90 / p99 in microseconds with the
1-minute load average, and the pooled numbers as JSON on the last line.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import threading
from collections.abc import Callable
from concurrent import futures
from pathlib import Path
from typing import Any

import grpc
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from test_score_latency import go_client, go_requests, server_seconds, world

from sidecar.grpc_server import SERVICE_NAME, GrpcServer, NoopScoreHandler, ScoreHandler

KEEP: list[Any] = []  # grpcio stops a server whose object is collected


class AfterReplyExecutor(futures.ThreadPoolExecutor):
    """Runs work a handler queued with :meth:`after_reply` in the same worker once grpcio's
    per-RPC callable returned (for a unary call it has then started the reply batch)."""

    def __init__(self, max_workers: int) -> None:
        super().__init__(max_workers=max_workers)
        self._local = threading.local()

    def after_reply(self, fn: Callable[[], object]) -> None:
        self._local.post.append(fn)

    def submit(self, fn: Callable[..., Any], /, *args: Any,
               **kwargs: Any) -> futures.Future[Any]:
        return super().submit(self._run, fn, args, kwargs)

    def _run(self, fn: Callable[..., Any], args: tuple[Any, ...],
             kwargs: dict[str, Any]) -> Any:
        self._local.post = []
        try:
            return fn(*args, **kwargs)
        finally:
            for job in self._local.post:
                job()


def worker_settle_server(handler: ScoreHandler | NoopScoreHandler, post: bool = True) -> int:
    pool = AfterReplyExecutor(2)
    score: Callable[[bytes, Any], bytes] = handler.score
    if isinstance(handler, ScoreHandler):
        class _Context:  # add_callback -> after the reply, in this worker
            def __init__(self, ctx: grpc.ServicerContext) -> None:
                self.ctx = ctx

            def add_callback(self, fn: Callable[[], object]) -> bool:
                if post:
                    pool.after_reply(fn)
                return True  # not post: the next request applies the assumption first

            def abort(self, code: grpc.StatusCode, details: str) -> None:
                self.ctx.abort(code, details)

        def settle_in_worker(raw: bytes, ctx: Any) -> bytes:
            return handler.score(raw, _Context(ctx))

        score = settle_in_worker

    srv = grpc.server(pool, options=[("grpc.so_reuseport", 0)])
    methods = {"Score": grpc.unary_unary_rpc_method_handler(score),
               "NodeTable": grpc.unary_unary_rpc_method_handler(handler.node_table)}
    srv.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(SERVICE_NAME, methods),))
    port = srv.add_insecure_port("127.0.0.1:0")
    srv.start()
    KEEP.append(srv)
    return port


def start(variant: str) -> tuple[int, bytes]:
    what, _, kind = variant.partition(":")
    kind = kind.removesuffix(":names")
    policy, _, n = what.partition("@")
    w = world(int(n or 1000), policy if policy != "noop" else "fgd")
    handler = NoopScoreHandler(w.names) if policy == "noop" else ScoreHandler(w.service)
    if kind == "worker-settle":
        port = worker_settle_server(handler)
    elif kind == "next-settle":
        port = worker_settle_server(handler, post=False)
    elif kind == "current":
        srv = GrpcServer("127.0.0.1", 0, handler, workers=2)  # as the benchmark runs it
        srv.start()
        KEEP.append(srv)
        port = srv.port
    else:
        raise SystemExit(f"unknown server variant {kind!r}")
    return port, go_requests(w, "grpc")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("variants", nargs="+")
    ap.add_argument("--rounds", type=int, default=500)
    ap.add_argument("--reps", type=int, default=6)
    a = ap.parse_args()
    exe = go_client()
    servers = {v: start(v) for v in a.variants}
    got: dict[str, list[np.ndarray]] = {v: [] for v in a.variants}
    # The server's own mean time inside the handler and in the post-reply settle.
    inside: dict[str, list[tuple[float, float]]] = {v: [] for v in a.variants}
    for rep in range(a.reps):
        for v in a.variants if rep % 2 == 0 else a.variants[::-1]:
            port, stdin = servers[v]
            what = v.partition(":")[0]
            policy, _, n = what.partition("@")
            before = server_seconds(int(n or 1000), policy, "grpc")
            by_name = ["-names"] if v.endswith(":names") else []
            out = subprocess.run([str(exe), "-kind", "grpc", "-addr", f"127.0.0.1:{port}",
                                  "-rounds", str(a.rounds), *by_name],
                                 input=stdin, capture_output=True)
            if out.returncode:
                raise SystemExit(f"{v}: {out.stderr.decode()[-500:]}")
            us = np.array(json.loads(out.stdout)["ns"], dtype=np.float64) / 1e3
            got[v].append(us)
            after = server_seconds(int(n or 1000), policy, "grpc")
            calls = max(after[1] - before[1], 1)
            settles = max(after[3] - before[3], 1)
            inside[v].append(((after[0] - before[0]) / calls * 1e6,
                              (after[2] - before[2]) / settles * 1e6))
            print(f"rep {rep} {v:28s} p50 {np.percentile(us, 50):6.0f} "
                  f"p99 {np.percentile(us, 99):6.0f}  server {inside[v][-1][0]:5.0f} "
                  f"settle {inside[v][-1][1]:5.0f}  load {os.getloadavg()[0]:.2f}", flush=True)
    pooled = {}
    for v in a.variants:
        us = np.concatenate(got[v])
        pooled[v] = {q: round(float(np.percentile(us, int(q[1:]))), 1)
                     for q in ("p50", "p90", "p99")}
        pooled[v]["server_mean"] = round(float(np.mean([s for s, _ in inside[v]])), 1)
        pooled[v]["settle_mean"] = round(float(np.mean([s for _, s in inside[v]])), 1)
        print(f"all {v:28s} " + " ".join(f"{q} {x:6.0f}" for q, x in pooled[v].items()))
    print(json.dumps({"loadavg_1m": os.getloadavg()[0], "us": pooled}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
