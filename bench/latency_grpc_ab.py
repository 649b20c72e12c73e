"""gRPC server variants side by side, driven by the Go client (what kube-scheduler sees).

    nice -n 10 .venv/bin/python bench/latency_grpc_ab.py [--rounds 500] [--reps 6] \\
        noop@1000:current fgd@1000:poller-settle fgd@1000:current ...

Each variant is ``policy@nodes:server[:names]``; the servers all live in this process (the Go client
runs in its own, so only one of them is busy at a time) and are driven in turn, the order
reversed every repetition, so the shared machine's load falls on all of them alike:

* ``current``: :class:`sidecar.grpc_server.GrpcServer` as the sidecar runs it;
* ``poller-settle``: the session-3 server, a plain thread pool, the post-reply settle as an
  RPC callback on grpcio's poller thread;

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
from concurrent import futures
from pathlib import Path
from typing import Any

import grpc
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from test_score_latency import go_client, go_requests, server_seconds, world

from sidecar.grpc_server import SERVICE_NAME, GrpcServer, NoopScoreHandler, ScoreHandler

KEEP: list[Any] = []  # grpcio stops a server whose object is collected


def poller_settle_server(handler: ScoreHandler | NoopScoreHandler) -> int:
    srv = grpc.server(futures.ThreadPoolExecutor(max_workers=2),
                      options=[("grpc.so_reuseport", 0)])
    methods = {"Score": grpc.unary_unary_rpc_method_handler(handler.score),
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
    if kind == "poller-settle":
        port = poller_settle_server(handler)
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
