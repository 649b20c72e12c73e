"""Many openb runs (workloads x policies x seeds) in parallel processes, and their reports:
a CSV shaped like the FGD authors' ``analysis_allo_discrete.csv``, a side-by-side table
against the published means, and a Fig. 9(a)-style plot (unallocated GPU % vs arrived %).
"""

from __future__ import annotations

import csv
import json
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import replace
from pathlib import Path
from typing import Any, TypeVar

import numpy as np

from dsan.policies.registry import PUBLISHED_LABELS, PUBLISHED_POLICIES
from dsan.sim.protocol import CURVE_MAX, OpenbConfig

Result = dict[str, Any]
T = TypeVar("T")


def run_matrix(run: Callable[[T], Result], items: Sequence[T], jobs: int, desc: str
               ) -> list[Result]:
    """``run`` over every item in ``jobs`` worker processes (1: in this one), with a tqdm bar
    of runs on stderr (openb runs, and the scenario CLI's policy x seed runs)."""
    from tqdm import tqdm

    with ProcessPoolExecutor(max_workers=jobs) as pool:
        runs = pool.map(run, items) if jobs > 1 else map(run, items)
        return list(tqdm(runs, total=len(items), unit="run", desc=desc))


def expand(base: OpenbConfig, pods: Iterable[Path], policies: Iterable[str],
           seeds: Iterable[int]) -> list[OpenbConfig]:
    # Slowest policy first so the last process does not run alone at the end.
    pols = sorted(policies, key=lambda p: p != "fgd")
    return [replace(base, pods=p, policy=pol, seed=s) for p in pods for pol in pols for s in seeds]


def label(policy: str) -> str:
    return PUBLISHED_LABELS.get(policy, policy)


def write_alloc_csv(results: Sequence[Result], path: Path) -> None:
    """Same columns as the published ``analysis_allo_discrete.csv``."""
    with path.open("w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(["workload", "sc_policy", "tune", "seed", "total_gpus", *range(CURVE_MAX + 1)])
        for r in sorted(results, key=lambda r: (r["workload"], label(r["policy"]), r["seed"])):
            curve = ["" if v is None else f"{v:.2f}" for v in r["alloc_gpu_pct_curve"]]
            w.writerow([r["workload"], label(r["policy"]), r["tune"], r["seed"], r["total_gpus"],
                        *curve])


def load_published(path: Path, arrived: int = 100) -> dict[tuple[str, str], tuple[float, float]]:
    """(workload, sc_policy) -> (mean, sample sd) of unallocated GPU % at ``arrived``."""
    out: dict[tuple[str, str], tuple[float, float]] = {}
    if not path.is_file():
        return out
    with path.open(newline="") as fh:
        for r in csv.DictReader(fh):
            if r["metric"] == "unallocated_gpu_pct" and int(r["arrived_workload_pct"]) == arrived:
                out[(r["workload"], r["sc_policy"])] = (float(r["mean"]), float(r["stdev_sample"]))
    return out


def summary_rows(results: Sequence[Result],
                 published: dict[tuple[str, str], tuple[float, float]]) -> list[dict[str, Any]]:
    groups: dict[tuple[str, str], list[Result]] = {}
    for r in results:
        groups.setdefault((r["workload"], r["policy"]), []).append(r)
    order = {p: i for i, p in enumerate((*PUBLISHED_POLICIES, "k8s-default", "tetris"))}
    rows = []
    for (wl, pol), runs in sorted(groups.items(), key=lambda kv: (kv[0][0],
                                                                  order.get(kv[0][1], 99))):
        vals = [float(r["unallocated_gpu_pct_at_100"]) for r in runs]
        pub = published.get((wl, label(pol)))
        mean = float(np.mean(vals))
        rows.append({
            "workload": wl, "policy": pol, "n": len(vals), "ours_mean": mean,
            "ours_sd": float(np.std(vals, ddof=1)) if len(vals) > 1 else 0.0,
            "published_mean": None if pub is None else pub[0],
            "published_sd": None if pub is None else pub[1],
            "diff_pp": None if pub is None else mean - pub[0],
            "runtime_s": float(np.mean([float(r["runtime_s"]) for r in runs])),
        })
    return rows


def ordering(rows: Sequence[dict[str, Any]], workload: str) -> tuple[list[str], list[str]]:
    """Published policies ranked best (least unallocated) first: ours, published."""
    mine = [r for r in rows if r["workload"] == workload and r["published_mean"] is not None]
    ours = [r["policy"] for r in sorted(mine, key=lambda r: r["ours_mean"])]
    pub = [r["policy"] for r in sorted(mine, key=lambda r: r["published_mean"])]
    return ours, pub


def format_table(rows: Sequence[dict[str, Any]]) -> str:
    head = (f"{'workload':<28} {'policy':<15} {'n':>3} {'ours %':>14} {'published %':>14}"
            f" {'diff pp':>8} {'s/run':>6}")
    lines = [head, "-" * len(head)]
    for r in rows:
        pub = ("-" if r["published_mean"] is None
               else f"{r['published_mean']:6.2f} ± {r['published_sd']:4.2f}")
        diff = "-" if r["diff_pp"] is None else f"{r['diff_pp']:+.2f}"
        lines.append(f"{r['workload']:<28} {r['policy']:<15} {r['n']:>3}"
                     f" {r['ours_mean']:6.2f} ± {r['ours_sd']:4.2f}"
                     f" {pub:>14} {diff:>8} {r['runtime_s']:6.2f}")
    return "\n".join(lines)


def plot_fig9a(results: Sequence[Result], workload: str, path: Path) -> None:
    """Median unallocated GPU % vs arrived workload with the 25-75 % band over seeds."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(11, 4.5))
    x = np.arange(CURVE_MAX + 1)
    pols: dict[str, list[list[float | None]]] = {}
    for r in results:
        if r["workload"] == workload:
            pols.setdefault(r["policy"], []).append(r["unallocated_gpu_pct_curve"])
    for pol, curves in pols.items():
        arr = np.array([[np.nan if v is None else v for v in c] for c in curves], dtype=float)
        med = np.nanmedian(arr, axis=0)
        lo, hi = np.nanpercentile(arr, 25, axis=0), np.nanpercentile(arr, 75, axis=0)
        for ax in axes:
            (line,) = ax.plot(x, med, label=pol, lw=1.4)
            ax.fill_between(x, lo, hi, alpha=0.2, color=line.get_color())
    # Left: the whole run; right: the region the paper's Fig. 9(a) is about.
    axes[0].set_xlim(0, CURVE_MAX)
    axes[0].set_ylim(bottom=0)
    axes[1].set_xlim(80, CURVE_MAX)
    axes[1].set_ylim(0, 25)
    for ax in axes:
        ax.set_xlabel("arrived workload (% of cluster GPU capacity)")
        ax.set_ylabel("unallocated GPU (%)")
        ax.grid(alpha=0.3)
    axes[1].legend(fontsize=8)
    fig.suptitle(f"{workload}: unallocated GPU vs arrived workload (median, 25-75 % over seeds)")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def write_reports(results: Sequence[Result], out: Path,
                  published_csv: Path | None) -> tuple[str, list[Path]]:
    """Write CSV, JSONL, table and one PNG per workload under ``out``; return table, PNGs."""
    out.mkdir(parents=True, exist_ok=True)
    write_alloc_csv(results, out / "analysis_allo_discrete.csv")
    with (out / "runs.jsonl").open("w") as fh:
        for r in results:
            fh.write(json.dumps(r) + "\n")
    published = load_published(published_csv) if published_csv is not None else {}
    rows = summary_rows(results, published)
    table = format_table(rows)
    for wl in sorted({r["workload"] for r in rows}):
        ours, pub = ordering(rows, wl)
        if pub:
            same = "same" if ours == pub else "DIFFERENT"
            pad = " " * len(wl)
            table += f"\n{wl}: order ours {' < '.join(ours)}"
            table += f"\n{pad}  published {' < '.join(pub)} ({same})"
    (out / "summary.txt").write_text(table + "\n")
    with (out / "summary.json").open("w") as fh:
        json.dump(rows, fh, indent=1)
    pngs = []
    for wl in sorted({r["workload"] for r in results}):
        png = out / f"fig9a_{wl}.png"
        plot_fig9a(results, wl, png)
        pngs.append(png)
    return table, pngs
