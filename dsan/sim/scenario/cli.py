"""``dsan sim seed-table1`` and ``dsan sim burst``: parse, run, print JSON, plot.

Registered by :mod:`dsan.sim.cli` through :func:`add`. JSON goes to stdout, the progress bar
to stderr, the utilisation-over-time PNG to ``--png`` (default under ``out/``).
"""

from __future__ import annotations

import argparse
import json
import sys
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

from dsan.sim.scenario.config import ScenarioConfig, load
from dsan.sim.scenario.runner import aggregate, run_policy

TABLE_KEYS = (
    "utilization_pct",
    "cpu_util_pct",
    "mem_util_pct",
    "gpu_util_pct",
    "p99_task_latency_s",
    "sla_violation_pct",
    "jct_s",
    "cost",
    "queueing_events",
    "mean_wait_s",
    "preemptions",
    "runtime_s",
)


def add(sim_sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg,unused-ignore]
    for name, help_text in (
        ("seed-table1", "the article's 24 h mixed AI/batch/web scenario (Table 1 metrics)"),
        ("burst", "the steady mix plus 200 AI training jobs arriving within 10 minutes"),
    ):
        p = sim_sub.add_parser(name, help=help_text, description=help_text)
        p.add_argument(
            "--policies",
            default="k8s-default,tetris,fgd",
            help="comma-separated policy names (see dsan.policies.registry)",
        )
        p.add_argument("--seed", type=int, default=1)
        p.add_argument(
            "--seeds", default=None, help="several seeds, e.g. 1-3 or 1,2,3 (mean and sd)"
        )
        p.add_argument(
            "--hours",
            type=float,
            default=None,
            help="simulated hours (default: the scenario's; burst: burst.hours)",
        )
        p.add_argument(
            "--scenario", default="seed-table1", help="shipped scenario name or YAML path"
        )
        p.add_argument(
            "--set",
            action="append",
            default=[],
            metavar="KEY=VALUE",
            dest="settings",
            help="override one scenario setting, dotted, the value as YAML; repeatable "
            "(e.g. --set scale_up.ready_nodes_first=true --set overprovisioning.pods=32)",
        )
        p.add_argument("--json", action="store_true", help="print the result as JSON on stdout")
        p.add_argument("--png", type=Path, default=None, help="utilisation-over-time plot path")
        p.add_argument("--jobs", type=int, default=1, help="parallel worker processes")
        p.set_defaults(func=_main, burst=name == "burst", scenario_cmd=name)


def parse_seeds(args: argparse.Namespace) -> list[int]:
    if not args.seeds:
        return [args.seed]
    out: list[int] = []
    for part in str(args.seeds).split(","):
        part = part.strip()
        if "-" in part[1:]:
            lo, hi = (int(x) for x in part.split("-", 1))
            if hi < lo:
                raise ValueError(f"empty seed range {part!r}")
            out.extend(range(lo, hi + 1))
        elif part:
            out.append(int(part))
    if not out:
        raise ValueError(f"no seeds in {args.seeds!r}")
    return out


def parse_policies(text: str) -> list[str]:
    from dsan.policies.registry import POLICY_NAMES

    names = [p.strip() for p in text.split(",") if p.strip()]
    bad = [p for p in names if p not in POLICY_NAMES]
    if not names or bad:
        raise ValueError(f"unknown policy {bad or text!r}; known: {', '.join(POLICY_NAMES)}")
    return names


def _check_available(policies: list[str]) -> None:
    """Build each scorer once so a missing model fails before hours of simulation."""
    from dsan.policies.registry import make_scorer

    for p in policies:
        try:
            make_scorer(p, seed=0)
        except (ValueError, OSError) as exc:
            raise ValueError(f"policy {p!r} is not available: {exc}") from None


def _one(job: tuple[ScenarioConfig, str, int, bool, float | None]) -> dict[str, Any]:
    cfg, policy, seed, burst, hours = job
    return run_policy(cfg, policy, seed, burst=burst, hours=hours)


def run_matrix(
    cfg: ScenarioConfig,
    policies: list[str],
    seeds: list[int],
    burst: bool,
    hours: float,
    jobs: int = 1,
) -> dict[str, list[dict[str, Any]]]:
    """Every (policy, seed) run, side by side, with a tqdm bar on stderr (simulated hours)."""
    from tqdm import tqdm

    todo = [(cfg, p, s, burst, hours) for p in policies for s in seeds]
    results: dict[str, list[dict[str, Any]]] = {p: [] for p in policies}
    minutes = round(hours * 60)
    with tqdm(
        total=minutes * len(todo),
        unit="sim-min",
        file=sys.stderr,
        desc="seed-table1" if not burst else "burst",
    ) as bar:
        if jobs <= 1:
            for cfg_, p, s, b, h in todo:
                done = [0]

                def tick(t_s: float, done: list[int] = done) -> None:
                    m = int(t_s // 60)
                    bar.update(m - done[0])
                    done[0] = m

                r = run_policy(cfg_, p, s, burst=b, hours=h, progress=tick)
                bar.update(minutes - done[0])
                bar.set_postfix(policy=p, seed=s, util=f"{r['utilization_pct']:.1f}%")
                results[p].append(r)
        else:
            with ProcessPoolExecutor(max_workers=jobs) as pool:
                for r in pool.map(_one, todo):
                    bar.update(minutes)
                    results[r["policy"]].append(r)
    return results


def plot(results: dict[str, list[dict[str, Any]]], path: Path, title: str) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax, ax2) = plt.subplots(2, 1, figsize=(8, 6), sharex=True)
    for policy, runs in results.items():
        r = runs[0]
        t = [x / 3600.0 for x in r["series"]["t_s"]]
        ax.plot(t, r["series"]["utilization_pct"], label=f"{policy} (seed {r['seed']})")
        ax2.plot(t, r["series"]["nodes_on"], label=policy)
    ax.set_ylabel("utilisation of powered-on nodes (%)")
    ax.set_title(title)
    ax.legend()
    ax2.set_xlabel("simulated hour")
    ax2.set_ylabel("powered-on nodes")
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


def _main(args: argparse.Namespace) -> int:
    try:
        cfg = load(args.scenario, args.settings)
        policies = parse_policies(args.policies)
        seeds = parse_seeds(args)
        hours = (
            args.hours if args.hours is not None else (cfg.burst.hours if args.burst else cfg.hours)
        )
        if hours <= 0:
            raise ValueError("--hours must be > 0")
        if args.jobs < 1:
            raise ValueError("--jobs must be >= 1")
        _check_available(policies)
    except (ValueError, OSError) as exc:
        print(f"dsan sim {args.scenario_cmd}: {exc}", file=sys.stderr)
        return 2
    results = run_matrix(cfg, policies, seeds, args.burst, hours, args.jobs)
    table: dict[str, Any] = {}
    for p, runs in results.items():
        if len(runs) == 1:
            table[p] = {k: v for k, v in runs[0].items() if k != "series"}
        else:
            table[p] = aggregate(runs, TABLE_KEYS)
            table[p]["runs"] = [{k: v for k, v in r.items() if k != "series"} for r in runs]
    png = args.png or Path("out") / f"{args.scenario_cmd}-seed{seeds[0]}.png"
    plot(results, png, f"dsan sim {args.scenario_cmd}: utilisation over time")
    if args.json:
        print(json.dumps(table, indent=2, sort_keys=True))
    else:
        for p, row in table.items():
            cells = ", ".join(f"{k}={row[k]:.2f}" for k in TABLE_KEYS if k in row)
            print(f"{p}: {cells}")
    print(f"plot: {png}", file=sys.stderr)
    return 0
