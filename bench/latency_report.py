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
           "--benchmark-json=out/latency.json && .venv/bin/python bench/latency_breakdown.py "
           "out/latency-breakdown.json && .venv/bin/python bench/latency_report.py "
           "out/latency.json docs/results/latency.md out/latency-breakdown.json")


def load(path: Path) -> dict[tuple[str, int, str], dict[str, float]]:
    data = json.loads(path.read_text())
    out: dict[tuple[str, int, str], dict[str, float]] = {}
    for b in data["benchmarks"]:
        info: dict[str, Any] = b["extra_info"]
        out[info["kind"], int(info["nodes"]), info["policy"]] = {
            "p50": info["p50"], "p99": info["p99"],
            # Go-client rows: one pytest-benchmark round runs the Go process, which times
            # each of its calls itself (extra_info).
            "rounds": info.get("rounds", b["stats"]["rounds"]),
            "server": info.get("server_mean", float("nan")),
            "settle": info.get("settle_mean", float("nan")),
            "settle_p99": info.get("settle_p99", float("nan")),
            "by_next": info.get("settled_by_next", float("nan")),
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


#: (benchmark kind, its floor, budget ratio or None for gRPC's 1 ms), in table order.
API_ROWS = (("inprocess", "floor:lookup+dot", BUDGET_INPROCESS),
            ("inprocess-inline", "floor:lookup+dot", BUDGET_INPROCESS),
            ("http", "noop", BUDGET_HTTP), ("http-go", "noop", BUDGET_HTTP),
            ("grpc", "noop", None), ("grpc-go", "noop", None))
API_LABEL = {"inprocess": "in process (caller waits)",
             "inprocess-inline": "in process + settle inline",
             "http": "HTTP, Python client", "http-go": "**HTTP, Go client**",
             "grpc": "gRPC, Python client", "grpc-go": "**gRPC, Go client**"}
JUDGED = [
    "Which rows the budgets are judged on: **the Go-client rows** for HTTP and gRPC. The "
    "production caller of both APIs is kube-scheduler, a Go process: its HTTP extender "
    "client is Go's net/http, and the DSANScore plugin calls `Score` through the generated "
    "Go stubs (`scheduler-plugin/cmd/scorebench` uses the same stubs and gRPC settings, in "
    "its own process, as kube-scheduler is). The Python-client rows stay for continuity "
    "with earlier runs; their client shares the server's process and GIL, so work the "
    "server does after replying (the deferred assumption) still delays the client there. "
    "In process, the budget row is what a caller waits for (`ScoringService.score` with "
    "the assumption deferred, as both APIs serve it); `+ settle inline` is the server's "
    "whole work per request in one call (score, assume, refresh), shown beside it.",
]


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
    for api, floor_name, budget in API_ROWS:
        for n in sizes:
            # The inline in-process row shares the in-process floors.
            fl = res.get((api.removesuffix("-inline"), n, floor_name))
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
            lines.append(f"| {API_LABEL[api]} | {n} | {want} | " + " | ".join(cells) + " |")
    return [*lines, "", *JUDGED, ""]


SERVER_CELL = (
    "Each cell (here and in the three sections below): p50 / p99 as the client sees them, "
    "then the server's own time per request: "
    "`server`, the mean time inside the handler up to the reply (the sidecar's histogram), "
    "and `settle`, the mean time of the deferred assumption it runs after the reply (busy "
    "time per request = server + settle + the framework's own parsing). If the next request "
    "arrives before that settle ran, it applies it first under the scoring lock and waits "
    "for it: the share of requests that did so is given.")
TRANSPORTS = (
    ("http", "## HTTP extender (`POST /dsan/prioritize`), Python client, vs a no-op extender",
     "The no-op app parses the same ExtenderArgs and encodes the same HostPriorityList with "
     "every score 0; one keep-alive `http.client` connection from the benchmark's own "
     "process. Budget: p99 <= 1.5x no-op."),
    ("http-go", "## HTTP extender, Go client (what kube-scheduler sees), vs the same no-op",
     "`scheduler-plugin/cmd/scorebench -kind http`: Go's net/http on one keep-alive "
     "connection, POSTing the same ExtenderArgs bodies and decoding the HostPriorityList, "
     "as kube-scheduler's HTTP extender client does, from its own process. Budget: p99 <= "
     "1.5x no-op."),
    ("grpc", "## gRPC `Score`, Python client, vs a no-op servicer on the same server",
     "Raw request bytes from a grpcio channel on loopback, in the benchmark's own process. "
     "Budget: p99 <= 1 ms at 1,000 nodes (the no-op shows what grpcio itself costs here)."),
    ("grpc-go", "## gRPC `Score`, Go client (what kube-scheduler sees), vs the same no-op",
     "`scheduler-plugin/cmd/scorebench -kind grpc`: the DSANScore plugin's generated Go "
     "stubs and dial options, a per-call deadline, from its own process; the same pods and "
     "candidate lists. Budget: p99 <= 1 ms at 1,000 nodes."),
)


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
        "Reproduce (one command, from the repository root; about 10 minutes; the Go client is "
        "built once into ~/.cache/dsan/bin):",
        "",
        f"    {COMMAND}",
        "",
        f"Measured by `bench/test_score_latency.py` in one pytest-benchmark run ({source}), "
        f"Python {platform.python_version()}, on the shared 2-core development machine "
        "(1-minute load average, which counts the benchmark's own client and server: "
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
        "Each policy cell: p50 / p99 of the call a caller waits for, then `settle` (mean / "
        "p99 of the deferred assumption run between calls, as the servers run it after each "
        "reply), then the same request with the assumption inline (`inline`, p50 / p99).",
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
            inl = res.get(("inprocess-inline", n, p))
            inline = "" if inl is None else f"; inline {us(inl['p50'])} / {us(inl['p99'])}"
            row += (f" {us(r['p50'])} / {us(r['p99'])} (settle {us(r['settle'])} / "
                    f"{us(r['settle_p99'])}{inline}) | "
                    f"{ratio_verdict(r, look, BUDGET_INPROCESS)}; "
                    f"p50 {r['p50'] / look['p50']:.1f}x |")
        lines.append(row)
    for kind, head, text in TRANSPORTS:
        lines += ["", head, "", text, "", *([SERVER_CELL, ""] if kind == "http" else []),
                  "| nodes | no-op | " + " | ".join(
                      f"{p} | {p} {'p99 / no-op p99' if kind.startswith('http') else 'vs budget'}"
                      for p in policies) + " |",
                  "|---|---|" + "---|---|" * len(policies)]
        for n in sizes:
            noop = res.get((kind, n, "noop"))
            if noop is None:
                continue
            row = f"| {n} | {us(noop['p50'])} / {us(noop['p99'])} |"
            for p in policies:
                r = res.get((kind, n, p))
                if r is None:
                    row += " - | - |"
                    continue
                if kind.startswith("http"):
                    note = (f"{ratio_verdict(r, noop, BUDGET_HTTP)}; "
                            f"p50 {r['p50'] / noop['p50']:.2f}x")
                else:
                    note = (verdict(r["p99"] <= BUDGET_GRPC_S) + " 1 ms") if n == 1000 else "-"
                by_next = "" if r["by_next"] != r["by_next"] else \
                    f", {r['by_next'] * 100:.0f} % settled by the next request"
                row += (f" {us(r['p50'])} / {us(r['p99'])} (server {us(r['server'])} + "
                        f"settle {us(r['settle'])}{by_next}) | {note} |")
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

The run on this page was started under `nice -n 10` (this session's rule for benchmarks on
the shared machine), so other engineers' jobs preempted it more than they would an un-niced
rerun. **This machine decides p99, not the sidecar.** Two cores shared by four engineers, 1-minute
load average 3-7 all session: any process loses the CPU for a scheduler slice of ~4 ms now and
then, and 1% of 1,000 calls is 10 calls, so a benchmark's p99 is either its own cost or
4-10 ms, floors and no-op servers included (their p99s above are mostly that). A ratio
against a preempted floor is therefore marked *inconclusive*, and the p50 ratios, the
per-step minima and the before/after table below are the signal. Rerunning the command
at the top at a quiet moment regenerates the tables above (not this text, which describes
the 14:19-14:23 UTC run of 2 Dec 2026).

* **In process, p99 <= 2x lookup+dot: missed at 100 nodes, within reach at 1,000 and 5,000.**
  At 100 nodes the floor is 7-11 us and any request costs ~50 us (per-step table: lookup 3-6,
  class cache 9-23, normalise 5-6, assume with the patched snapshot 13-22, snapshot and
  bookkeeping ~5): 5-8x at p50, not reachable in Python. At 1,000 nodes the request is
  85-100 us against a 41-43 us floor (p50 2.0-2.3x; about 2x on the minima); at 5,000 it is
  ~320 us against 245-330 (1.0-1.3x on the minima, p50 1.0-2.6x in the loaded runs). A
  quiet run should meet 5,000 and sit at the edge at 1,000. DSAN misses everywhere (below).
* **HTTP, p99 <= 1.5x the no-op extender: missed at p50 (1.7-3.3x at 100-1,000 nodes,
  7-9x at 5,000 under load 3-5, where both servers' p50s swing by 2-8x between runs).** Without a
  socket the extender costs fgd 94 / 240 / 950 us (100 / 1,000 / 5,000 nodes) against the
  no-op's parse + encode of ~25 / 90 / 430 us; the difference is the scoring path above
  plus the lookup of freshly decoded names (each hashed for the first time: 8 / 49-57 /
  330-480 us, vs 6 / 30-49 / 190-290 us for names already hashed) and podspec/metrics
  (~15 us). Over loopback the no-op's round trip is ~110-190 us at 100-1,000 nodes, so the
  sidecar adds 0.7-1.3x of it: 1.5x is out of reach at 100 and 5,000 nodes and at the edge
  at 1,000 (quiet estimate 1.6-1.8x).
* **gRPC, p99 <= 1 ms at 1,000 nodes: missed in these runs (p99 5-7 ms: preemptions, the
  no-op's own p99 is 6 ms too), p50 1.0-1.2 ms under load 4-6.** The handler without a
  socket is 160-173 us at 1,000 nodes (was 214-326: before/after table), the grpcio
  no-op round trip 280-500 us depending on load, so a quiet p50 is ~450-650 us and p99
  meets 1 ms whenever the benchmark is not preempted; on this machine in this session it
  always was.

## What changed in this round

Before/after in one time window (`bench/latency_ab.py`, the tree before this round vs this
one, alternated twice, load 3.9-4.4; min / p50 in us over 600 calls, best of two runs; the
same rotated candidate lists, each call assuming a different pod):

| world | step | before | after | p50 speed-up |
|---|---|---|---|---|
| fgd 100 | ScoringService.score | 62 / 144 | 54 / 96 | 1.5x |
| fgd 1000 | ScoringService.score | 203 / 225 | 89 / 99 | 2.3x |
| fgd 5000 | ScoringService.score | 505 / 692 | 322 / 715 | 1.0x (min 1.6x) |
| k8s-default 100 | ScoringService.score | 70 / 140 | 48 / 57 | 2.5x |
| k8s-default 1000 | ScoringService.score | 127 / 135 | 85 / 100 | 1.4x |
| k8s-default 5000 | ScoringService.score | 415 / 641 | 316 / 335 | 1.9x |
| fgd 100 / 1000 / 5000 | ExtenderApp.prioritize (min) | 112 / 362 / 1,077 | 94 / 240 / 952 | |
| fgd 100 / 1000 / 5000 | gRPC handler (min) | 94 / 294 / 822 | 77 / 160 / 593 | |

* **Per-pod-class score cache** (`sidecar/scorecache.py`). A scorer that declares
  `cache_key(pod)` (FGD: CPU, GPU share, GPU count; k8s-default: CPU, memory) and reads only
  the scored node's row gets, per class (its key plus every pod field the feasibility check
  reads), a raw-score vector and a feasibility mask over all nodes. `GraphCache` logs the
  row of every column write; a request recomputes only rows written since the class last
  looked (one or two: the previous winner), then gathers. Exactly the uncached answer:
  `tests/unit/sidecar/test_scorecache.py` runs random sequences of requests, bindings,
  deletions, telemetry, node additions, resizes and removals and compares every response
  with a fresh scorer on the cache's live columns (it catches a missed column in the
  patch below, checked by breaking it). Node-set changes and a trimmed log rebuild the class.
* **Assume in the same critical section, snapshot patched.** The engine assumes the winner
  under the scoring lock and writes the changed rows into the published snapshot, which stays
  current: no O(n) republish on the next request (`snapshot refresh after a change` no
  longer happens per request).
* **FGD `score_rows`**: the rows' fragment before and all what-ifs in one `node_frag` call
  (FGD's own cache did two, plus an O(n) diff of the snapshot), and a memo of the pure
  function (pod shape, free CPU, GPU model, free shares) -> score for calls of <= 16 rows.
  **k8s-default `score_rows`**: <= 8 rows in Python scalars with the same integer and IEEE
  maths. Both hypothesis-tested equal to `score` (`tests/unit/policies/test_policy_score_rows.py`,
  including a model-constrained FGD target where the memo key must carry the GPU model).
* Smaller: `AllocationTracker.sync` diffs the (n, 8) GPU rows through a uint64 view (one
  pass, as `dsan.filtering`'s popcount); `normalize` takes the all-finite case with two
  reductions; `feasible` can check a row subset; `GraphCache._charge` picks best-fit GPUs on
  a Python list of <= 8; handlers resolve their labelled counters once; gRPC scores the
  repeated `node_names` field without copying it to a list.
* **Benchmark honesty.** Candidate lists: kube-scheduler sends the feasible nodes in the
  order its parallel Filter finished them, starting at a `nextStartNodeIndex` that moves
  every cycle (`pkg/scheduler/schedule_one.go`, v1.36.3), so consecutive pods send
  different lists; each request here uses the node list rotated to another start, and the
  floors get the same lists. Our config leaves `percentageOfNodesToScore` unset (adaptive:
  at most 781 candidates, 420 of a 1,000-node and 500 of a 5,000-node cluster), so the
  1,000 and 5,000 rows are upper bounds. DSAN (the sidecar's default policy) is in the same
  run. The load average is recorded before and after each benchmark.

## Looked at and left

* **Memo of the previous request's NodeNames** (list equality is a memcmp per name, cheaper
  than hashing fresh names): kube-scheduler does not send the same list twice in a row
  (above), so it would only ever hit in a benchmark. Not done.
* **The fresh-name lookup** (49-57 us at 1,000 nodes, 330-480 at 5,000) is the largest
  single cost the HTTP and gRPC no-ops do not pay: one dict probe plus one first-time hash
  per name, in C. Nothing cheaper found that keeps arbitrary node names exact.
* **DSAN through the sidecar's `ScoreCache`**: its scores depend on the candidate set
  (min-max columns, "is the best candidate" flags) and on the clock (telemetry ages), so it
  has no `cache_key`; it caches per pod class inside the policy instead, exactly
  (`dsan/model/headcache.py`, see latency_dsan.md).

## Reproduce

Run the command at the top (pytest-benchmark, ~5 min, then the per-step breakdown, ~2 min,
then this page and latency_dsan.md are rewritten). Pieces:

    .venv/bin/python -m pytest -q bench/test_score_latency.py --benchmark-only \\
        --benchmark-json=out/latency.json   # DSAN_BENCH_SIZES / _POLICIES / _ROUNDS narrow it
    .venv/bin/python bench/latency_breakdown.py out/latency-breakdown.json
    .venv/bin/python bench/latency_report.py out/latency.json docs/results/latency.md \\
        out/latency-breakdown.json
"""

_DSAN_NOTES = """
## Reading the DSAN rows

DSAN is the sidecar's default policy (`sidecar/config.py`), measured in the same run as FGD
(same worlds, pods, candidate lists and load). Since session 2 (engineer D) it is served by
an exact per-pod-class head cache (`dsan/model/headcache.py`, used by
`dsan/model/serving.py`): every place the model reads the 128 features is linear first
(attention query, the head's projection, the skip terms, the residual prior), and only 9
columns depend on the request: the 7 candidate-relative ones (min-max ranks, "ties with the
winner" flags) and the 2 telemetry-age ones. So per pod class and node it keeps the
first-layer pre-activations of the other 119 columns and the float64 quantities the
relative columns are computed from; a node's row is recomputed only after its allocation
changed (CPU, memory, GPUs, pod count: usually the one node the previous pod was assumed
onto) or the node embeddings were refreshed (`telemetry_version`), or the weights were
written. Per request: one 9-column matmul, the attention (precomputed per node from the
cached stream keys), one 2H x 2H matmul and the last layer over the candidates, in numpy
float32. The logits equal `model.score(featurize(...))` to float32 rounding (rtol 1e-4) with
the same argmax and normalised scores (`tests/unit/model/test_serving_headcache.py`: random
snapshots and candidate subsets, assumptions, releases, telemetry refreshes, clock advance,
in-place weight updates, near ties). `ServingModel(model, fast=False)` keeps the previous
path (featurize every candidate, torch head).

For the shipped model a request does less: its MLP ignores z (those weights are zero), so
the attention is skipped; and a row whose ReLU layer stays zero for any value of the
relative and age columns (each in [0, 1]) given its current `tel_present` (the shipped
model's telemetry gate) skips the MLP. Both shortcuts are exact for any model (checked per
request: out-of-range request columns or a changed `tel_present` put a row back on the
full path) and only save time where they apply.

The simulator scores through the same `ServingModel`, so openb runs decide identically and
faster: `bench/dsan_openb_eval.py --policies dsan --pods default --seeds 42` gives 4.5919 %
(engineer S's shipped-model number) in 8.6 s against 22.0 s with `fast=False` (one after
the other, load 1.4-2.4); gpuspec20 4.9527 and gpushare100 13.4253 also as published there.

In the breakdown, "policy, uncached" means the sidecar's own `ScoreCache` does not apply
(DSAN has no `cache_key`: its scores depend on the candidate set and the clock); DSAN's
class cache is inside the policy, so "snapshot unchanged" is its pure per-request part and
"after an assumption" adds one changed row (one `featurize` call: ~0.2-0.4 ms of fixed numpy
overhead, now the largest part at 100 and 1,000 nodes). The "dsan reference path" rows time
the previous path (`ServingModel(fast=False)`: featurize every candidate, torch head) in the
same run, same model.

Engineer D's run (15:14 UTC, `DSAN_BENCH_POLICIES=fgd,dsan`, niced, load 0.7-0.9 on 2
cores), per-step minima at 100 / 1,000 / 5,000 nodes: policy with snapshot unchanged 72 /
192 / 714 us vs 557 / 2,006 / 8,078 us for the reference path (7.7x / 10x / 11x); after an
assumption 434 / 577 / 1,133 us vs 692 / 2,174 / 8,492 (1.6x / 3.8x / 7.5x);
`ScoringService.score` 137 / 278 / 1,388 us (0.9 / 2.3 / 7.3 ms in the previous round's
run at load 3.2-5.3). End to end in process p50 / p99: 0.52 / 0.77, 0.68 / 0.98, 1.7 / 2.7
ms (was 1.7 / 10.2, 3.6 / 11.5, 20.9 / 30.5 ms at load 3.2-5.3). **DSAN still misses every
budget**: the in-process floor is tens of microseconds, and DSAN pays per request an
O(candidates) pass plus, after each assumption, one changed row's `featurize` (~0.35 ms
of fixed numpy overhead, now the largest part at 100 and 1,000 nodes); gRPC p99 at 1,000
nodes 5.3 ms (p50 3.0 ms) against 1 ms. Next steps, outside this round: featurize one
changed row without the batch featurizer's fixed overhead (`dsan/features.py`), and do that
row's update off the request path (right after the assumption).
"""


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
