"""Before/after in one time window: the sidecar's per-request cost in two source trees.

    git archive <old-commit> | tar -x -C /tmp/old
    for t in /tmp/old . /tmp/old .; do
        nice -n 10 .venv/bin/python bench/latency_ab.py $t > out/ab-$(basename $t)-$RANDOM.json
    done

Each run builds bench/test_score_latency.py's worlds from the given tree (its own code on
``sys.path`` first) and times ``ScoringService.score``, ``ExtenderApp.prioritize`` (no
socket) and the gRPC handler (no socket) over the same rotated candidate lists, 600 calls
each: min and p50 in microseconds, as JSON on stdout. Alternating the trees spreads the
shared machine's load over both; docs/results/latency.md quotes the best of the runs.
"""

from __future__ import annotations

import itertools
import json
import os
import sys
import timeit
from collections.abc import Callable

TREE = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else ".")
sys.path[:0] = [TREE, os.path.join(TREE, "bench")]
os.environ["DSAN_BENCH_POLICIES"] = "fgd,k8s-default"

from test_score_latency import VARIANTS, World, pod  # noqa: E402

from dsan.api.gen.scorer_v1 import scorer_pb2  # noqa: E402
from sidecar.extender import ExtenderApp  # noqa: E402
from sidecar.grpc_server import ScoreHandler  # noqa: E402


def stat(fn: Callable[[], object], rounds: int = 600) -> list[float]:
    for _ in range(20):
        fn()
    ts = sorted(timeit.repeat(fn, number=1, repeat=rounds))
    return [round(ts[0] * 1e6, 1), round(ts[rounds // 2] * 1e6, 1)]


def measure(policy: str, n: int) -> dict[str, list[float]]:
    w = World(n, policy)
    cands = [w.names[k:] + w.names[:k] for k in ((i * 7919) % n for i in range(VARIANTS))]
    calls = itertools.cycle(list(zip([f"bench-uid-{i}" for i in range(VARIANTS)], cands,
                                     strict=True)))

    def score() -> object:
        key, names = next(calls)
        return w.service.score("inprocess", w.spec, key, names, 100)

    bodies = itertools.cycle([json.dumps({"Pod": pod(i), "Nodes": None,
                                          "NodeNames": cands[i]}).encode()
                              for i in range(VARIANTS)])
    reqs = itertools.cycle([scorer_pb2.ScoreRequest(
        pod=scorer_pb2.Pod(name=f"bench-{i}", namespace="default", uid=f"bench-uid-{i}",
                           requests={"cpu": "4", "memory": "16Gi", "nvidia.com/gpu": "1"},
                           annotations={"dsan.io/gpu-milli": "500"}),
        node_names=cands[i]).SerializeToString() for i in range(VARIANTS)])
    app, handler = ExtenderApp(w.service), ScoreHandler(w.service)
    return {"ScoringService.score": stat(score),
            "ExtenderApp.prioritize": stat(lambda: app.prioritize(next(bodies))),
            "gRPC handler": stat(lambda: handler._score(next(reqs)))}


def main() -> int:
    out = {f"{p} {n}": measure(p, n) for p in ("fgd", "k8s-default") for n in (100, 1000, 5000)}
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
