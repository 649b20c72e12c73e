"""Markdown table from ``bench/dsan_openb_eval.py`` logs (one JSON line per run): per
workload, the mean ± sd over seeds of every policy, each DSAN's paired difference to FGD
(same seed, same run), FGD's published mean and the verdicts, plus counts.

Usage::

    .venv/bin/python bench/dsan_openb_table.py out/eval.log [more.log ...] --train default ...
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import defaultdict
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).parent))
from dsan_openb_eval import published_fgd


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("logs", nargs="+", type=Path)
    ap.add_argument("--train", nargs="*", default=[], help="training workloads (short names)")
    a = ap.parse_args(argv)
    runs: dict[tuple[str, str], dict[int, float]] = defaultdict(dict)
    for log in a.logs:
        for line in log.read_text().splitlines():
            if line.startswith("{"):
                r = json.loads(line)
                stem = r["workload"].removesuffix(".csv").removeprefix("openb_pod_list_")
                runs[(stem, r["policy"])][r["seed"]] = float(r["unallocated_gpu_pct_at_100"])
    pub = published_fgd()
    files = list(dict.fromkeys(w for w, _ in runs))
    pols = list(dict.fromkeys(p for _, p in runs))
    dsans = [p for p in pols if p != "fgd"]
    head = " | ".join(f"{p} (mean ± sd)" for p in pols)
    gaps = " | ".join(f"{p} − FGD (paired)" for p in dsans)
    below = " | ".join(f"{p} < published?" for p in dsans)
    print(f"| workload | role | seeds | {head} | {gaps} | FGD published (10 seeds) | {below} |")
    print("|---" * (4 + len(pols) + 2 * len(dsans)) + "|")
    count: dict[str, list[str]] = {p: [] for p in dsans}
    for w in files:
        seeds = sorted(runs[(w, "fgd")])
        cells = []
        for p in pols:
            v = [runs[(w, p)][s] for s in seeds if s in runs[(w, p)]]
            sd = np.std(v, ddof=1) if len(v) > 1 else 0.0
            cells.append(f"{np.mean(v):.3f} ± {sd:.3f}")
        g, b = [], []
        pm = pub.get(f"openb_pod_list_{w}")
        for p in dsans:
            d = [runs[(w, p)][s] - runs[(w, "fgd")][s] for s in seeds if s in runs[(w, p)]]
            g.append(f"{np.mean(d):+.3f}")
            m = np.mean([runs[(w, p)][s] for s in seeds if s in runs[(w, p)]])
            b.append(("yes" if m < pm[0] else "no") if pm else "n/a")
            if pm and m < pm[0]:
                count[p].append(w)
        role = "train" if w in a.train else "held out"
        pub_s = f"{pm[0]:.3f} ± {pm[1]:.3f}" if pm else "not published"
        s = ",".join(map(str, seeds))
        row = [w, role, s, *cells, *g, pub_s, *b]
        print("| " + " | ".join(row) + " |")
    n_pub = sum(1 for w in files if f"openb_pod_list_{w}" in pub)
    for p in dsans:
        names = ", ".join(count[p])
        print(f"\n{p}: below FGD's published mean on {len(count[p])} of {n_pub}: {names}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
