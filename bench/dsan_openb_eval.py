"""DSAN vs FGD on openb with the FGD protocol, side by side in one run, against FGD's
published value (mean over its 10 seeds at arrived workload = 100 %).

Usage::

    .venv/bin/python bench/dsan_openb_eval.py --pods default gpushare100 --seeds 42 \
        --out docs/results/dsan_openb.md

Both policies go through engineer A's protocol (``dsan.sim.protocol.run_openb``) with the
same seed, node permutation and pod order; DSAN is the shipped model unless
``$DSAN_MODEL_DIR`` says otherwise.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import sys
import time
from pathlib import Path

import numpy as np
import torch

from dsan.model.export import DEFAULT_DIR, read_manifest
from dsan.sim import paths
from dsan.sim.openb import load_nodes, load_pods
from dsan.sim.protocol import OpenbConfig, run_openb


def published_fgd() -> dict[str, tuple[float, float]]:
    out: dict[str, tuple[float, float]] = {}
    with paths.published("derived_summary_by_policy.csv").open() as f:
        for row in csv.DictReader(f):
            if (
                row["sc_policy"] == "06-FGD"
                and row["metric"] == "unallocated_gpu_pct"
                and row["arrived_workload_pct"] == "100"
            ):
                out[row["workload"]] = (float(row["mean"]), float(row["stdev_sample"]))
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--pods", nargs="+", default=["default"])
    ap.add_argument("--seeds", default="42")
    ap.add_argument("--policies", default="fgd,dsan")
    ap.add_argument("--out", type=Path, default=None, help="append a markdown table here")
    ap.add_argument(
        "--dsan-models",
        nargs="*",
        default=[],
        metavar="LABEL=DIR",
        help="extra DSAN models run side by side as policy LABEL (e.g. dsan-old=dir)",
    )
    args = ap.parse_args(argv)
    torch.set_num_threads(1)
    seeds = [int(s) for s in args.seeds.split(",")]
    pols = [p for p in args.policies.split(",") if p]  # "" : the extra models alone
    extra: dict[str, str] = {}
    for spec in args.dsan_models:
        label, sep, d = spec.partition("=")
        if not sep or not Path(d, "manifest.json").is_file():
            raise SystemExit(f"--dsan-models wants LABEL=DIR with a manifest.json, got {spec!r}")
        extra[label] = d
    pols += list(extra)
    nodes_path = paths.openb_csv(paths.DEFAULT_NODES)
    nodes = load_nodes(nodes_path)
    pub = published_fgd()
    # The DSAN judged against FGD: the first --dsan-models entry if any, else "dsan".
    judged = next(iter(extra), "dsan")
    d = extra.get(judged) or os.environ.get("DSAN_MODEL_DIR") or DEFAULT_DIR
    training = read_manifest(d)["training"]
    train_files = training.get("workloads", [])
    skip = training.get("openb_skip")
    if not train_files and skip and Path(skip).is_file():
        # a two-stage model: its openb tie-breaks were searched on the skip file's workloads
        wls = json.loads(Path(skip).read_text()).get("config", {}).get("workloads", [])
        train_files = [w if w.endswith(".csv") else f"openb_pod_list_{w}.csv" for w in wls]
    if args.out and not args.out.exists():
        header = " | ".join(f"{p} unalloc % @100 (mean ± sd)" for p in pols)
        args.out.write_text(
            f"| workload | {judged} role | seeds | {header} | {judged} − FGD (paired, ± SE) | "
            f"FGD published (10 seeds) | {judged} below published FGD? |\n|---|---|---|"
            + "---|" * len(pols)
            + "---|---|---|\n"
        )
    for w in args.pods:
        name = w if w.endswith(".csv") else f"openb_pod_list_{w}.csv"
        pods = load_pods(paths.openb_csv(name), nodes.gpu_models)
        res: dict[str, list[float]] = {p: [] for p in pols}
        for s in seeds:
            for p in pols:
                t0 = time.perf_counter()
                pol = "dsan" if p in extra else p
                cfg = OpenbConfig(paths.openb_csv(name), nodes_path, pol, seed=s)
                before = os.environ.get("DSAN_MODEL_DIR")
                if p in extra:  # the dsan scorer reads its model from $DSAN_MODEL_DIR
                    os.environ["DSAN_MODEL_DIR"] = extra[p]
                r = run_openb(cfg, nodes, pods)
                if p in extra:  # restore: "dsan" itself may come from $DSAN_MODEL_DIR
                    os.environ.pop("DSAN_MODEL_DIR", None)
                    if before is not None:
                        os.environ["DSAN_MODEL_DIR"] = before
                res[p].append(float(r["unallocated_gpu_pct_at_100"]))
                print(
                    json.dumps(
                        {
                            "workload": name,
                            "policy": p,
                            "seed": s,
                            "unallocated_gpu_pct_at_100": r["unallocated_gpu_pct_at_100"],
                            "wall_s": round(time.perf_counter() - t0, 1),
                        }
                    ),
                    flush=True,
                )
        if args.out:  # one row per workload as soon as it is done: partial runs still report
            stem = name[:-4]
            pm = pub.get(stem)
            role = "train" if name in train_files else "held out"
            cells = " | ".join(
                f"{np.mean(v):.3f} ± {np.std(v, ddof=1) if len(v) > 1 else 0:.3f}"
                for v in res.values()
            )
            pub_s = f"{pm[0]:.3f} ± {pm[1]:.3f}" if pm else "not published"
            d = res.get(judged)
            fgd = res.get("fgd")
            diff = np.subtract(d, fgd) if d and fgd else np.zeros(0)
            # paired standard error: the seed-to-seed spread cancels in the per-seed difference
            se = np.std(diff, ddof=1) / np.sqrt(len(diff)) if len(diff) > 1 else 0.0
            gap = f"{np.mean(diff):+.3f} ± {se:.3f}" if len(diff) else "n/a"
            verdict = ("yes" if d and np.mean(d) < pm[0] else "no") if pm else "n/a"
            with args.out.open("a") as f:
                f.write(
                    f"| {stem} | {role} | {args.seeds} | {cells} | {gap} | {pub_s} | {verdict} |\n"
                )
    return 0


if __name__ == "__main__":
    sys.exit(main())
