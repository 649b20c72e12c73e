"""Derive the scenario's trace-calibrated parameters from ``../shared/traces``, to check
where each number in the YAML came from: ``.venv/bin/python hack/scenario_calibrate.py TRACES``.
"""

from __future__ import annotations

import csv
import sys
from pathlib import Path

import numpy as np

#: Percentiles stored for the duration tables; sampling interpolates between them.
QUANTILE_POINTS = (0, 5, 10, 20, 30, 40, 50, 60, 70, 80, 90, 95, 99, 100)
GPU_CLASSES = (1, 2, 4, 8)


def philly(traces: Path) -> dict[str, object]:
    """GPU-count probabilities and per-class duration quantiles from the Pollux Philly
    extract, over jobs of 1/2/4/8 GPUs only (larger ones cannot be placed on 40 GPUs)."""
    path = traces / "philly-derived" / "pollux_osdi21_philly.csv"
    dur: list[float] = []
    gpus: list[int] = []
    with path.open(newline="") as fh:
        for row in csv.DictReader(fh):
            if not row.get("duration"):
                continue
            g = int(row["num_gpus"])
            if g in GPU_CLASSES:
                dur.append(float(row["duration"]))
                gpus.append(g)
    d = np.asarray(dur)
    g_arr = np.asarray(gpus)
    counts = np.array([(g_arr == k).sum() for k in GPU_CLASSES], dtype=np.float64)
    probs = counts / counts.sum()
    quantiles = {
        str(k): [round(float(q), 1) for q in np.percentile(d[g_arr == k], QUANTILE_POINTS)]
        for k in GPU_CLASSES
    }
    by_class = {str(k): round(float(p), 5) for k, p in zip(GPU_CLASSES, probs, strict=True)}
    return {"gpu_count_probs": by_class, "duration_quantiles_s": quantiles}


def openb(traces: Path, top: int = 6) -> dict[str, object]:
    """Per-GPU CPU/memory of whole-GPU tasks, memory per core of CPU-only tasks, and the ``top``
    commonest GPU-sharing ``gpu_milli`` values with their renormalised shares."""
    path = traces / "alibaba-gpu-v2023-openb" / "csv" / "openb_pod_list_default.csv"
    with path.open(newline="") as fh:
        rows = list(csv.DictReader(fh))
    cpu = np.array([float(r["cpu_milli"]) for r in rows])
    mem = np.array([float(r["memory_mib"]) for r in rows])
    ng = np.array([int(r["num_gpu"]) for r in rows])
    gm = np.array([int(r["gpu_milli"]) for r in rows])
    whole = (ng >= 1) & (gm == 1000)
    cpu_only = ng == 0
    sharing = (gm > 0) & (gm < 1000)
    vals, cnt = np.unique(gm[sharing], return_counts=True)
    order = np.argsort(-cnt, kind="stable")[:top]
    share = cnt[order] / cnt[order].sum()
    return {
        "worker_cpu_milli_per_gpu": float(np.median(cpu[whole] / ng[whole])),
        "worker_mem_mib_per_gpu": float(np.median(mem[whole] / ng[whole])),
        "cpu_task_mem_mib_per_core": float(np.median(mem[cpu_only] / cpu[cpu_only] * 1000)),
        "sharing_gpu_milli_median": float(np.median(gm[sharing])),
        "sharing_shares": {int(v): round(float(s), 4)
                           for v, s in zip(vals[order], share, strict=True)},
    }


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    traces = Path(args[0] if args else "../shared/traces")
    print({"philly": philly(traces), "openb": openb(traces)})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
