"""``dsan sim``: ``openb`` (the FGD protocol) and the scenarios ``seed-table1`` and ``burst``
(JSON to stdout, the progress bar to stderr, the utilisation-over-time PNG to ``--png``)."""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path
from typing import Any

from dsan.policies.registry import MODEL_FREE, POLICY_NAMES, PUBLISHED_POLICIES, make_scorer
from dsan.sim import paths
from dsan.sim.matrix import expand, run_matrix, write_reports
from dsan.sim.openb import load_nodes, load_pods
from dsan.sim.protocol import OpenbConfig, run_openb
from dsan.sim.scenario.config import ScenarioConfig, load
from dsan.sim.scenario.runner import aggregate, run_policy

TABLE_KEYS = (
    "utilization_pct", "cpu_util_pct", "mem_util_pct", "gpu_util_pct", "p99_task_latency_s",
    "sla_violation_pct", "jct_s", "cost", "queueing_events", "mean_wait_s", "preemptions",
    "runtime_s",
)
#: Version 3 scenarios (``--scenario seed-table1-v3``) report these too.
V3_KEYS = ("alloc_utilization_pct", "p99_besteffort_latency_s", "mean_wait_queued_s")


def add_parser(subparsers: argparse._SubParsersAction) -> argparse.ArgumentParser:
    sim = subparsers.add_parser("sim", help="run the cluster simulator (openb, seed-table1, burst)")
    sim_sub = sim.add_subparsers(dest="sim_command", metavar="SIMULATION")
    op = sim_sub.add_parser(
        "openb",
        help="replay the Alibaba openb trace with the FGD paper's protocol",
        description="Replay openb as in Weng et al. (ATC'23): nodes permuted and pods shuffled by "
        "seed, inflated to --tune x GPU capacity, no departures, unplaceable pods dropped.",
    )
    op.add_argument("--pods", nargs="+", help="pod CSV(s) or openb workload names "
                    "(e.g. default cpu050); default: openb_pod_list_default.csv under the traces")
    op.add_argument("--nodes", help="node CSV (default: openb_node_list_gpu_node.csv)")
    op.add_argument("--policy", default="fgd", help=f"a comma list of {', '.join(POLICY_NAMES)}, "
                    "'all' (every baseline) and 'published' (the six with published results); "
                    "'all,dsan' is every policy")
    op.add_argument("--seed", type=int, default=42)
    op.add_argument("--seeds", help="seed range or list, e.g. 42-51 or 42,43")
    op.add_argument("--tune", type=float, default=1.3, help="inflate GPU request to x capacity")
    op.add_argument("--tie-break", choices=("name", "order", "random"), default="order",
                    help="score ties: first in the seed's node permutation (default; matches the "
                    "published FGD numbers), lowest node name, or random (kube-scheduler)")
    op.add_argument("--json", action="store_true", help="single run: print the result as JSON")
    op.add_argument("--out", type=Path, help="matrix: write CSV, table and PNGs here")
    op.add_argument("--jobs", type=int, default=2, help="matrix: worker processes (default 2)")
    op.set_defaults(func=_openb)
    for name, help_text in (
        ("seed-table1", "the article's 24 h mixed AI/batch/web scenario (Table 1 metrics)"),
        ("burst", "the steady mix plus 200 AI training jobs arriving within 10 minutes"),
    ):
        p = sim_sub.add_parser(name, help=help_text, description=help_text)
        p.add_argument("--policies", default="k8s-default,tetris,fgd",
                       help="comma-separated policy names, 'all' or 'published' (as for openb)")
        p.add_argument("--seed", type=int, default=1)
        p.add_argument("--seeds", help="several seeds, e.g. 1-3 or 1,2,3 (mean and sd)")
        p.add_argument("--hours", type=float,
                       help="simulated hours (default: the scenario's; burst: burst.hours)")
        p.add_argument("--scenario", default="seed-table1",
                       help="shipped scenario (seed-table1: version 2, the published Table 1; "
                       "seed-table1-v3: version 3, always-on nodes and an elastic backlog, "
                       "with burst version 2) or a YAML path")
        p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", dest="settings",
                       help="override one scenario setting, dotted, the value as YAML; repeatable "
                       "(e.g. --set scale_up.ready_nodes_first=true --set hours=2)")
        p.add_argument("--json", action="store_true", help="print the result as JSON on stdout")
        p.add_argument("--png", type=Path, help="utilisation-over-time plot path")
        p.add_argument("--jobs", type=int, default=1, help="parallel worker processes")
        p.set_defaults(func=_scenario, burst=name == "burst", scenario_cmd=name)
    sim.set_defaults(func=lambda _a: (sim.print_help(), 2)[1])
    return sim


def parse_seeds(text: str) -> list[int]:
    """``42-44,50`` -> [42, 43, 44, 50]."""
    out: list[int] = []
    for part in text.split(","):
        if "-" in part.strip()[1:]:
            a, b = part.split("-", 1)
            lo, hi = int(a), int(b)
            if hi < lo:
                raise ValueError(f"empty seed range {part!r}")
            out.extend(range(lo, hi + 1))
        elif part.strip():
            out.append(int(part))
    if not out:
        raise ValueError(f"no seeds in {text!r}")
    return out


def parse_policies(text: str) -> list[str]:
    """A comma list of policy names, where ``all`` (every baseline) and ``published`` (the six
    with published results) stand for their members: ``all,dsan`` is every policy."""
    groups = {"all": list(MODEL_FREE),
              "published": list(PUBLISHED_POLICIES)}
    known = f"known: {', '.join(POLICY_NAMES)}, all, published"
    names: list[str] = []
    for part in (p.strip() for p in text.split(",")):
        for name in groups.get(part, [part] if part else []):
            if name not in POLICY_NAMES:
                raise ValueError(f"unknown policy {name!r}; {known}")
            if name not in names:
                names.append(name)
    if not names:
        raise ValueError(f"no policy in {text!r}; {known}")
    return names


def _pod_path(arg: str) -> Path:
    p = Path(arg)
    if p.suffix == ".csv" or p.exists():
        return p
    return paths.openb_csv(f"openb_pod_list_{arg}.csv")


def _openb(args: argparse.Namespace) -> int:
    try:
        return _openb_run(args)
    except (OSError, ValueError) as exc:  # TracesNotFound is an OSError, TraceError a ValueError
        print(f"dsan sim openb: error: {exc}", file=sys.stderr)
        return 2


def _openb_run(args: argparse.Namespace) -> int:
    pods = [_pod_path(a) for a in args.pods] if args.pods else [paths.openb_csv(paths.DEFAULT_PODS)]
    nodes = Path(args.nodes) if args.nodes else paths.openb_csv(paths.DEFAULT_NODES)
    policies = parse_policies(args.policy)
    seeds = parse_seeds(args.seeds) if args.seeds else [args.seed]
    if args.jobs < 1:
        raise ValueError("--jobs must be >= 1")
    base = OpenbConfig(pods=pods[0], nodes=nodes, policy=policies[0], seed=seeds[0],
                       tune=args.tune, tie_break=args.tie_break)
    single = len(pods) == 1 and len(policies) == 1 and len(seeds) == 1 and args.out is None
    if args.tune < 1.0 and not (single and args.json):
        # Table and matrix read each run where the arrived requests reach 100 % of the GPUs;
        # below --tune 1 no run gets there (a single --json run still gives its curves).
        raise ValueError(f"--tune {args.tune} never reaches 100 % arrived; use --tune >= 1 "
                         "(or --json for one run's curves)")
    if single:
        res = run_openb(base)
        if args.json:
            print(json.dumps(res))
        else:
            print(f"{res['workload']} {res['policy']} seed {res['seed']}: unallocated GPU at 100% "
                  f"arrived {res['unallocated_gpu_pct_at_100']:.2f}% ({res['runtime_s']:.1f} s)")
        return 0
    # Validate every input before starting workers, so a bad file fails fast and clearly.
    known = load_nodes(nodes).gpu_models
    for p in pods:
        load_pods(p, known)
    out = args.out or Path("out") / "openb"
    _make_dir(out, f"--out {out}")
    results = run_matrix(run_openb, expand(base, pods, policies, seeds), args.jobs, "openb")
    try:
        published = paths.published("derived_summary_by_policy.csv")
    except paths.TracesNotFound:
        published = None
    table, pngs = write_reports(results, out, published)
    print(table)
    print(f"\nCSV: {out / 'analysis_allo_discrete.csv'}")
    for png in pngs:
        print(f"plot: {png}")
    return 0


def _make_dir(path: Path, what: str) -> None:
    """Create an output folder now, so an unusable one fails before the runs, not after."""
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise OSError(f"{what}: cannot create the folder {path}: {exc.strerror or exc}") from None


def _check_available(policies: list[str]) -> None:
    """Build each scorer once so a missing model fails before hours of simulation."""
    for p in policies:
        try:
            make_scorer(p, seed=0)
        except (ValueError, OSError) as exc:
            raise ValueError(f"policy {p!r} is not available: {exc}") from None


def _one(job: tuple[ScenarioConfig, str, int, bool, float | None]) -> dict[str, Any]:
    cfg, policy, seed, burst, hours = job
    return run_policy(cfg, policy, seed, burst=burst, hours=hours)


def plot(results: dict[str, list[dict[str, Any]]], path: Path, title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax, ax2) = plt.subplots(2, 1, figsize=(8, 6), sharex=True)
    for policy, runs in results.items():
        r = runs[0]
        t = [x / 3600.0 for x in r["series"]["t_s"]]
        ax.plot(t, r["series"]["utilization_pct"], label=f"{policy} (seed {r['seed']})")
        ax2.plot(t, r["series"]["nodes_on"], label=policy)
    v3 = any("alloc_utilization_pct" in runs[0] for runs in results.values())
    ax.set_ylabel("measured use, all nodes (%)" if v3 else "utilisation of powered-on nodes (%)")
    ax.set_title(title)
    ax.legend()
    ax2.set_xlabel("simulated hour")
    ax2.set_ylabel("powered-on nodes")
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def _scenario(args: argparse.Namespace) -> int:
    try:
        cfg = load(args.scenario, args.settings)
        policies = parse_policies(args.policies)
        seeds = parse_seeds(args.seeds) if args.seeds else [args.seed]
        hours = args.hours if args.hours is not None else (
            cfg.burst.hours if args.burst else cfg.hours)
        if not math.isfinite(hours):
            raise ValueError(f"--hours must be a finite number, got {hours}")
        if hours <= 0:
            raise ValueError("--hours must be > 0")
        if args.jobs < 1:
            raise ValueError("--jobs must be >= 1")
        _check_available(policies)
        png = args.png or Path("out") / f"{args.scenario_cmd}-seed{seeds[0]}.png"
        _make_dir(png.parent, f"--png {png}")
    except (ValueError, OSError) as exc:
        print(f"dsan sim {args.scenario_cmd}: {exc}", file=sys.stderr)
        return 2
    todo = [(cfg, p, s, args.burst, hours) for p in policies for s in seeds]
    results: dict[str, list[dict[str, Any]]] = {p: [] for p in policies}
    for r in run_matrix(_one, todo, args.jobs, args.scenario_cmd):
        results[r["policy"]].append(r)
    table: dict[str, Any] = {}
    for p, runs in results.items():
        if len(runs) == 1:
            table[p] = {k: v for k, v in runs[0].items() if k != "series"}
        else:
            table[p] = aggregate(runs, TABLE_KEYS + tuple(k for k in V3_KEYS if k in runs[0]))
            table[p]["runs"] = [{k: v for k, v in r.items() if k != "series"} for r in runs]
    if args.json:
        print(json.dumps(table, indent=2, sort_keys=True))
    else:
        for p, row in table.items():
            cells = ", ".join(f"{k}={row[k]:.2f}" for k in TABLE_KEYS if k in row)
            print(f"{p}: {cells}")
    try:  # after the table: a plot that cannot be written does not lose the runs' results
        plot(results, png, f"dsan sim {args.scenario_cmd}: utilisation over time")
    except OSError as exc:
        print(f"dsan sim {args.scenario_cmd}: cannot write the plot {png}: "
              f"{exc.strerror or exc}", file=sys.stderr)
        return 1
    print(f"plot: {png}", file=sys.stderr)
    return 0
