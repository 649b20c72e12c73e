"""``dsan sim``: the simulator's subcommands. ``openb`` is here; the scenario simulator
(``seed-table1``, ``burst``) registers itself from :mod:`dsan.sim.scenario.cli` when present."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from dsan.policies.registry import POLICY_NAMES


def add_parser(subparsers: argparse._SubParsersAction) -> argparse.ArgumentParser:
    sim = subparsers.add_parser("sim", help="run the cluster simulator (openb, seed-table1, burst)")
    sim_sub = sim.add_subparsers(dest="sim_command", metavar="SIMULATION")
    op = sim_sub.add_parser(
        "openb",
        help="replay the Alibaba openb trace with the FGD paper's protocol",
        description="Replay openb as in Weng et al. (ATC'23): nodes permuted and pods shuffled by "
        "seed, inflated to --tune x GPU capacity, no departures, unplaceable pods dropped.",
    )
    op.add_argument(
        "--pods",
        nargs="+",
        default=None,
        help="pod CSV(s) or openb workload names "
        "(e.g. default cpu050); default: openb_pod_list_default.csv under the traces",
    )
    op.add_argument(
        "--nodes", default=None, help="node CSV (default: openb_node_list_gpu_node.csv)"
    )
    op.add_argument(
        "--policy",
        default="fgd",
        help=f"a comma list of {', '.join(POLICY_NAMES)}, 'all' (every baseline) and "
        "'published' (the six with published results); 'all,dsan' is every policy",
    )
    op.add_argument("--seed", type=int, default=42)
    op.add_argument("--seeds", default=None, help="seed range or list, e.g. 42-51 or 42,43")
    op.add_argument(
        "--tune", type=float, default=1.3, help="inflate GPU request to this x capacity"
    )
    op.add_argument(
        "--tie-break",
        choices=("name", "order", "random"),
        default="order",
        help="score ties: first in the seed's node permutation (default; matches the "
        "published FGD numbers), lowest node name, or random (kube-scheduler)",
    )
    op.add_argument("--json", action="store_true", help="single run: print the result as JSON")
    op.add_argument("--out", type=Path, default=None, help="matrix: write CSV, table and PNGs here")
    op.add_argument("--jobs", type=int, default=2, help="matrix: worker processes (default 2)")
    op.set_defaults(func=_openb)
    try:
        from dsan.sim.scenario import cli as scenario_cli
    except ImportError:
        scenario_cli = None  # type: ignore[assignment]
    if scenario_cli is not None and hasattr(scenario_cli, "add"):
        scenario_cli.add(sim_sub)
    sim.set_defaults(func=lambda _a: (sim.print_help(), 2)[1])
    return sim


def _seeds(text: str) -> list[int]:
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


def _policies(text: str) -> list[str]:
    """A comma list of policy names, where ``all`` (every baseline) and ``published`` (the six
    with published results) stand for their members: ``all,dsan`` is every policy."""
    from dsan.policies.registry import PUBLISHED_POLICIES

    groups = {
        "all": [p for p in POLICY_NAMES if p != "dsan"],
        "published": list(PUBLISHED_POLICIES),
    }
    names: list[str] = []
    for part in (p.strip() for p in text.split(",")):
        for name in groups.get(part, [part] if part else []):
            if name not in POLICY_NAMES:
                raise ValueError(
                    f"unknown policy {name!r}; known: {', '.join(POLICY_NAMES)}, all, published"
                )
            if name not in names:
                names.append(name)
    if not names:
        raise ValueError(f"no policy in {text!r}; known: {', '.join(POLICY_NAMES)}, all, published")
    return names


def _pod_path(arg: str) -> Path:
    from dsan.sim import paths

    p = Path(arg)
    if p.suffix == ".csv" or p.exists():
        return p
    return paths.openb_csv(f"openb_pod_list_{arg}.csv")


def _openb(args: argparse.Namespace) -> int:
    from dsan.sim import paths
    from dsan.sim.openb import TraceError

    try:
        return _openb_run(args)
    except (TraceError, paths.TracesNotFound, ValueError) as exc:
        print(f"dsan sim openb: error: {exc}", file=sys.stderr)
        return 2


def _openb_run(args: argparse.Namespace) -> int:
    from dsan.sim import paths
    from dsan.sim.protocol import OpenbConfig, run_openb

    pods = [_pod_path(a) for a in args.pods] if args.pods else [paths.openb_csv(paths.DEFAULT_PODS)]
    nodes = Path(args.nodes) if args.nodes else paths.openb_csv(paths.DEFAULT_NODES)
    policies = _policies(args.policy)
    seeds = _seeds(args.seeds) if args.seeds else [args.seed]
    if args.jobs < 1:
        raise ValueError("--jobs must be >= 1")
    base = OpenbConfig(
        pods=pods[0],
        nodes=nodes,
        policy=policies[0],
        seed=seeds[0],
        tune=args.tune,
        tie_break=args.tie_break,
    )
    single = len(pods) == 1 and len(policies) == 1 and len(seeds) == 1 and args.out is None
    if single:
        res = run_openb(base)
        if args.json:
            print(json.dumps(res))
        else:
            print(
                f"{res['workload']} {res['policy']} seed {res['seed']}: unallocated GPU at 100% "
                f"arrived {res['unallocated_gpu_pct_at_100']:.2f}% ({res['runtime_s']:.1f} s)"
            )
        return 0
    from dsan.sim.matrix import expand, run_matrix, write_reports

    # Validate every input before starting workers, so a bad file fails fast and clearly.
    from dsan.sim.openb import load_nodes, load_pods

    known = load_nodes(nodes).gpu_models
    for p in pods:
        load_pods(p, known)
    out = args.out or Path("out") / "openb"
    results = run_matrix(expand(base, pods, policies, seeds), jobs=args.jobs)
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
