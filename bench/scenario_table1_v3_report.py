"""Markdown tables of docs/results/table1.md, *Table 1, version 3*, from the JSON that
``dsan sim seed-table1 --scenario seed-table1-v3 --seeds ... --json`` and ``dsan sim burst
--scenario seed-table1-v3 --seeds ... --json`` print.

    python bench/scenario_table1_v3_report.py out/t1v3.json[,more.json...] out/burst-v3.json \
        [held-out JSON ...]

The first two arguments may join several files with commas (e.g. the ablation rows of
bench/scenario_actions_ablation.py beside the policies' run).

Held-out files (several, e.g. one per policy, are merged) give the held-out table: means and
sd per policy, and per seed each policy minus k8s-default; held-out burst runs (``dsan sim
burst ... --json``) among them give the held-out burst table, each cell "policy / policy".
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import numpy as np

ARTICLE = {"utilization_pct": 1.42, "p99_task_latency_s": 0.65, "sla_violation_pct": 0.22}


def _runs(row: dict[str, Any]) -> list[dict[str, Any]]:
    return row.get("runs", [row])


def _ms(vals: list[float], fmt: str = "{:.1f}") -> str:
    a = np.array(vals, dtype=float)
    sd = a.std(ddof=1) if a.size > 1 else 0.0
    return f"{fmt.format(a.mean())} ± {fmt.format(sd)}"


def _sla(r: dict[str, Any], kind: str) -> float:
    return float(r["sla_by_kind"].get(kind, {}).get("pct", 0.0))


def table1(data: dict[str, Any]) -> str:
    out = ["| policy | util % | CPU % | mem % | GPU % | alloc util % | P99 job latency s | "
           "P99 best effort s | SLA viol. % | web / batch / training % | queue events | "
           "mean wait of queued s | preemptions | reclaim GPU-s | reclaim core-s | run time s |",
           "|" + "---|" * 16]
    for p, row in data.items():
        rs = _runs(row)
        cells = [
            _ms([r["utilization_pct"] for r in rs]), _ms([r["cpu_util_pct"] for r in rs]),
            _ms([r["mem_util_pct"] for r in rs]), _ms([r["gpu_util_pct"] for r in rs]),
            _ms([r["alloc_utilization_pct"] for r in rs]),
            _ms([r["p99_task_latency_s"] for r in rs]),
            _ms([r["p99_besteffort_latency_s"] for r in rs], "{:.0f}"),
            _ms([r["sla_violation_pct"] for r in rs], "{:.2f}"),
            " / ".join(f"{np.mean([_sla(r, k) for r in rs]):.2f}"
                       for k in ("web", "batch", "training")),
            _ms([r["queueing_events"] for r in rs]),
            _ms([r["mean_wait_queued_s"] for r in rs], "{:.0f}"),
            _ms([r["preemptions"] for r in rs], "{:.0f}"),
            _ms([r["reclaim_cost"]["gpu_s_total"] for r in rs], "{:.0f}"),
            _ms([r["reclaim_cost"]["lost_core_s"] for r in rs], "{:.0f}"),
            _ms([r["runtime_s"] for r in rs]),
        ]
        out.append(f"| {p} | " + " | ".join(cells) + " |")
    return "\n".join(out)


def per_seed(data: dict[str, Any]) -> str:
    out = ["| policy | seed | util % | P99 job latency s (training / batch) | SLA % (web w / "
           "batch b / training t violations) | queue events | jobs |",
           "|---|---|---|---|---|---|---|"]
    for p, row in data.items():
        for r in _runs(row):
            k = r["sla_by_kind"]
            viol = " / ".join(f"{k.get(c, {}).get('violations', 0)}/{k.get(c, {}).get('items', 0)}"
                              for c in ("web", "batch", "training"))
            by = r["p99_by_kind_s"]
            out.append(f"| {p} | {r['seed']} | {r['utilization_pct']:.1f} | "
                       f"{r['p99_task_latency_s']:.1f} ({by['training']:.1f} / "
                       f"{by['batch']:.1f}) | {r['sla_violation_pct']:.2f} ({viol}) | "
                       f"{r['queueing_events']} | {r['jobs_submitted']} |")
    return "\n".join(out)


def ratios(data: dict[str, Any]) -> str:
    if "dsan" not in data or "k8s-default" not in data:
        return ""
    out = ["| metric | article DSAN / default | here DSAN / k8s-default (means, seeds "
           f"{', '.join(str(r['seed']) for r in _runs(data['dsan']))}) |", "|---|---|---|"]
    for k, art in ARTICLE.items():
        d = np.mean([float(r[k]) for r in _runs(data["dsan"])])
        b = np.mean([float(r[k]) for r in _runs(data["k8s-default"])])
        here = f"{d / b:.2f}x ({d:.2f} / {b:.2f})" if b > 0 else f"– ({d:.2f} / 0)"
        out.append(f"| {k} | {art:.2f}x | {here} |")
    return "\n".join(out)


def burst(data: dict[str, Any]) -> str:
    out = ["| policy | seed | free GPUs at 2:00 | reclaimable GPUs | burst peak GPUs (offered) | "
           "jobs queued > 30 s | mean wait of queued s | mean wait s (all) | evictions by the "
           "burst (training / best effort / batch) | their cost GPU-s (stall + lost) | "
           "core-s lost |",
           "|" + "---|" * 11]
    for p, row in data.items():
        for r in _runs(row):
            b = r["burst"]
            c = b["reclaim_cost"]
            ev = c["evicted_pods"]
            out.append(
                f"| {p} | {r['seed']} | {b['free_gpu_milli_at_start'] / 1000:.1f} | "
                f"{b['reclaimable_gpu_milli_at_start'] / 1000:.1f} | "
                f"{b['peak_gpu_milli_offered'] / 1000:.1f} | {b['queued_jobs']} / {b['jobs']} | "
                f"{b['mean_wait_queued_s']:.1f} | {b['mean_job_wait_s']:.1f} | "
                f"{ev.get('training', 0)} / {ev.get('besteffort', 0)} / {ev.get('batch', 0)} | "
                f"{c['gpu_s_total']:.0f} ({c['stall_gpu_s']:.0f} + {c['lost_gpu_s']:.0f}) | "
                f"{c['lost_core_s']:.0f} |")
    return "\n".join(out)


def heldout_burst(data: dict[str, Any]) -> str:
    pols = list(data)
    runs = {p: {r["seed"]: r["burst"] for r in _runs(data[p])} for p in pols}
    seeds = sorted(set.intersection(*(set(v) for v in runs.values())))
    cols = (("free GPUs at 2:00", lambda b: f"{b['free_gpu_milli_at_start'] / 1000:.1f}"),
            ("reclaimable GPUs", lambda b: f"{b['reclaimable_gpu_milli_at_start'] / 1000:.1f}"),
            ("jobs queued > 30 s", lambda b: str(b["queued_jobs"])),
            ("mean wait of queued s", lambda b: f"{b['mean_wait_queued_s']:.1f}"),
            ("reclamation cost GPU-s", lambda b: f"{b['reclaim_cost']['gpu_s_total']:.0f}"))
    out = [f"| seed ({' / '.join(pols)}) | burst peak GPUs | "
           + " | ".join(h for h, _ in cols) + " |", "|" + "---|" * (2 + len(cols))]
    for s in seeds:
        b0 = runs[pols[0]][s]
        out.append(f"| {s} | {b0['peak_gpu_milli_offered'] / 1000:.1f} | " + " | ".join(
            " / ".join(f(runs[p][s]) for p in pols) for _, f in cols) + " |")
    total = [sum(runs[p][s]["reclaim_cost"]["gpu_s_total"] for s in seeds) for p in pols]
    out.append("\nReclamation cost over the seeds, GPU-s: "
               + ", ".join(f"{p} {t:,.0f}" for p, t in zip(pols, total, strict=True)))
    return "\n".join(out)


HELD = (("utilization_pct", "util %", "{:.1f}"), ("p99_task_latency_s", "P99 job latency s",
        "{:.1f}"), ("sla_violation_pct", "SLA viol. %", "{:.2f}"), ("jct_s", "mean JCT s",
        "{:.0f}"), ("queueing_events", "queue events", "{:.1f}"))


def heldout(data: dict[str, Any]) -> str:
    out = ["| policy | seeds | " + " | ".join(h for _, h, _ in HELD) + " |",
           "|" + "---|" * (2 + len(HELD))]
    for p, row in data.items():
        rs = _runs(row)
        seeds = [r["seed"] for r in rs]
        out.append(f"| {p} | {min(seeds)}-{max(seeds)} | "
                   + " | ".join(_ms([float(r[k]) for r in rs], f) for k, _, f in HELD) + " |")
    for other in [p for p in data if p != "k8s-default" and "k8s-default" in data]:
        d = {r["seed"]: r for r in _runs(data[other])}
        b = {r["seed"]: r for r in _runs(data["k8s-default"])}
        both = sorted(set(d) & set(b))
        out += ["", f"| {other} − k8s-default, per seed | " + " | ".join(str(s) for s in both)
                + " | better on | ratio of means |", "|" + "---|" * (len(both) + 3)]
        for k, h, f in HELD:
            diff = [float(d[s][k]) - float(b[s][k]) for s in both]
            better = sum(x > 0 if k == "utilization_pct" else x < 0 for x in diff)
            mb = np.mean([float(b[s][k]) for s in both])
            ratio = np.mean([float(d[s][k]) for s in both]) / mb if mb else float("nan")
            out.append(f"| {h} | " + " | ".join(f.format(x) for x in diff)
                       + f" | {better} of {len(both)} | {ratio:.2f}x |")
    return "\n".join(out)


def main(argv: list[str]) -> int:
    if not argv:
        print(__doc__, file=sys.stderr)
        return 2
    t1: dict[str, Any] = {}
    for f in argv[0].split(","):
        t1.update(json.loads(Path(f).read_text()))
    print(table1(t1), end="\n\n")
    print(ratios(t1), end="\n\n")
    print(per_seed(t1), end="\n\n")
    if len(argv) > 1:
        b: dict[str, Any] = {}
        for f in argv[1].split(","):
            b.update(json.loads(Path(f).read_text()))
        print(burst(b), end="\n\n")
    held: dict[str, Any] = {}
    held_burst: dict[str, Any] = {}
    for f in argv[2:]:
        for p, row in json.loads(Path(f).read_text()).items():
            (held_burst if "burst" in _runs(row)[0] else held)[p] = row
    if held:
        print(heldout(held), end="\n\n")
    if held_burst:
        print(heldout_burst(held_burst))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
