"""Turn bench/test_score_latency.py's --benchmark-json into docs/results/latency.md (every
policy) and, when the run has DSAN rows, docs/results/latency_dsan.md (DSAN beside FGD).

    .venv/bin/python bench/latency_report.py out/latency.json [docs/results/latency.md \
        [out/latency-breakdown.json]]

The optional third file (bench/latency_breakdown.py) adds the per-step costs of one request.

Ratios are taken between benchmarks of the same run (same machine state), never across runs.
"""

from __future__ import annotations

import json
import platform
import sys
from pathlib import Path
from typing import Any

BUDGET_INPROCESS = 2.0
BUDGET_HTTP = 1.5
BUDGET_GRPC_S = 1e-3
#: The one command that measures everything and rewrites both pages.
COMMAND = (".venv/bin/python -m pytest -q bench/test_score_latency.py --benchmark-only "
           "--benchmark-json=out/latency.json && .venv/bin/python bench/latency_report.py "
           "out/latency.json")


def load(path: Path) -> dict[tuple[str, int, str], dict[str, float]]:
    data = json.loads(path.read_text())
    out: dict[tuple[str, int, str], dict[str, float]] = {}
    for b in data["benchmarks"]:
        info: dict[str, Any] = b["extra_info"]
        out[info["kind"], int(info["nodes"]), info["policy"]] = {
            "p50": info["p50"], "p99": info["p99"], "rounds": b["stats"]["rounds"],
            "server": info.get("server_mean", float("nan")),
            "load": info.get("loadavg_1m", float("nan")),
            "load0": info.get("loadavg_1m_before", info.get("loadavg_1m", float("nan")))}
    return out


def us(s: float) -> str:
    return "-" if s != s else f"{s * 1e6:,.0f}"


def verdict(ok: bool) -> str:
    return "meets" if ok else "misses"


#: A floor whose p99 is this many times its p50 was preempted in its slowest 1% of calls
#: (its own work varies by well under 2x): a p99 ratio against it says nothing.
PREEMPTED = 4.0


def ratio_verdict(r: dict[str, float], floor: dict[str, float], budget: float) -> str:
    ratio = r["p99"] / floor["p99"]
    if floor["p99"] > PREEMPTED * floor["p50"] and ratio <= budget:
        return f"{ratio:.2f}x (inconclusive: the floor's p99 is a preemption)"
    return f"{ratio:.2f}x ({verdict(ratio <= budget)})"


def render_breakdown(steps: dict[str, dict[str, float]]) -> list[str]:
    """Per-step minimum times (us) from bench/latency_breakdown.py, one column per world."""
    cols = list(steps)
    names = list(next(iter(steps.values())))
    lines = [
        "",
        "## Where the time goes (per step, in process)",
        "",
        "Each step of one request timed alone by `bench/latency_breakdown.py` (minimum of 300 "
        "calls, microseconds: the cost of the work itself, without the preemptions that set "
        "the p99 above). Columns are policy and node count; every candidate is a known node.",
        "",
        "| step | " + " | ".join(cols) + " |",
        "|---|" + "---|" * len(cols),
    ]
    for step in names:
        lines.append(f"| {step} | " + " | ".join(
            f"{steps[c].get(step, float('nan')):,.0f}" for c in cols) + " |")
    return lines


def summary(res: dict[tuple[str, int, str], dict[str, float]], policies: list[str]) -> list[str]:
    """One line per (API, size): each policy's p99 against its budget, met or missed."""
    lines = [
        "## Budgets met or missed (this run)",
        "",
        "p99 ratio to the floor of the same run (in process: lookup+dot; HTTP: the no-op "
        "extender), or p99 against 1 ms (gRPC, budgeted at 1,000 nodes only); then the p50 "
        f"ratio. A ratio under budget against a floor whose own p99 is over {PREEMPTED:g}x "
        "its p50 (its slowest calls were preempted by other processes) is marked "
        "inconclusive, not met.",
        "",
        "| API | nodes | budget | " + " | ".join(policies) + " |",
        "|---|---|---|" + "---|" * len(policies),
    ]
    sizes = sorted({n for _, n, _ in res})
    for api, floor_name, budget in (("inprocess", "floor:lookup+dot", BUDGET_INPROCESS),
                                    ("http", "noop", BUDGET_HTTP), ("grpc", "noop", None)):
        for n in sizes:
            fl = res.get((api, n, floor_name))
            if fl is None:
                continue
            cells = []
            for p in policies:
                r = res.get((api, n, p))
                if r is None:
                    cells.append("-")
                elif budget is None:
                    if n == 1000:
                        cells.append(f"{us(r['p99'])} us ({verdict(r['p99'] <= BUDGET_GRPC_S)})")
                    else:
                        cells.append(f"{us(r['p99'])} us (no budget)")
                else:
                    cells.append(f"{ratio_verdict(r, fl, budget)}; "
                                 f"p50 {r['p50'] / fl['p50']:.2f}x")
            want = ("p99 <= 1 ms" if n == 1000 else "-") if budget is None else \
                f"p99 <= {budget:g}x"
            lines.append(f"| {api} | {n} | {want} | " + " | ".join(cells) + " |")
    return [*lines, ""]


def render(res: dict[tuple[str, int, str], dict[str, float]], source: str,
           steps: dict[str, dict[str, float]] | None = None,
           title: str = "# Score latency of the sidecar") -> str:
    sizes = sorted({n for _, n, _ in res})
    loads = [v[k] for v in res.values() for k in ("load", "load0") if v[k] == v[k]]
    rounds = sorted({int(v["rounds"]) for v in res.values()})
    policies = sorted({p for k, _, p in res if k == "inprocess" and not p.startswith("floor")})
    lines = [
        title,
        "",
        "Reproduce (one command, from the repository root; about 10 minutes):",
        "",
        f"    {COMMAND}",
        "",
        f"Measured by `bench/test_score_latency.py` in one pytest-benchmark run ({source}), "
        f"Python {platform.python_version()}, on the shared 2-core development machine "
        "(other engineers' builds and tests ran at the same time: 1-minute load average "
        f"{min(loads, default=float('nan')):.1f}-{max(loads, default=float('nan')):.1f} on 2 "
        f"cores during the run, {', '.join(map(str, rounds))} rounds per benchmark). "
        "Each row's ratio is against its floor from the same run. Every call scores a "
        "different pod than the last (32 pods in turn; each winner is assumed, so a node "
        "changes before every call, while the cluster never fills up), with a different "
        "candidate list (the node list rotated to another start, as kube-scheduler's "
        "`nextStartNodeIndex` and parallel Filter do; floors get the same lists). "
        "Cluster: `sidecar.kubeobjects.cluster(n)` (every 2nd node "
        "with 8 GPUs) with about half the GPUs taken by bound pods; the pod asks for 4 CPUs, "
        "16 GiB and half a GPU.",
        "",
        "Times in microseconds (p50 / p99 as the client sees them; `server` is the mean time "
        "inside the handler, from the sidecar's own histogram).",
        "",
        *summary(res, policies),
        "## In process (`ScoringService.score`) vs a numpy floor",
        "",
        "Floors: `dot` is the dot product of the pod vector with the (n, 4) node vectors "
        "alone; `lookup+dot` also maps the candidate names to rows and gathers them, the least "
        "any scorer does with the same inputs. Budget: p99 <= 2x the floor.",
        "",
        "| nodes | floor dot | floor lookup+dot | " + " | ".join(
            f"{p} | {p} p99 / lookup+dot p99" for p in policies) + " |",
        "|---|---|---|" + "---|---|" * len(policies),
    ]
    for n in sizes:
        dot = res.get(("inprocess", n, "floor:dot"))
        look = res.get(("inprocess", n, "floor:lookup+dot"))
        if dot is None or look is None:
            continue
        row = (f"| {n} | {us(dot['p50'])} / {us(dot['p99'])} "
               f"| {us(look['p50'])} / {us(look['p99'])} |")
        for p in policies:
            r = res.get(("inprocess", n, p))
            if r is None:
                row += " - | - |"
                continue
            row += (f" {us(r['p50'])} / {us(r['p99'])} | "
                    f"{ratio_verdict(r, look, BUDGET_INPROCESS)}; "
                    f"p50 {r['p50'] / look['p50']:.1f}x |")
        lines.append(row)
    lines += [
        "",
        "## HTTP extender (`POST /dsan/prioritize`) vs a no-op extender on the same server",
        "",
        "The no-op app parses the same ExtenderArgs and encodes the same HostPriorityList with "
        "every score 0; one keep-alive `http.client` connection. Budget: p99 <= 1.5x no-op.",
        "",
        "| nodes | no-op | " + " | ".join(f"{p} | {p} p99 / no-op p99" for p in policies) + " |",
        "|---|---|" + "---|---|" * len(policies),
    ]
    for n in sizes:
        noop = res.get(("http", n, "noop"))
        if noop is None:
            continue
        row = f"| {n} | {us(noop['p50'])} / {us(noop['p99'])} |"
        for p in policies:
            r = res.get(("http", n, p))
            if r is None:
                row += " - | - |"
                continue
            row += (f" {us(r['p50'])} / {us(r['p99'])} (server {us(r['server'])}) | "
                    f"{ratio_verdict(r, noop, BUDGET_HTTP)}; p50 {r['p50'] / noop['p50']:.2f}x |")
        lines.append(row)
    lines += [
        "",
        "## gRPC `Score` vs a no-op servicer on the same server",
        "",
        "Raw request bytes from a grpcio channel on loopback. Budget: p99 <= 1 ms at 1,000 "
        "nodes (the no-op shows what grpcio itself costs here).",
        "",
        "| nodes | no-op | " + " | ".join(f"{p} | {p} vs budget" for p in policies) + " |",
        "|---|---|" + "---|---|" * len(policies),
    ]
    for n in sizes:
        noop = res.get(("grpc", n, "noop"))
        if noop is None:
            continue
        row = f"| {n} | {us(noop['p50'])} / {us(noop['p99'])} |"
        for p in policies:
            r = res.get(("grpc", n, p))
            if r is None:
                row += " - | - |"
                continue
            note = (verdict(r["p99"] <= BUDGET_GRPC_S) + " 1 ms") if n == 1000 else "-"
            row += f" {us(r['p50'])} / {us(r['p99'])} (server {us(r['server'])}) | {note} |"
        lines.append(row)
    if steps:
        lines += render_breakdown(steps)
    return "\n".join(lines) + "\n"


def main(argv: list[str]) -> int:
    if not argv:
        print(__doc__, file=sys.stderr)
        return 2
    src = Path(argv[0])
    dst = Path(argv[1]) if len(argv) > 1 else Path("docs/results/latency.md")
    steps = json.loads(Path(argv[2]).read_text()) if len(argv) > 2 else None
    res = load(src)
    text = render(res, src.name, steps)
    dst.parent.mkdir(parents=True, exist_ok=True)
    dst.write_text(text + _NOTES)
    print(text)
    if any(p == "dsan" for _, _, p in res):
        keep = {"dsan", "fgd", "noop"}
        sub = {k: v for k, v in res.items() if k[2] in keep or k[2].startswith("floor")}
        dsan_steps = None if steps is None else {c: v for c, v in steps.items()
                                                 if c.split()[0] in ("dsan", "fgd")}
        (dst.parent / "latency_dsan.md").write_text(render(
            sub, src.name, dsan_steps,
            "# Score latency of the sidecar with DSAN (its default policy), beside FGD")
            + _DSAN_NOTES)
    return 0


_NOTES = """
## Budgets: met or not, and why

Verdicts for the run above (1000 rounds each, un-niced so that `nice` does not add its own
preemptions, load average 4.1-4.5 on 2 cores from other engineers' jobs). A second run a
minute later (load 3.6-3.9) is quoted where it differs: **on this machine p99 is a coin
toss**. Any process loses the CPU for a 4 ms slice now and then, 1% of 1000 calls is 10
calls, so a benchmark's p99 is either its own cost or ~4-5 ms, depending on whether more than
ten of its calls were preempted (seen as p99s of 4,000-5,500 us on floors and no-ops too).
The p50 ratios and the per-step table are the stable signal.

* **In process, p99 <= 2x the floor: not met, and not reachable at 100 or 1,000 nodes.**
  Against the bare dot product (2-7 us) nothing that turns names into rows can be within 2x:
  the lookup alone is 3 / 28-30 / 165-173 us. Against lookup+dot, the sidecar adds a fixed set of
  numpy calls per request (per-step table: snapshot refresh 7-16 us, feasibility 4-11 us,
  normalise 5-9 us, assume 8 us, plus the policy: k8s-default 19-102 us, FGD 56-121 us
  after an assumption), about 45 us before any policy work. At 100 nodes 2x the floor is
  ~15 us, so the budget is out of reach in Python (p50 9.6x k8s-default, 18x FGD); at
  1,000 nodes ~80 us (p50 2.9x / 4.8x); at 5,000 nodes the lookup dominates both sides and
  k8s-default is at p50 1.6x, p99 2.1x (misses) here and 1.1x (meets) in the second run;
  FGD p50 2.0-2.2x.
* **HTTP, p99 <= 1.5x the no-op extender: not met at p50 (2.2-3.3x); p99 at 5,000 nodes met
  by k8s-default here (1.44x; FGD 1.77x misses) and by both in the second run (1.27x /
  1.32x), elsewhere decided by preemptions.** The no-op pays what any extender pays (decode,
  the name-type check, encode) and both got cheaper in this round; the sidecar adds, per
  request, the name lookup on freshly decoded strings (each name hashed for the first time:
  ~50 us at 1,000 nodes, ~290 us at 5,000), the in-process path above and podspec/metrics
  (~10 us). At 100 nodes the no-op's server work is ~15 us against a ~100 us in-process
  path, so 1.5x is out of reach there for any Python scorer; the ratio falls with n because
  transport and codec grow faster than the fixed cost.
* **gRPC, p99 <= 1 ms at 1,000 nodes: met for k8s-default in this run (p50 671, p99 937
  us), missed for FGD (p50 792, p99 3,180 us: preemptions); missed by both in the second
  run (p99 1,447 / 3,000 us, p50 679 / 560 us).** The grpcio no-op round trip alone is
  230-280 us p50 here, the handler 187 us (k8s-default) / 257 us (FGD) of CPU at 1,000
  nodes (per-step table), so p50 is within budget with ~300 us to spare, and p99 meets it
  whenever the benchmark is not preempted.

## What changed in this round (same-run comparisons in the per-step table)

* HTTP codec: orjson (request decode 119 -> 82 us at 5,000 nodes) and a reply encoder that
  escapes all names in one `orjson.dumps` and interleaves them with per-score suffixes in a
  numpy object array (942 -> 248 us at 5,000 nodes, 184 -> 50 us at 1,000) instead of a
  `str.format` per node. The no-op floor uses the same codec (a fair floor, so the HTTP
  ratio got harder, not easier: the sidecar's own work is now a larger share).
* Feasibility: the GPU-share count over the (n, 8) free-share mask is a popcount of each
  row's 8 bool bytes read as one uint64 (`dsan.filtering.feasible`, hypothesis-tested
  against a per-node reference): 76 -> 10 us at 5,000 nodes. numpy's
  `sum(axis=1)` over 8-wide rows costs ~15 ns per node.
* Looked at and left: the snapshot refresh after each assumption copies the live columns
  (O(n), but memcpy: 7-16 us at 100-5,000 nodes); tracking dirty rows would cost as much in
  fancy-indexing calls as it saves. The name lookup is one dict lookup per name in C
  (`np.fromiter(map(index.get, ...))`; `operator.itemgetter` and `list(map(...))` measured
  no faster). The gRPC reply is already a packed uint8 field (no per-node objects).
* Not tried: memoising the previous request's candidate list (list equality is a memcmp per
  name, cheaper than hashing freshly decoded names) would skip the lookup whenever
  kube-scheduler sends the same candidates twice in a row; this benchmark always sends the
  same list, so it would only measure the hit path and flatter the ratios.
* Not ours to change, measured here: FGD's per-snapshot diff
  (`(gpu_free != old).any(axis=1)`) is the same kind of 8-wide row reduction and would
  take the same uint64 view; k8s-default is ~10 numpy passes over the
  candidates (102 us at 5,000 nodes).

## Reproduce

    .venv/bin/python -m pytest -q bench/test_score_latency.py --benchmark-only \\
        --benchmark-json=out/latency.json          # DSAN_BENCH_ROUNDS=1000 for this page
    .venv/bin/python bench/latency_breakdown.py out/latency-breakdown.json
    .venv/bin/python bench/latency_report.py out/latency.json docs/results/latency.md \\
        out/latency-breakdown.json
"""


_DSAN_NOTES = """
"""


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
