"""One benchmark world served in its own process (``bench/latency.py`` starts one per tree,
policy and size): the sidecar's real HTTP and gRPC servers on loopback, plus a command loop on
stdin/stdout for the in-process rows.

    python bench/latency_server.py --nodes N --policy P      (P = noop: the floor servers)

Prints ``{"http": PORT, "grpc": PORT, "pid": PID}`` once ready, then answers one JSON line per
command: ``inprocess K`` times K calls of ``ScoringService.score`` (the call a server makes
for a request, the assumption deferred), each followed, off the clock, by the settle the
servers run after a reply; answers ``{"ns": [...], "settle_ns": [...]}``. ``filter K`` times
K calls of ``ScoringEngine.filter`` (the filter verb's and gRPC Filter's work: feasibility and
the policy's node quota) for an elastic pod; answers ``{"ns": [...]}``. ``quit`` exits.
Runs against whatever ``dsan``/``sidecar`` packages come first on its path (another checkout
through PYTHONPATH).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(1, str(Path(__file__).resolve().parent))  # bench/world.py beside this file

from world import World, ko


class NoopExtenderApp:
    """The HTTP floor: the same server, parsing and reply encoding, every score 0."""

    def prioritize(self, body: bytes) -> tuple[int, bytes]:
        import numpy as np

        from sidecar.extender import encode_priorities, parse_args

        _, names, _ = parse_args(body)
        return 200, encode_priorities(names, np.zeros(len(names), dtype=np.int64))

    def filter(self, body: bytes) -> tuple[int, bytes]:
        return 404, b"{}"

    def settle(self) -> None:
        return None


class NoopScoreHandler:
    """The gRPC floor: decode, reply zeros, same server and encoding; serves a node table of
    ``names`` (epoch 1) so clients can send rows to it as to the real service."""

    def __init__(self, names: list[str]) -> None:
        from dsan.api.gen.scorer_v1 import scorer_pb2

        self.pb = scorer_pb2
        self.table = scorer_pb2.NodeTableResponse(epoch=1, node_names=names).SerializeToString()

    def node_table(self, raw: bytes, context: Any) -> bytes:
        return self.table

    def score(self, raw: bytes, context: Any) -> bytes:
        import numpy as np

        from sidecar.grpc_server import candidates, encode_scores

        req = self.pb.ScoreRequest.FromString(raw)
        m = len(req.node_names) or len(candidates(req))
        return encode_scores(np.zeros(m, dtype=np.int64)) + self.pb.ScoreResponse(
            policy="noop", node_table_epoch=1).SerializeToString()

    def reclaim(self, raw: bytes, context: Any) -> bytes:
        return self.pb.ReclaimResponse(reclaimer="noop").SerializeToString()

    def filter(self, raw: bytes, context: Any) -> bytes:
        return self.pb.FilterResponse(policy="noop").SerializeToString()


def noop_servers(n: int) -> tuple[Any, Any]:
    """The floor: the same servers, parsing and reply encoding, every score 0."""
    from sidecar.extender import ExtenderServer
    from sidecar.grpc_server import GrpcServer

    names = [nd["metadata"]["name"] for nd in ko.cluster(n)]
    http = ExtenderServer("127.0.0.1", 0, "/dsan", NoopExtenderApp(), 8 << 20)
    http.start()
    grpc_srv = GrpcServer("127.0.0.1", 0, NoopScoreHandler(names))
    grpc_srv.start()
    return http, grpc_srv  # held: a collected grpcio server stops serving


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--nodes", type=int, required=True)
    ap.add_argument("--policy", required=True)
    args = ap.parse_args()
    import os

    from threadpoolctl import threadpool_limits

    threadpool_limits(1)  # as the sidecar's blas_threads
    world = None
    if args.policy == "noop":
        noop = noop_servers(args.nodes)
        http_port, grpc_port = noop[0].port, noop[1].port
    else:
        world = World(args.nodes, args.policy)
        http_port = world.sidecar.http.port
        assert world.sidecar.grpc is not None
        grpc_port = world.sidecar.grpc.port
    print(json.dumps({"http": http_port, "grpc": grpc_port, "pid": os.getpid()}), flush=True)
    reqs = None if world is None else world.requests()
    for line in sys.stdin:
        cmd = line.split()
        if not cmd or cmd[0] == "quit":
            break
        if cmd[0] == "inprocess" and world is not None and reqs is not None:
            k = int(cmd[1])
            svc, spec = world.service, world.spec
            ns, settle_ns = [], []
            for _ in range(k):
                key, names = next(reqs)
                t0 = time.perf_counter_ns()
                svc.score("inprocess", spec, key, names, 100)
                t1 = time.perf_counter_ns()
                svc.settle()
                ns.append(t1 - t0)
                settle_ns.append(time.perf_counter_ns() - t1)
            print(json.dumps({"ns": ns, "settle_ns": settle_ns}), flush=True)
        elif cmd[0] == "filter" and world is not None and reqs is not None:
            # An elastic Spark executor: the pod DSAN's quota (ls_headroom) is about.
            from sidecar.podspec import podspec_from_pod

            elastic = ko.pod("bench-elastic", cpu="4", memory="16Gi", annotations={
                "dsan.io/elastic": "true", "dsan.io/task-type": "batch"})
            spec = podspec_from_pod(elastic, world.sidecar.cache.models)
            ns = []
            for _ in range(int(cmd[1])):
                _, names = next(reqs)
                t0 = time.perf_counter_ns()
                world.service.engine.filter(spec, names)
                ns.append(time.perf_counter_ns() - t0)
            print(json.dumps({"ns": ns}), flush=True)
        else:
            print(json.dumps({"error": f"unknown command {line.strip()!r}"}), flush=True)
    if world is not None:
        world.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
