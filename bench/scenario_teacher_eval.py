"""The scenario teacher (dsan.train.teachers.Composite) in the seed scenario, with the
baselines in the same run: what DSAN's scenario stage imitates, measured as Table 1 rows.

Usage::

    .venv/bin/python bench/scenario_teacher_eval.py --seeds 1-3 --json > out/t1-teacher.json
    .venv/bin/python bench/scenario_table1_report.py out/t1-teacher.json

Optional ``--cool 0.8 --web-cpu 16000`` vary the teacher's two constants (sensitivity).
``anchored-teacher`` is the boot-aware variant (``scenario_teachers.Anchored``, ``--tau``).
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from scenario_teachers import Anchored  # bench/, next to this file

from dsan.features.target import TargetWorkload
from dsan.policies.base import Scorer
from dsan.sim.cli import TABLE_KEYS
from dsan.sim.scenario.config import load
from dsan.sim.scenario.engine import Engine
from dsan.sim.scenario.runner import aggregate, default_factory, run_policy
from dsan.sim.scenario.workload import Workload
from dsan.train.teachers import Composite


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--scenario", default="seed-table1")
    ap.add_argument("--policies", default="k8s-default,tetris,fgd,scenario-teacher")
    ap.add_argument("--seeds", default="1-3")
    ap.add_argument("--hours", type=float, default=None)
    ap.add_argument("--burst", action="store_true")
    ap.add_argument("--cool", type=float, default=0.8)
    ap.add_argument("--web-cpu", type=float, default=16000.0)
    ap.add_argument("--tau", type=float, default=0.0, help="anchored-teacher's fill target")
    ap.add_argument("--json", action="store_true", help="the `dsan sim --json` shape on stdout")
    a = ap.parse_args(argv)
    lo, _, hi = a.seeds.partition("-")
    seeds = list(range(int(lo), int(hi or lo) + 1))
    cfg = load(a.scenario)

    def factory(name: str, seed: int, wl: Workload, engine: Engine) -> Scorer:
        target = TargetWorkload.from_pods(wl.pods, engine.snap.gpu_models)
        if name == "scenario-teacher":
            return Composite(target, cool=a.cool, web_cpu_milli=a.web_cpu)
        if name == "anchored-teacher":  # the boot-aware teacher (scenario_teachers.Anchored)
            return Anchored(target, cool=a.cool, tau=a.tau)
        return default_factory(name, seed, wl, engine)

    table: dict[str, Any] = {}
    for pol in a.policies.split(","):
        runs: list[dict[str, Any]] = []
        for s in seeds:
            r = run_policy(cfg, pol, s, burst=a.burst, hours=a.hours, factory=factory)
            r.pop("series", None)
            runs.append(r)
            print(
                f"{pol} seed {s}: util {r['utilization_pct']:.1f} % P99 "
                f"{r['p99_task_latency_s']:.1f} s SLA {r['sla_violation_pct']:.2f} % "
                f"cost {r['cost']:.0f}",
                file=sys.stderr,
            )
        table[pol] = {**aggregate(runs, TABLE_KEYS), "runs": runs}
    if a.json:  # the shape of `dsan sim --json`, so scenario_table1_report.py reads it
        print(json.dumps(table, indent=2, sort_keys=True, default=str))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
