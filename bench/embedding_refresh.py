"""DSAN's request cost when telemetry keeps arriving, as it does in a live cluster.

The latency suite (`bench/test_score_latency.py`) holds telemetry still, so it never sees a
node-embedding refresh. In a cluster every GPU node's GPUTelemetry object brings a new 10 s
window, i.e. several telemetry changes per second at 1,000 nodes, and the next DSAN request
refreshes the embeddings. Here, before each request, ``--changed`` nodes get a new window
(written in place, the version bumped, every age grown, as the sidecar's cache does), then
``ServingModel.logits`` scores one pod on every node; ``steady`` is the same request without
a change. p50 / p99 per call, one thread (the sidecar's ``torch_threads`` default).

Run: ``python -m bench.embedding_refresh`` (A/B: the same command in each tree, interleaved).
"""

from __future__ import annotations

import argparse
import gc
import json
import math
import statistics
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch

from bench.gpu_inference import POD, cluster
from dsan.model.serving import ServingModel


def _pct(times: list[float], q: float) -> float:
    s = sorted(times)
    return s[min(len(s) - 1, math.ceil(q * len(s)) - 1)] * 1e6


def measure(n: int, changed: int, reps: int, seed: int = 0) -> dict[str, Any]:
    snap = cluster(n, seed=seed)
    assert snap.telemetry is not None and snap.telemetry_age_s is not None
    sm = ServingModel.from_dir()
    nodes = np.arange(n, dtype=np.int64)
    rng = np.random.default_rng(seed)
    sm.logits(POD, snap, nodes)
    # As the sidecar does once its informers synced (gc_freeze_after_sync): without it, a
    # full collection over torch's heap (~170 ms) lands on one request in ~20 at 5,000 nodes.
    gc.collect()
    gc.freeze()
    out: dict[str, Any] = {"nodes": n, "changed_per_request": changed}
    for kind in ("steady", "telemetry"):
        times: list[float] = []
        for _ in range(reps):
            if kind == "telemetry":
                rows = rng.choice(n, size=changed, replace=False)
                snap.telemetry[rows, :-1] = snap.telemetry[rows, 1:]  # the ring moves on
                snap.telemetry[rows, -1] = rng.random((changed, snap.telemetry.shape[2]))
                snap.telemetry_age_s += 0.05
                snap.telemetry_age_s[rows] = 0.0
                snap.telemetry_version += 1
            t0 = time.perf_counter()
            sm.logits(POD, snap, nodes)
            times.append(time.perf_counter() - t0)
        out[kind] = {"p50_us": statistics.median(times) * 1e6, "p99_us": _pct(times, 0.99),
                     "reps": reps}
    gc.unfreeze()
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--sizes", default="100,1000,5000")
    p.add_argument("--changed", type=int, default=1, help="nodes with a new window per request")
    p.add_argument("--reps", type=int, default=40)
    p.add_argument("--json", help="write the rows here")
    a = p.parse_args()
    torch.set_num_threads(1)
    rows = []
    for n in (int(s) for s in a.sizes.split(",")):
        r = measure(n, a.changed, a.reps)
        rows.append(r)
        print(f"{n:>6} nodes: steady p50 {r['steady']['p50_us']:>10.0f} us p99 "
              f"{r['steady']['p99_us']:>10.0f} us | after a telemetry change p50 "
              f"{r['telemetry']['p50_us']:>10.0f} us p99 {r['telemetry']['p99_us']:>10.0f} us",
              flush=True)
    if a.json:
        Path(a.json).write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
