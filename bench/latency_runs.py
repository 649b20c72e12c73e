"""How often each budget was met over several latency suite runs: one line per judged row and
size, per policy "met in k of N" with each run's ratio (or p99 for gRPC) in run order.

    .venv/bin/python bench/latency_runs.py docs/results/latency_runs.md out/a.json out/b.json ...

Each input is one `bench/test_score_latency.py --benchmark-json` file; each ratio is taken
inside its own run (bench/latency_report.py's rule), never across runs. On a shared machine a
single run's p99 can flip a verdict; the count over runs is what a budget claim should cite.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run as a script: `bench` importable
from bench.latency_report import (
    API_LABEL,
    API_ROWS,
    BUDGET_GRPC_S,
    JUDGED_ROWS,
    PREEMPTED,
    load,
)

Result = dict[tuple[str, int, str], dict[str, float]]


def cell(r: dict[str, float], floor: dict[str, float], budget: float | None,
         n: int) -> tuple[str, bool | None]:
    """One run's figure and verdict (None: no budget at this size, or an inconclusive floor)."""
    if budget is None:
        return f"{r['p99'] * 1e6:,.0f} us", (r["p99"] <= BUDGET_GRPC_S) if n == 1000 else None
    ratio = r["p99"] / floor["p99"]
    if floor["p99"] > PREEMPTED * floor["p50"] and ratio <= budget:
        return f"{ratio:.2f}x?", None  # the floor's own p99 was a preemption
    return f"{ratio:.2f}x", ratio <= budget


def render(runs: list[Result], names: list[str]) -> str:
    policies = sorted({p for res in runs for k, _, p in res
                       if k == "inprocess" and not p.startswith("floor")})
    sizes = sorted({n for res in runs for _, n, _ in res})
    lines = [
        "# Latency budgets over several suite runs",
        "",
        f"Runs, in order: {', '.join(names)} (`bench/latency_runs.py`). Each cell: met in k of "
        "the runs that measured it, then each run's p99 ratio to its own floor (gRPC: its "
        "p99, budgeted at 1,000 nodes only); `?` marks a ratio under budget against a floor "
        f"whose own p99 was over {PREEMPTED:g}x its p50 (not counted either way). Judged "
        "rows only; the budgets and placements are explained in latency.md.",
        "",
        "| API | nodes | " + " | ".join(policies) + " |",
        "|---|---|" + "---|" * len(policies),
    ]
    for api, floor_name, budget in API_ROWS:
        if api not in JUDGED_ROWS:
            continue
        for n in sizes:
            if budget is None and n != 1000:
                continue
            cells = []
            for p in policies:
                figs, met, counted = [], 0, 0
                for res in runs:
                    r, fl = res.get((api, n, p)), res.get((api, n, floor_name))
                    if r is None or fl is None:
                        continue
                    fig, ok = cell(r, fl, budget, n)
                    figs.append(fig)
                    counted += ok is not None
                    met += bool(ok)
                cells.append(f"{met} of {counted}: {' / '.join(figs)}" if figs else "-")
            lines.append(f"| {API_LABEL[api]} | {n} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def ended(path: Path) -> str:
    """A run's name: its file and when pytest-benchmark finished writing it (UTC)."""
    stamp = json.loads(path.read_text()).get("datetime", "")
    return f"{path.name} ({stamp[:16].replace('T', ' ')} UTC)" if stamp else path.name


def main(argv: list[str]) -> int:
    if len(argv) < 2:
        print(__doc__, file=sys.stderr)
        return 2
    dst, srcs = Path(argv[0]), [Path(a) for a in argv[1:]]
    text = render([load(s) for s in srcs], [ended(s) for s in srcs])
    dst.write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
