"""DSAN inference on the GPU against the CPU, side by side in one process.

The sidecar serves DSAN on the CPU: node embeddings (LSTM + GNN over every node) are
recomputed only when telemetry changes, and the per-pod head runs in numpy. This
benchmark answers whether a GPU would pay for either half, with the shipped model on a
scenario-shaped cluster (racks, zones, NVLink domains; half the nodes with 8 GPUs) of 100 to
20,000 nodes:

- ``embed``: ``DSANNet.embed_nodes`` over the whole cluster (what a telemetry refresh costs);
- ``head``: ``DSANNet.score`` over every node as a candidate, on the GPU including the copy
  of the (m, 128) features in and the logits out (what a request would cost if the head ran
  there);
- ``forward``: both, one pod (what TorchScript and torch.export ship).

Each is timed eager and as TorchScript, on the CPU (1 thread, as the sidecar's default
``torch_threads``, and every core) and on CUDA, with ``torch.cuda.synchronize`` inside the
timed region. The GPU's logits are checked against the CPU's before anything is timed.

Run: ``python bench/gpu_inference.py --json out/gpu_inference.json`` (any machine; CUDA rows
only where ``torch.cuda.is_available()``).
"""

from __future__ import annotations

import argparse
import copy
import json
import math
import os
import platform
import statistics
import time
from collections.abc import Callable
from typing import Any

import numpy as np
import torch

from dsan.core.snapshot import ClusterSnapshot, PodSpec
from dsan.features import featurize, node_block, telemetry_of
from dsan.model.export import load, load_torchscript
from dsan.model.graph import build_graph
from dsan.sim.scenario.cluster import build_cluster
from dsan.sim.scenario.config import ClusterConfig, NodeGroup

POD = PodSpec("bench", cpu_milli=4000, mem_mib=16384, num_gpu=1, gpu_milli=500)


def cluster(n: int, t: int = 16, seed: int = 0) -> ClusterSnapshot:
    """n nodes (half A100 x 8 in NVLink pairs, half CPU), 20 per rack, live telemetry."""
    half = n // 2
    cfg = ClusterConfig(racks=max(1, n // 20), zones=2, node_groups=(
        NodeGroup(half, 96000, 786432, 30.0, gpus=8, gpu_model="A100", nvlink_domain_nodes=2),
        NodeGroup(n - half, 64000, 262144, 3.0)))
    snap = build_cluster(cfg, t)
    rng = np.random.default_rng(seed)
    assert snap.telemetry is not None
    snap.telemetry[:] = rng.random(snap.telemetry.shape, dtype=np.float32)
    return snap


def timeit(fn: Callable[[], Any], sync: Callable[[], None], budget_s: float,
           min_reps: int = 10, max_reps: int = 2000) -> dict[str, float]:
    for _ in range(3):  # warm-up: allocator, cuDNN/cuBLAS handles, TorchScript profiling runs
        fn()
    sync()
    times: list[float] = []
    t_end = time.perf_counter() + budget_s
    while len(times) < max_reps and (len(times) < min_reps or time.perf_counter() < t_end):
        t0 = time.perf_counter()
        fn()
        sync()
        times.append(time.perf_counter() - t0)
    times.sort()
    p99 = times[min(len(times) - 1, math.ceil(0.99 * len(times)) - 1)]
    return {"p50_us": statistics.median(times) * 1e6, "p99_us": p99 * 1e6, "reps": len(times)}


def _time_model(model: Any, target: torch.device, inputs: tuple[torch.Tensor, ...],
                ref_logits: torch.Tensor, sync: Callable[[], None], budget_s: float
                ) -> list[tuple[str, dict[str, float], float]]:
    """embed / head / forward of ``model`` on ``target``; logits checked against the CPU's."""
    m = model.to(target)
    x = inputs[0]
    args = [a.to(target) for a in inputs]
    _, node_x, tele, ei, ew, cand, mask = args
    seg = torch.zeros_like(cand)
    rows = []
    with torch.inference_mode():
        logits, _ = m(*args)
        err = float((logits.cpu() - ref_logits).abs().max())
        streams = m.embed_nodes(node_x, tele, ei, ew).index_select(0, cand)

        def embed() -> None:
            m.embed_nodes(node_x, tele, ei, ew)

        def head() -> None:
            # The features come from the CPU featurizer on every request and the logits go
            # back to it: both copies are on the clock.
            lg, _ = m.score(x.to(target), streams, mask, seg, 1)
            lg.cpu()

        def forward() -> None:
            lg, _ = m(*args)
            lg.cpu()

        for what, fn in (("embed", embed), ("head", head), ("forward", forward)):
            rows.append((what, timeit(fn, sync, budget_s), err))
    model.to("cpu")
    return rows


def run(sizes: list[int], budget_s: float) -> dict[str, Any]:
    eager, manifest = load()
    try:
        scripted, _ = load_torchscript()
        ts_source = "model.ts as shipped"
    except Exception as exc:  # a TorchScript file from a newer torch than this machine's
        scripted = torch.jit.script(copy.deepcopy(eager))
        ts_source = f"scripted here from weights.pt (model.ts did not load: {exc})"
    cuda = torch.cuda.is_available()
    out: dict[str, Any] = {
        "torch": torch.__version__, "python": platform.python_version(),
        "cpu_count": os.cpu_count(), "model": manifest.get("model"),
        "gpu": torch.cuda.get_device_name(0) if cuda else None, "torchscript": ts_source,
        "rows": []}
    print(f"torch {torch.__version__}; TorchScript: {ts_source}", flush=True)
    devices = ["cpu1", f"cpu{os.cpu_count()}"] + (["cuda"] if cuda else [])
    for n in sizes:
        snap = cluster(n)
        nodes = np.arange(n, dtype=np.int64)
        node_x = torch.from_numpy(node_block(snap, nodes))
        tele = torch.from_numpy(telemetry_of(snap, nodes))
        ei, ew = (torch.from_numpy(a) for a in build_graph(snap))
        x_np = featurize(POD, snap, nodes)
        x = torch.from_numpy(x_np)
        mask = torch.ones(n, dtype=torch.bool)
        nodes_t = torch.from_numpy(nodes)
        with torch.inference_mode():
            ref_logits, _ = eager(x, node_x, tele, ei, ew, nodes_t, mask)
        for dev in devices:
            if dev.startswith("cpu"):
                torch.set_num_threads(int(dev[3:]))
                target = torch.device("cpu")

                def sync() -> None:
                    return None
            else:
                torch.set_num_threads(os.cpu_count() or 1)
                target = torch.device("cuda")
                sync = torch.cuda.synchronize
            for kind, model in (("eager", eager), ("torchscript", scripted)):
                inputs = (x, node_x, tele, ei, ew, nodes_t, mask)
                for what, r, err in _time_model(model, target, inputs, ref_logits, sync,
                                                budget_s):
                    out["rows"].append({"nodes": n, "edges": int(ei.shape[1]), "device": dev,
                                        "kind": kind, "what": what,
                                        "max_abs_err_vs_cpu_eager": err, **r})
                    print(f"{n:>6} {dev:>6} {kind:>11} {what:>8} p50 {r['p50_us']:>10.1f} us"
                          f"  p99 {r['p99_us']:>10.1f} us  err {err:.2e}", flush=True)
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--sizes", default="100,1000,5000,20000")
    p.add_argument("--budget-s", type=float, default=0.5, help="time per measurement")
    p.add_argument("--json", help="write the rows here")
    a = p.parse_args()
    res = run([int(s) for s in a.sizes.split(",")], a.budget_s)
    if a.json:
        with open(a.json, "w") as f:
            json.dump(res, f, indent=1)


if __name__ == "__main__":
    main()
