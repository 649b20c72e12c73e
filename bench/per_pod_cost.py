"""The sidecar's CPU per scheduled pod as a cluster sends them, side by side with another
checkout of this repository.

    .venv/bin/python bench/per_pod_cost.py [--base ../other-checkout] [--pods 1000]

Unlike ``bench/latency.py`` (the same 32 pods re-assumed, candidate lists that are rotations
of every node), every request here is a new pod pending for the dsan-scheduler (1 in 4 asks
for a GPU), charged where it scored best, and its candidates are 420 of the 1,000 nodes from
a random start: what kube-scheduler's adaptive ``percentageOfNodesToScore`` sends an extender
at 1,000 nodes. So each placement leaves a node in a state not seen before, and each request's
candidate set has its own extremes. Timed in one process pinned to one CPU:
``ExtenderApp.prioritize`` (JSON in, scores out) and the settle after it (the assumption and
the scorer's preparation), per policy and tree.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def measure(policy: str, pods: int, candidates: int) -> dict[str, float]:
    """Runs in the tree on ``sys.path``; the world is bench/world.py's."""
    import numpy as np

    sys.path.insert(0, str(ROOT / "bench"))
    from world import World

    from sidecar import kubeobjects as ko
    from sidecar.extender import ExtenderApp

    w = World(1000, policy)
    app = ExtenderApp(w.service)
    rng = np.random.default_rng(0)
    bodies = []
    for i in range(pods + 200):
        p = ko.pod(f"new-{i}", cpu="1", memory="2Gi", gpus=int(i % 4 == 0), uid=f"new-{i}")
        w.sidecar.cache.upsert_pod(p)
        start = int(rng.integers(len(w.names)))
        cand = (w.names[start:] + w.names[:start])[:candidates]
        bodies.append(json.dumps({"Pod": p, "Nodes": None, "NodeNames": cand}).encode())
    score, settle = [], []
    for i, body in enumerate(bodies):
        t0 = time.perf_counter()
        status, _ = app.prioritize(body)
        t1 = time.perf_counter()
        app.settle()
        t2 = time.perf_counter()
        assert status == 200
        if i >= 200:  # warm-up
            score.append(t1 - t0)
            settle.append(t2 - t1)
    w.stop()
    return {"score_p50": float(np.median(score)), "score_mean": float(np.mean(score)),
            "settle_mean": float(np.mean(settle)),
            "per_pod": float(np.mean(score) + np.mean(settle))}


def run(tree: Path, policy: str, args: argparse.Namespace) -> dict[str, float]:
    env = {**os.environ, "PYTHONPATH": str(tree)}
    cmd = [sys.executable, str(Path(__file__).resolve()), "--child", policy,
           "--pods", str(args.pods), "--candidates", str(args.candidates)]
    out = subprocess.run(cmd, env=env, cwd=tree, check=True, capture_output=True, text=True,
                         preexec_fn=lambda: os.sched_setaffinity(0, {(os.cpu_count() or 1) - 1}))
    result: dict[str, float] = json.loads(out.stdout.strip().splitlines()[-1])
    return result


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--base", type=Path, default=None)
    ap.add_argument("--policies", default="dsan,fgd,k8s-default")
    ap.add_argument("--pods", type=int, default=1000)
    ap.add_argument("--candidates", type=int, default=420)
    ap.add_argument("--child", default=None, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child:
        print(json.dumps(measure(args.child, args.pods, args.candidates)))
        return 0
    trees = {"new": ROOT, **({"base": args.base.resolve()} if args.base else {})}
    print("| policy | tree | prioritize p50 (us) | prioritize mean | settle mean | per pod |")
    print("|---|---|---|---|---|---|")
    for policy in args.policies.split(","):
        for label, tree in trees.items():
            r = run(tree, policy, args)
            print(f"| {policy} | {label} | {r['score_p50'] * 1e6:,.0f} | "
                  f"{r['score_mean'] * 1e6:,.0f} | {r['settle_mean'] * 1e6:,.0f} | "
                  f"{r['per_pod'] * 1e6:,.0f} |", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
