"""DSAN's (or another policy's) per-request work in two source trees, in CPU time as well
as wall time.

    git worktree add /tmp/old <old-commit>
    for t in /tmp/old . /tmp/old . /tmp/old .; do
        nice -n 10 .venv/bin/python bench/latency_dsan_ab.py $t >> out/dsan-ab.jsonl
    done
    .venv/bin/python bench/latency_dsan_ab.py --report out/dsan-ab.jsonl

Each run builds bench/test_score_latency.py's DSAN worlds from the given tree (its own code
first on ``sys.path``) for the sizes in ``$DSAN_BENCH_SIZES`` (default 100,1000) and serves
the same requests back to back, 1,000 times after 200 warm-up calls: the gRPC handler on
node-table rows (what the DSANScore plugin sends; no socket), then the post-reply settle,
as the server runs them. ``DSAN_AB_API=inprocess`` replies with ``ScoringService.score`` on
the candidate names instead (the in-process rows of latency.md, assumption deferred), and
first times latency.md's in-process floor (names -> rows, gather, dot, argmax) on the same
lists, back to back as pytest-benchmark does, so every run has its own floor.
``DSAN_AB_POLICY`` serves another policy than ``dsan`` (``fgd``, ``k8s-default``). Per
step it records the wall time and the thread's CPU time (``time.thread_time_ns``): on this
shared 2-core machine the wall time of a step swings with other processes' load
(preemption), its CPU time much less, so the CPU-time median is what separates two trees,
the wall times show what a client saw in that run. One JSON line per run (with the 1-minute
load average); ``--report`` prints, per tree, the median over runs of each statistic.
"""

from __future__ import annotations

import itertools
import json
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path
from statistics import median

ROUNDS = 1000
WARMUP = 200


def _stats(wall: list[int], cpu: list[int]) -> dict[str, float]:
    wall, cpu = sorted(wall), sorted(cpu)
    n = len(wall)
    return {"wall_min": wall[0] / 1e3, "wall_p50": wall[n // 2] / 1e3,
            "wall_p90": wall[int(n * 0.9)] / 1e3, "wall_p99": wall[int(n * 0.99)] / 1e3,
            "cpu_min": cpu[0] / 1e3, "cpu_p50": cpu[n // 2] / 1e3,
            "cpu_p90": cpu[int(n * 0.9)] / 1e3, "cpu_p99": cpu[int(n * 0.99)] / 1e3}


def measure(n: int, policy: str) -> dict[str, dict[str, float]]:
    import numpy as np
    from test_score_latency import VARIANTS, World

    from dsan.api.gen.scorer_v1 import scorer_pb2
    from sidecar.grpc_server import ScoreHandler

    w = World(n, policy)
    svc = w.service
    table = svc.cache.snapshot()
    reqs = []
    for i in range(VARIANTS):
        rows = np.fromiter(map(table.index.__getitem__, w.cands[i]), dtype="<u4",
                           count=len(w.cands[i])).tobytes()
        reqs.append(scorer_pb2.ScoreRequest(
            pod=scorer_pb2.Pod(name=f"bench-{i}", namespace="default", uid=f"bench-uid-{i}",
                               requests={"cpu": "4", "memory": "16Gi", "nvidia.com/gpu": "1"},
                               annotations={"dsan.io/gpu-milli": "500"}),
            node_indices=rows, node_table_epoch=table.table_epoch).SerializeToString())
    calls = itertools.cycle(reqs)
    handler = ScoreHandler(svc)
    floor_stats: dict[str, dict[str, float]] = {}
    named = itertools.cycle([(f"bench-uid-{i}", w.cands[i]) for i in range(VARIANTS)])
    steps: dict[str, Callable[[], object]] = {
        "reply": lambda: handler._score(next(calls)),
        "settle": svc.settle,
    }
    if os.environ.get("DSAN_AB_API") == "inprocess":
        lists = itertools.cycle(w.cands)

        def floor() -> int:  # test_score_latency's lookup+dot floor
            names = next(lists)
            rows = np.fromiter(map(w.index.get, names, itertools.repeat(-1)), dtype=np.int64,
                               count=len(names))
            return int(np.argmax(w.vectors[rows] @ w.pod_vec))

        fw, fc = [], []
        for i in range(WARMUP + ROUNDS):
            t0, c0 = time.perf_counter_ns(), time.thread_time_ns()
            floor()
            c1, t1 = time.thread_time_ns(), time.perf_counter_ns()
            if i >= WARMUP:
                fw.append(t1 - t0)
                fc.append(c1 - c0)
        floor_stats = {"floor": _stats(fw, fc)}
        steps["reply"] = lambda: svc.score("inprocess", w.spec, *next(named), 100, defer=True)
    wall: dict[str, list[int]] = {k: [] for k in [*steps, "reply + settle"]}
    cpu: dict[str, list[int]] = {k: [] for k in wall}
    for i in range(WARMUP + ROUNDS):
        dw = dc = 0
        for name, fn in steps.items():
            t0, c0 = time.perf_counter_ns(), time.thread_time_ns()
            fn()
            c1, t1 = time.thread_time_ns(), time.perf_counter_ns()
            if i >= WARMUP:
                wall[name].append(t1 - t0)
                cpu[name].append(c1 - c0)
                dw, dc = dw + t1 - t0, dc + c1 - c0
        if i >= WARMUP:
            wall["reply + settle"].append(dw)
            cpu["reply + settle"].append(dc)
    return {**floor_stats, **{k: _stats(wall[k], cpu[k]) for k in wall}}


def report(path: str) -> int:
    runs: dict[str, list[dict[str, object]]] = {}
    for line in Path(path).read_text(encoding="utf-8").splitlines():
        if line.strip():
            r = json.loads(line)
            runs.setdefault(f"{r['tree']} {r.get('policy', 'dsan')}", []).append(r)
    for tree, rs in runs.items():
        print(f"{tree}: {len(rs)} runs, load {[round(float(r['load']), 1) for r in rs]}")  # type: ignore[arg-type]
        for world in rs[0]["worlds"]:  # type: ignore[union-attr]
            for step in rs[0]["worlds"][world]:  # type: ignore[index]
                stat = {k: median(r["worlds"][world][step][k] for r in rs)  # type: ignore[index]
                        for k in rs[0]["worlds"][world][step]}  # type: ignore[index]
                print(f"  {world:>5} nodes {step:15s} " + " ".join(
                    f"{k} {v:7.1f}" for k, v in stat.items()))
    return 0


def main(argv: list[str]) -> int:
    if argv[:1] == ["--report"]:
        return report(argv[1])
    tree = os.path.abspath(argv[0] if argv else ".")
    sys.path[:0] = [tree, os.path.join(tree, "bench")]
    sizes = [int(s) for s in os.environ.get("DSAN_BENCH_SIZES", "100,1000").split(",")]
    policy = os.environ.get("DSAN_AB_POLICY", "dsan")
    out = {"tree": tree, "api": os.environ.get("DSAN_AB_API", "grpc"), "policy": policy,
           "load": os.getloadavg()[0],
           "utc": time.strftime("%H:%M:%S", time.gmtime()),
           "worlds": {str(n): measure(n, policy) for n in sizes}}
    print(json.dumps(out), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
