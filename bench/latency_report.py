"""Turn bench/test_score_latency.py's --benchmark-json into docs/results/latency.md.

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


def load(path: Path) -> dict[tuple[str, int, str], dict[str, float]]:
    data = json.loads(path.read_text())
    out: dict[tuple[str, int, str], dict[str, float]] = {}
    for b in data["benchmarks"]:
        info: dict[str, Any] = b["extra_info"]
        out[info["kind"], int(info["nodes"]), info["policy"]] = {
            "p50": info["p50"], "p99": info["p99"], "rounds": b["stats"]["rounds"],
            "server": info.get("server_mean", float("nan")),
            "load": info.get("loadavg_1m", float("nan"))}
    return out


def us(s: float) -> str:
    return "-" if s != s else f"{s * 1e6:,.0f}"


def verdict(ok: bool) -> str:
    return "meets" if ok else "misses"


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


def render(res: dict[tuple[str, int, str], dict[str, float]], source: str,
           steps: dict[str, dict[str, float]] | None = None) -> str:
    sizes = sorted({n for _, n, _ in res})
    loads = [v["load"] for v in res.values() if v["load"] == v["load"]]
    rounds = sorted({int(v["rounds"]) for v in res.values()})
    policies = sorted({p for k, _, p in res if k == "inprocess" and not p.startswith("floor")})
    lines = [
        "# Score latency of the sidecar",
        "",
        f"Measured by `bench/test_score_latency.py` in one pytest-benchmark run ({source}), "
        f"Python {platform.python_version()}, on the shared 2-core development machine "
        "(other engineers' builds and tests ran at the same time: 1-minute load average "
        f"{min(loads, default=float('nan')):.1f}-{max(loads, default=float('nan')):.1f} on 2 "
        f"cores during the run, {', '.join(map(str, rounds))} rounds per benchmark). "
        "Each row's ratio is against its floor from the same run. Every call scores a "
        "different pod than the last (32 pods in turn; each winner is assumed, so the "
        "snapshot is refreshed before every call, while the cluster never fills up). "
        "Cluster: `sidecar.kubeobjects.cluster(n)` (every 2nd node "
        "with 8 GPUs) with about half the GPUs taken by bound pods; the pod asks for 4 CPUs, "
        "16 GiB and half a GPU.",
        "",
        "Times in microseconds (p50 / p99 as the client sees them; `server` is the mean time "
        "inside the handler, from the sidecar's own histogram).",
        "",
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
            ratio = r["p99"] / look["p99"]
            row += (f" {us(r['p50'])} / {us(r['p99'])} | {ratio:.1f}x "
                    f"({verdict(ratio <= BUDGET_INPROCESS)}); p50 {r['p50'] / look['p50']:.1f}x |")
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
            ratio = r["p99"] / noop["p99"]
            row += (f" {us(r['p50'])} / {us(r['p99'])} (server {us(r['server'])}) | {ratio:.2f}x "
                    f"({verdict(ratio <= BUDGET_HTTP)}); p50 {r['p50'] / noop['p50']:.2f}x |")
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
    text = render(load(src), src.name, steps)
    dst.parent.mkdir(parents=True, exist_ok=True)
    dst.write_text(text + _NOTES)
    print(text)
    return 0


_NOTES = """
## Reading the numbers

* **p99 on this machine is mostly the OS scheduler's.** With a load average of several
  runnable processes per core (above) every process loses the CPU for multi-millisecond
  slices, so the slowest few of a few
  hundred calls are preemptions of whichever benchmark was running, and p99 ratios swing
  either way between runs (a no-op with a worse tail than the real server is that). The p50
  ratios beside every p99 ratio and the server-side means are the stable signal.
* **In process**, the sidecar adds a fixed cost of a few dozen numpy calls per pod (snapshot
  refresh after the previous pod's assumption, feasibility on its own view, normalisation,
  assuming the winner) on top of the policy. Against a bare dot product of a few
  microseconds no Python scorer is within 2x; against lookup+dot (names must become rows in
  any scorer) the ratio falls as the node count grows.
* **HTTP**: both servers pay the JSON decoding of the request and the encoding of the reply;
  the sidecar adds the name lookups (hashing every freshly decoded name) and the policy.
  During development the same benchmark measured 6-15x the no-op at p50 until the sidecar
  called `gc.freeze()` after its informers synced: full collections of a large heap had
  landed on the request path.
* **gRPC**: the no-op row is grpcio's own round trip on this machine; the server-side mean
  shows what the sidecar adds to it.
* **Run to run** (observed on 2 Dec 2026 while writing this): the HTTP p50 ratio at 5,000
  nodes for k8s-default ranged from 1.5x (the HTTP benchmarks run alone, load ~7) to 3.9x
  (the whole suite, load ~9), so compare rows of one run only.
"""




if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
