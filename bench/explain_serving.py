"""What explanations cost the sidecar's scoring: extender latency with and without /explain
requests running, the scoring lock an explanation holds, its CPU time, and the cost of
remembering each decision on the request path.

    .venv/bin/python -m bench.explain_serving --nodes 1000 --out docs/results/explain_serving.md

The sidecar serves DSAN over the latency benchmarks' world (``bench/world.py``: ``--nodes``
nodes, half with 8 GPUs and live telemetry, about half their capacity bound) in a process of
its own; this process sends prioritize requests over ``--candidates`` names back to back on
one keep-alive connection (the pods pending for the dsan-scheduler, so each is assumed and
remembered, as in a cluster), in rounds that alternate between "alone" and "while a second
client asks GET /explain for a scored pod in a loop". Reported: client-side latency
percentiles per condition, and from the explanations' own ``cost`` field the scoring-lock
hold time and the CPU time of each.
"""

from __future__ import annotations

import argparse
import http.client
import json
import multiprocessing
import statistics
import sys
import threading
import time
import timeit
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run as a script: repo importable


def serve(n: int, port_out: Any, stop: Any) -> None:
    """The child: a DSAN sidecar over the world, until ``stop`` is set."""
    from bench.world import World

    w = World(n, "dsan")
    port_out.send(w.sidecar.http.port)
    stop.wait()
    w.stop()


def pct(xs: list[float], q: float) -> float:
    s = sorted(xs)
    return s[min(len(s) - 1, int(q * len(s)))]


def remember_cost() -> float:
    """Seconds per Decisions.remember call (the request path's part of this feature)."""
    import numpy as np

    from dsan.core.snapshot import PodSpec
    from sidecar.decisions import Decisions
    from sidecar.scoring import ScoreResult

    m = 420
    res = ScoreResult(np.zeros(m, np.int64), 0, "n", 0, 0, 0.0, 0.0, 0, 0,
                      np.arange(m), [f"n{i}" for i in range(m)], None)
    d = Decisions(512)
    specs = [PodSpec(f"default/p{i}", 1000, 1024) for i in range(1024)]
    it = iter(range(10**9))
    number = 200_000
    t = timeit.timeit(lambda: d.remember(specs[next(it) % 1024], "k", res, 10, "dsan@v",
                                         "fgd"), number=number)
    return t / number


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nodes", type=int, default=1000)
    ap.add_argument("--candidates", type=int, default=420)
    ap.add_argument("--requests", type=int, default=500, help="requests per round")
    ap.add_argument("--rounds", type=int, default=6, help="rounds (alone / with, alternating)")
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args()

    from tests.support import kubeobjects as ko

    parent, child = multiprocessing.Pipe()
    stop = multiprocessing.Event()
    proc = multiprocessing.Process(target=serve, args=(args.nodes, child, stop), daemon=True)
    proc.start()
    port = parent.recv()
    names = [f"node-{i:05d}" for i in range(args.nodes)]
    bodies = []
    for i in range(32):
        k = (i * 7919) % args.nodes
        pod = ko.pod(f"bench-{i}", cpu="4", memory="16Gi", gpus=1, uid=f"bench-uid-{i}",
                     annotations={"dsan.io/gpu-milli": "500"})
        bodies.append(json.dumps({"Pod": pod, "Nodes": None, "NodeNames": (
            names[k:] + names[:k])[: args.candidates]}).encode())
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)

    def prioritize(body: bytes) -> float:
        t0 = time.perf_counter()
        conn.request("POST", "/dsan/prioritize", body, {"Content-Type": "application/json"})
        r = conn.getresponse()
        r.read()
        assert r.status == 200, r.status
        return time.perf_counter() - t0

    for b in bodies * 3:  # warm: every class and candidate set once, every pod remembered
        prioritize(b)

    costs: list[dict[str, float]] = []
    busy = threading.Event()
    done = threading.Event()

    def explain_loop() -> None:
        c = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
        while not done.is_set():
            if not busy.wait(0.05):
                continue
            t0 = time.perf_counter()
            c.request("GET", "/explain/default/bench-0")
            r = c.getresponse()
            doc = json.loads(r.read())
            if r.status == 200:
                costs.append({**doc["cost"], "wall_s": time.perf_counter() - t0})

    th = threading.Thread(target=explain_loop, daemon=True)
    th.start()
    lat: dict[str, list[float]] = {"alone": [], "with /explain running": []}
    for rnd in range(args.rounds):
        key = "alone" if rnd % 2 == 0 else "with /explain running"
        (busy.set if rnd % 2 else busy.clear)()
        time.sleep(0.2)
        lat[key] += [prioritize(bodies[i % 32]) for i in range(args.requests)]
    busy.clear()
    done.set()
    th.join(60)
    conn.close()
    stop.set()
    proc.join(10)
    per_call = remember_cost()

    lines = [
        "# /explain and the scoring path",
        "",
        f"GENERATED by `python -m bench.explain_serving --nodes {args.nodes} --candidates "
        f"{args.candidates} --requests {args.requests} --rounds {args.rounds}`: DSAN over "
        f"{args.nodes} nodes (bench/world.py), {args.candidates} candidates per prioritize, "
        "one keep-alive client, the sidecar in its own process, shared 2-core machine. "
        "Rounds alternate; latencies are client-side (request to last byte).",
        "",
        "| condition | requests | p50 (ms) | p90 (ms) | p99 (ms) | max (ms) |",
        "|---|---|---|---|---|---|",
    ]
    for key, xs in lat.items():
        lines.append(f"| {key} | {len(xs)} | {pct(xs, 0.5) * 1e3:.2f} | "
                     f"{pct(xs, 0.9) * 1e3:.2f} | {pct(xs, 0.99) * 1e3:.2f} | "
                     f"{max(xs) * 1e3:.2f} |")
    if costs:
        lk = [c["lock_s"] for c in costs]
        cpu = [c["cpu_s"] for c in costs]
        wall = [c["wall_s"] for c in costs]
        lines += [
            "",
            f"Explanations computed: {len(costs)} (background 32, 8 antithetic pairs). "
            f"Scoring lock held: median {statistics.median(lk) * 1e3:.2f} ms, max "
            f"{max(lk) * 1e3:.2f} ms; CPU time: median {statistics.median(cpu) * 1e3:.0f} ms, "
            f"max {max(cpu) * 1e3:.0f} ms; wall: median {statistics.median(wall) * 1e3:.0f} ms.",
        ]
    lines += ["", f"Remembering a decision on the request path (`Decisions.remember`, "
              f"timeit of 200,000 calls): {per_call * 1e6:.2f} us per request."]
    text = "\n".join(lines) + "\n"
    print(text)
    if args.out:
        args.out.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
