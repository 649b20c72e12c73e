"""Markdown tables for docs/results/table1.md from the JSON of one side-by-side run.

dsan sim seed-table1 --policies k8s-default,tetris,fgd --seeds 1-3 --json > out/t1.json
dsan sim burst --policies k8s-default,tetris,fgd --seeds 1-3 --json > out/burst.json
python bench/scenario_table1_report.py out/t1.json out/burst.json
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

ARTICLE = {"k8s-default": (58.3, 12.4, 3.2), "tetris": (67.1, 9.8, 1.8), "dsan": (82.7, 8.1, 0.7)}
COLS = (
    ("utilization_pct", "util %"),
    ("cpu_util_pct", "CPU %"),
    ("mem_util_pct", "mem %"),
    ("gpu_util_pct", "GPU %"),
    ("p99_task_latency_s", "P99 latency s"),
    ("sla_violation_pct", "SLA viol. %"),
    ("jct_s", "JCT s"),
    ("cost", "cost"),
    ("queueing_events", "queue events"),
    ("mean_wait_s", "mean wait s"),
    ("preemptions", "preemptions"),
    ("runtime_s", "run time s"),
)


def _runs(row: dict[str, Any]) -> list[dict[str, Any]]:
    return row.get("runs", [row])


def table1(data: dict[str, Any]) -> str:
    out = [
        "| policy | " + " | ".join(c[1] for c in COLS) + " | article util / P99 / SLA |",
        "|---" * (len(COLS) + 2) + "|",
    ]
    for policy, row in data.items():
        cells = [f"{row[k]:.1f} ± {row.get(k + '_sd', 0.0):.1f}" for k, _ in COLS]
        art = ARTICLE.get(policy)
        ref = f"{art[0]} / {art[1]} / {art[2]}" if art else "–"
        out.append(f"| {policy} | " + " | ".join(cells) + f" | {ref} |")
    if "dsan" not in data:
        out.append("| dsan | not in this run |" + " |" * (len(COLS) - 1) + " 82.7 / 8.1 / 0.7 |")
    return "\n".join(out)


#: Table 1's three goals: (metric, label, +1 when higher is better).
GOALS = (
    ("utilization_pct", "util %", 1),
    ("p99_task_latency_s", "P99 s", -1),
    ("sla_violation_pct", "SLA %", -1),
)


def verdict(data: dict[str, Any], who: str = "dsan") -> str:
    """Is ``who`` better than every other policy on each goal (means over seeds)? Ties
    count as not better; the margin is against the best other policy."""
    if who not in data:
        return ""
    out = [
        f"| metric | {who} | best other (policy) | {who} better? | margin |",
        "|---|---|---|---|---|",
    ]
    for key, label, sign in GOALS:
        mine = float(data[who][key])
        others = {p: float(r[key]) for p, r in data.items() if p != who}
        best = max(others, key=lambda p: sign * others[p])
        margin = sign * (mine - others[best])
        word = "yes" if margin > 1e-9 else ("tie" if abs(margin) <= 1e-9 else "no")
        out.append(
            f"| {label} | {mine:.2f} | {others[best]:.2f} ({best}) | {word} | {margin:+.2f} |"
        )
    return "\n".join(out)


def per_seed(data: dict[str, Any]) -> str:
    out = [
        "| policy | seed | util % | P99 s | SLA % (web / batch / training violations) "
        "| cost | queue events |",
        "|---|---|---|---|---|---|---|",
    ]
    for policy, row in data.items():
        for r in _runs(row):
            s = r["sla_by_kind"]
            sla = " / ".join(
                f"{s[k]['violations']}/{s[k]['items']}"
                for k in ("web", "batch", "training")
                if k in s
            )
            out.append(
                f"| {policy} | {r['seed']} | {r['utilization_pct']:.1f} | "
                f"{r['p99_task_latency_s']:.1f} | {r['sla_violation_pct']:.2f} ({sla}) | "
                f"{r['cost']:.0f} | {r['queueing_events']} |"
            )
    return "\n".join(out)


def tails(data: dict[str, Any]) -> str:
    """P99 per task type and what the pods at or above the overall P99 waited for."""
    out = [
        "| policy | seed | P99 s all | training | batch | web | best effort "
        "| tail pods: queued / boot / pull / start |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for policy, row in data.items():
        for r in _runs(row):
            k = r["p99_by_kind_s"]
            c = r["p99_tail_causes"]
            out.append(
                f"| {policy} | {r['seed']} | {r['p99_task_latency_s']:.1f} | "
                f"{k['training']:.1f} | {k['batch']:.1f} | {k['web']:.1f} | "
                f"{k['besteffort']:.1f} | {c['queued']} / {c['boot']} / {c['pull']} / "
                f"{c['start']} |"
            )
    return "\n".join(out)


def burst(data: dict[str, Any]) -> str:
    out = [
        "| policy | seed | burst GPUs asked | burst jobs queued > 30 s | mean burst job wait min "
        "| burst pods queued | all queue events | mean wait s (all pods) | preemptions |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for policy, row in data.items():
        for r in _runs(row):
            b = r["burst"]
            q = r["queueing_by_kind"]["burst"]
            out.append(
                f"| {policy} | {r['seed']} | {b['gpus_requested']} | {b['queued_jobs']} / "
                f"{b['jobs']} | {b['mean_job_wait_s'] / 60:.1f} | {q['events']} | "
                f"{r['queueing_events']} | {r['mean_wait_s']:.0f} | {r['preemptions']} |"
            )
    return "\n".join(out)


def main(argv: list[str]) -> int:
    t1 = json.loads(Path(argv[0]).read_text())
    print(
        "## Table 1 (mean ± sd over seeds)\n\n" + table1(t1) + "\n\n### Per seed\n\n" + per_seed(t1)
    )
    v = verdict(t1)
    if v:
        print("\n### DSAN against the best other policy per goal (means over seeds)\n\n" + v)
    print("\n### P99 task latency per task type, and what sets the tail\n\n" + tails(t1))
    if len(argv) > 1:
        print("\n## Burst\n\n" + burst(json.loads(Path(argv[1]).read_text())))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
