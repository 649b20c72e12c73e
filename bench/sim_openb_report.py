"""Side-by-side reproduction table for docs/results/openb.md from matrix outputs.

    python bench/sim_openb_report.py out/openb-full > /tmp/table.md

Reads every ``<dir>/*/runs.jsonl`` written by ``dsan sim openb --out``, compares the mean
unallocated GPU % at 100 % arrived with the FGD authors' published means, and checks the
policy order. "Significant" pairs are those whose published means differ by more than
twice the standard error of the difference (10 seeds each); only those must keep their
order for the reproduction to count as ordered.
"""

from __future__ import annotations

import json
import math
import sys
from itertools import combinations
from pathlib import Path

from dsan.policies.registry import PUBLISHED_POLICIES
from dsan.sim import paths
from dsan.sim.matrix import load_published, summary_rows

SHORT = {"gpu-clustering": "clust", "gpu-packing": "pack"}


def fmt(policies: list[str]) -> str:
    return " < ".join(SHORT.get(p, p) for p in policies)


def main(root: Path) -> int:
    results = []
    for f in sorted(root.glob("*/runs.jsonl")):
        results += [json.loads(line) for line in f.read_text().splitlines() if line.strip()]
    rows = summary_rows(results, load_published(paths.published("derived_summary_by_policy.csv")))
    out = [
        "| workload | policy | ours mean ± sd | published mean ± sd | diff (pp) | within 1 pp |",
        "|---|---|---|---|---|---|",
    ]
    worst = 0.0
    n_pub = n_ok = 0
    for r in rows:
        if r["published_mean"] is None:
            pub, diff, ok = "–", "–", "–"
        else:
            n_pub += 1
            worst = max(worst, abs(r["diff_pp"]))
            good = abs(r["diff_pp"]) <= 1.0
            n_ok += good
            pub = f"{r['published_mean']:.2f} ± {r['published_sd']:.2f}"
            diff, ok = f"{r['diff_pp']:+.2f}", "yes" if good else "**no**"
        wl = r["workload"].removeprefix("openb_pod_list_")
        out.append(
            f"| {wl} | {r['policy']} | {r['ours_mean']:.2f} ± {r['ours_sd']:.2f}"
            f" | {pub} | {diff} | {ok} |"
        )
    out.append("")
    out.append(
        f"{n_ok} of {n_pub} published (workload, policy) means reproduced within 1.0 pp; "
        f"largest difference {worst:.2f} pp."
    )
    out.append("")
    out.append(
        "| workload | our order (best first) | published order | exact | significant pairs kept |"
    )
    out.append("|---|---|---|---|---|")
    for wl in sorted({r["workload"] for r in rows}):
        mine = {
            r["policy"]: r for r in rows if r["workload"] == wl and r["published_mean"] is not None
        }
        if len(mine) < 2:
            continue
        ours = sorted(mine, key=lambda p: mine[p]["ours_mean"])
        pub = sorted(mine, key=lambda p: mine[p]["published_mean"])
        sig = kept = 0
        flips = []
        for a, b in combinations(PUBLISHED_POLICIES, 2):
            if a not in mine or b not in mine:
                continue
            ra, rb = mine[a], mine[b]
            se = math.sqrt(ra["published_sd"] ** 2 / ra["n"] + rb["published_sd"] ** 2 / rb["n"])
            dp = ra["published_mean"] - rb["published_mean"]
            if abs(dp) > 2 * se:
                sig += 1
                if (ra["ours_mean"] - rb["ours_mean"]) * dp > 0:
                    kept += 1
                else:
                    flips.append(f"{a}/{b}")
        note = f"{kept}/{sig}" + (f" (flipped: {', '.join(flips)})" if flips else "")
        out.append(
            f"| {wl.removeprefix('openb_pod_list_')} | {fmt(ours)} | {fmt(pub)} | "
            f"{'yes' if ours == pub else 'no'} | {note} |"
        )
    out += ["", *frag_table(results)]
    print("\n".join(out))
    return 0


def frag_table(results: list[dict], workload: str = "openb_pod_list_default") -> list[str]:  # type: ignore[type-arg]
    """Fragment amount (% of capacity) and ratio (% of idle) at 50/90/100 % arrived."""
    import csv

    pub: dict[tuple[str, str, str], float] = {}
    with paths.published("derived_summary_by_policy.csv").open(newline="") as fh:
        for row in csv.DictReader(fh):
            if row["workload"] == workload and row["metric"].startswith("frag"):
                pub[(row["sc_policy"], row["metric"], row["arrived_workload_pct"])] = float(
                    row["mean"]
                )
    lines = [
        f"Fragmentation on `{workload.removeprefix('openb_pod_list_')}`"
        " (mean over seeds; ours / published):",
        "",
        "| policy | frag amount % @50 | @90 | @100 | frag ratio % @50 | @90 | @100 |",
        "|---|---|---|---|---|---|---|",
    ]
    from dsan.sim.matrix import label

    for pol in (*PUBLISHED_POLICIES, "k8s-default", "tetris"):
        rs = [r for r in results if r["workload"] == workload and r["policy"] == pol]
        if not rs:
            continue
        cells = []
        for key, metric in (
            ("frag_amount_pct", "frag_amount_pct_of_total"),
            ("frag_ratio_pct", "frag_ratio_pct_of_idle"),
        ):
            for k in ("50", "90", "100"):
                ours = sum(r[key][k] for r in rs) / len(rs)
                theirs = pub.get((label(pol), metric, k))
                cells.append(f"{ours:.2f}" + ("" if theirs is None else f" / {theirs:.2f}"))
        lines.append(f"| {pol} | " + " | ".join(cells) + " |")
    return lines


if __name__ == "__main__":
    raise SystemExit(main(Path(sys.argv[1] if len(sys.argv) > 1 else "out/openb-full")))
