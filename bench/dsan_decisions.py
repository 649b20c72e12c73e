"""DSAN's placements on openb and on the seed-table1 scenario, as a compact record that two
builds can be compared on: ``tests/unit/policies/test_dsan_decisions.py`` checks the served
code against ``tests/data/dsan_decisions.json``, recorded by this script.

    DSAN_TRACES=../shared/traces .venv/bin/python bench/dsan_decisions.py \\
        tests/data/dsan_decisions.json [--pods 1000]

openb: the FGD protocol's first ``--pods`` pods of each workload and seed (nodes permuted and
pods shuffled by the seed, as ``dsan sim openb``), each placement's node index, or -1 when
no node fits.
seed-table1: the scenario's first simulated hour, its metrics.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

import numpy as np

#: (workload, seed) pairs recorded; small enough for the unit tier.
OPENB_RUNS = (("default", 42), ("gpushare100", 43), ("multigpu50", 44), ("cpu250", 45))


def openb_decisions(workload: str, seed: int, pods: int | None) -> list[int]:
    from dsan.features.target import TargetWorkload
    from dsan.policies.registry import make_scorer
    from dsan.sim import paths
    from dsan.sim.openb import load_nodes, load_pods
    from dsan.sim.protocol import tie_ranks, tuned_order
    from dsan.sim.scheduler import schedule_one

    nodes = load_nodes(paths.openb_csv(paths.DEFAULT_NODES))
    trace = load_pods(paths.openb_csv(f"openb_pod_list_{workload}.csv"), nodes.gpu_models)
    rng = np.random.default_rng(seed)
    snap = nodes.snapshot(rng.permutation(len(nodes)))
    specs = trace.pod_specs(snap.gpu_models)
    target = TargetWorkload.from_pods(specs, snap.gpu_models)
    req = trace.gpu_request_milli()
    order = tuned_order(req, 1000 * int(snap.gpu_count.sum()), 1.3, rng)
    scorer = make_scorer("dsan", seed=seed, target_workload=target)
    tie_rank = tie_ranks("order", snap)
    out = []
    for i in order[:pods]:
        where = schedule_one(specs[i], snap, scorer, rng, tie_rank)
        out.append(-1 if where is None else int(where[0]))
    return out


#: Simulated hours and seed of the seed-table1 record.
TABLE1_HOURS, TABLE1_SEED = 1.0, 1


def table1() -> dict[str, Any]:
    from dsan.sim.scenario.config import load
    from dsan.sim.scenario.runner import run_policy

    res = run_policy(load("seed-table1"), "dsan", TABLE1_SEED, hours=TABLE1_HOURS)
    return {k: v for k, v in res.items() if isinstance(v, int | float) and k != "runtime_s"}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("out", type=Path)
    ap.add_argument("--pods", type=int, default=1000)
    args = ap.parse_args(argv)
    rec: dict[str, Any] = {"pods": args.pods, "openb": {}}
    for workload, seed in OPENB_RUNS:
        rec["openb"][f"{workload}/{seed}"] = openb_decisions(workload, seed, args.pods)
        print(workload, seed, "done", file=sys.stderr)
    rec["seed-table1"] = table1()
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(rec, separators=(",", ":")) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
