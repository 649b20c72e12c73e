"""The sidecar's CPU per scheduled pod as a cluster sends them, side by side with another
checkout of this repository.

    .venv/bin/python bench/per_pod_cost.py [--base ../other-checkout ...] [--pods 1000]

Unlike ``bench/latency.py`` (the same 32 pods re-assumed, candidate lists that are rotations
of every node), every request here is a new pod pending for the dsan-scheduler (1 in 4 asks
for a GPU), charged where it scored best, and its candidates are 420 of the 1,000 nodes from
a random start: what kube-scheduler's adaptive ``percentageOfNodesToScore`` sends an extender
at 1,000 nodes. So each placement leaves a node in a state not seen before, and each request's
candidate set has its own extremes. Timed: ``ExtenderApp.prioritize`` (JSON in, scores out)
and the settle after it (the assumption and the scorer's preparation), per policy and tree.

Every tree serves the stream in ``--rounds`` processes of its own (default 2), all pinned to
the last CPU and taking turns 50 requests at a time, so load that comes and goes on a shared
machine falls on every tree alike. ``prioritize p50`` is wall time; the means (prioritize,
settle, their sum per pod) are the serving thread's CPU time, without the time it waited for
the CPU.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
WARMUP = 200
CHUNK = 50  # requests per turn


def serve_chunks(policy: str, pods: int, candidates: int) -> None:
    """Child: build the world and the stream, warm up, then for each line ``k`` on stdin
    serve the next ``k`` requests and print, per request, [prioritize wall, settle wall,
    prioritize CPU, settle CPU] in seconds. Runs in the tree on ``sys.path``; the world is
    bench/world.py's."""
    import numpy as np

    sys.path.insert(0, str(ROOT / "bench"))
    from world import World, ko

    from sidecar.extender import ExtenderApp

    w = World(1000, policy)
    app = ExtenderApp(w.service)
    rng = np.random.default_rng(0)
    bodies = []
    for i in range(pods + WARMUP):
        p = ko.pod(f"new-{i}", cpu="1", memory="2Gi", gpus=int(i % 4 == 0), uid=f"new-{i}")
        w.sidecar.cache.upsert_pod(p)
        start = int(rng.integers(len(w.names)))
        cand = (w.names[start:] + w.names[:start])[:candidates]
        bodies.append(json.dumps({"Pod": p, "Nodes": None, "NodeNames": cand}).encode())
    for body in bodies[:WARMUP]:
        assert app.prioritize(body)[0] == 200
        app.settle()
    print("ready", flush=True)
    at = WARMUP
    wall, cpu = time.perf_counter, time.thread_time
    for line in sys.stdin:
        out = []
        for body in bodies[at : at + int(line)]:
            t0, c0 = wall(), cpu()
            status, _ = app.prioritize(body)
            t1, c1 = wall(), cpu()
            app.settle()
            t2, c2 = wall(), cpu()
            assert status == 200
            out.append([t1 - t0, t2 - t1, c1 - c0, c2 - c1])
        at += int(line)
        print(json.dumps(out), flush=True)
    w.stop()


def measure(trees: dict[str, Path], policy: str, args: argparse.Namespace
            ) -> dict[str, dict[str, float]]:
    """Every tree's stream in ``args.rounds`` processes of its own, all pinned to the last
    CPU, taking turns chunk by chunk (the order reversed every other chunk): load that comes
    and goes on a shared machine falls on every tree alike."""
    cmd = [sys.executable, str(Path(__file__).resolve()), "--child", policy,
           "--pods", str(args.pods), "--candidates", str(args.candidates)]
    procs = []
    logs = []  # each child's stderr, shown only if it fails
    for _ in range(args.rounds):
        for label, tree in trees.items():
            logs.append(tempfile.TemporaryFile(mode="w+"))  # noqa: SIM115 (closed below)
            proc = subprocess.Popen(
                cmd, env={**os.environ, "PYTHONPATH": str(tree)}, cwd=tree, text=True,
                stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=logs[-1],
                preexec_fn=lambda: os.sched_setaffinity(0, {(os.cpu_count() or 1) - 1}))
            procs.append((label, proc))
    rows: dict[str, list[list[float]]] = {label: [] for label in trees}
    try:
        for (label, proc), log in zip(procs, logs, strict=True):
            assert proc.stdin is not None and proc.stdout is not None
            if proc.stdout.readline().strip() != "ready":
                log.seek(0)
                raise RuntimeError(f"{label}: {cmd} did not start:\n{log.read()[-4000:]}")
        for k in range(-(-args.pods // CHUNK)):
            n = min(CHUNK, args.pods - k * CHUNK)
            for label, proc in (procs if k % 2 == 0 else procs[::-1]):
                assert proc.stdin is not None and proc.stdout is not None
                proc.stdin.write(f"{n}\n")
                proc.stdin.flush()
                rows[label] += json.loads(proc.stdout.readline())
    finally:
        for _, proc in procs:
            if proc.stdin is not None:
                proc.stdin.close()
            proc.wait()
        for log in logs:
            log.close()
    out = {}
    for label, r in rows.items():
        score = [x[0] for x in r]
        score_cpu = statistics.fmean(x[2] for x in r)
        settle_cpu = statistics.fmean(x[3] for x in r)
        out[label] = {"score_p50": statistics.median(score), "score_mean": score_cpu,
                      "settle_mean": settle_cpu, "per_pod": score_cpu + settle_cpu}
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--base", type=Path, action="append", default=[],
                    help="another checkout (repeat for several; rows labelled by directory)")
    ap.add_argument("--policies", default="dsan,fgd,k8s-default")
    ap.add_argument("--pods", type=int, default=1000)
    ap.add_argument("--candidates", type=int, default=420)
    ap.add_argument("--rounds", type=int, default=2,
                    help="processes per tree (each its own stream), all taking turns")
    ap.add_argument("--child", default=None, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child:
        serve_chunks(args.child, args.pods, args.candidates)
        return 0
    bases = [b.resolve() for b in args.base]
    trees = {"new": ROOT, **({"base": bases[0]} if len(bases) == 1
                             else {f"base:{b.name}": b for b in bases})}
    print("| policy | tree | prioritize p50 (us) | prioritize mean | settle mean | per pod |")
    print("|---|---|---|---|---|---|")
    for policy in args.policies.split(","):
        for label, r in measure(trees, policy, args).items():
            print(f"| {policy} | {label} | {r['score_p50'] * 1e6:,.0f} | "
                  f"{r['score_mean'] * 1e6:,.0f} | {r['settle_mean'] * 1e6:,.0f} | "
                  f"{r['per_pod'] * 1e6:,.0f} |", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
