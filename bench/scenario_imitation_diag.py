"""Where a scenario-trained DSAN leaves its teacher: decisions and web SLO misses, one seed.

The models trained on the boot-aware teachers (``dsan.train.teachers.Anchored``) lose Table 1's
SLA to web misses their teacher does not have (docs/results/table1.md). This runs one seed of
the seed scenario with a DSAN model directory and, at every placement, also asks the teacher:

* per pod class (``gpu``, ``web``, batch ``p400`` drivers, ``p100`` executors): decisions,
  decisions outside the teacher's top class (within its ``tolerance``), how far below the
  teacher's best they score (in 100-point bands: the teachers' terms are 100-1000 points), and
  how many of them push a node that hosts a web replica over the contention threshold by
  requests (``overheat``), with the hour they happen;
* every web SLO check that found violations: the time and how many services missed.

Usage::

    DSAN_MODEL_DIR=out/model-anchored .venv/bin/python bench/scenario_imitation_diag.py \\
        --seed 1 --teacher anchored-drivers
    .venv/bin/python bench/scenario_imitation_diag.py --seed 1 --policy teacher

(``--policy teacher`` runs the teacher itself, for its own web misses.)
"""

from __future__ import annotations

import argparse
import collections
import sys
from typing import Any

import numpy as np

import dsan.sim.scenario.progress as progress
from dsan.core.snapshot import ClusterSnapshot, PodSpec
from dsan.features.target import TargetWorkload
from dsan.policies.base import Scorer
from dsan.sim.scenario.config import load
from dsan.sim.scenario.engine import Engine
from dsan.sim.scenario.runner import default_factory, run_policy
from dsan.sim.scenario.workload import Workload
from dsan.train.teachers import SCENARIO_TEACHERS, WEB_TYPE


class Compare:
    """Scores with ``inner`` and tallies where its argmax leaves ``teacher``'s top class."""

    def __init__(self, inner: Scorer, teacher: Any, engine: Engine, threshold: float) -> None:
        self.inner, self.teacher, self.engine, self.threshold = inner, teacher, engine, threshold
        self.select_gpus = inner.select_gpus
        self.stats: collections.Counter[tuple[str, str]] = collections.Counter()

    def score(self, pod: PodSpec, snap: ClusterSnapshot, nodes: np.ndarray) -> np.ndarray:
        s = np.asarray(self.inner.score(pod, snap, nodes), dtype=np.float64)
        t = np.asarray(self.teacher.score(pod, snap, nodes), dtype=np.float64)
        if pod.num_gpu > 0:
            kind = "gpu"
        else:
            kind = "web" if pod.task_type == WEB_TYPE else f"p{pod.priority}"
        self.stats[(kind, "decisions")] += 1
        a = int(np.argmax(s))  # the scheduler's pick up to its random tie-break
        if t[a] >= t.max() - float(getattr(self.teacher, "tolerance", 0.0)):
            return s
        self.stats[(kind, "outside teacher's top class")] += 1
        band = int((t.max() - t[a]) // 100) * 100
        self.stats[(kind, f"below teacher's best by {band}-{band + 99}")] += 1
        eng, n = self.engine, int(nodes[a])
        hosts_web = bool(np.any(eng.pod_node[eng.web_pods] == n))
        after = (snap.cpu_used[n] + pod.cpu_milli) / max(float(snap.cpu_cap[n]), 1.0)
        if hosts_web and after > self.threshold:
            self.stats[(kind, "overheat a web node")] += 1
            self.stats[("overheat by hour", f"{int(eng.now // 3600):02d}")] += 1
        return s


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--teacher", default="anchored-drivers", choices=sorted(SCENARIO_TEACHERS))
    ap.add_argument("--policy", default="dsan", help="dsan (DSAN_MODEL_DIR) or teacher")
    ap.add_argument(
        "--tolerance",
        type=float,
        default=-1.0,
        help="the teacher's top class in points (< 0: its own, 2); the shipped model: 0.1",
    )
    a = ap.parse_args(argv)
    cfg = load("seed-table1")
    box: dict[str, Any] = {}
    misses: list[tuple[float, int]] = []
    check = progress.ct.service_violations

    def logged(*args: Any) -> np.ndarray:
        v = check(*args)
        if v.any():
            misses.append((box["engine"].now / 3600.0, int(v.sum())))
        return v

    def factory(name: str, seed: int, wl: Workload, engine: Engine) -> Scorer:
        box["engine"] = engine
        target = TargetWorkload.from_pods(wl.pods, engine.snap.gpu_models)
        teacher = SCENARIO_TEACHERS[a.teacher](target)
        if a.tolerance >= 0:
            teacher.tolerance = a.tolerance
        if name == "teacher":
            return teacher
        box["cmp"] = Compare(
            default_factory(name, seed, wl, engine), teacher, engine, cfg.contention.threshold
        )
        return box["cmp"]

    setattr(progress.ct, "service_violations", logged)  # noqa: B010 (patched for the run)
    try:
        r = run_policy(cfg, a.policy, a.seed, factory=factory)
    finally:
        setattr(progress.ct, "service_violations", check)  # noqa: B010
    web, train = r["sla_by_kind"]["web"], r["sla_by_kind"]["training"]
    print(
        f"{a.policy} (teacher {a.teacher}), seed {a.seed}: util {r['utilization_pct']:.2f} % "
        f"P99 {r['p99_task_latency_s']:.1f} s SLA {r['sla_violation_pct']:.3f} % "
        f"(web {web['violations']}/{web['items']}, training {train['violations']})"
    )
    if "cmp" in box:
        for (kind, what), n in sorted(box["cmp"].stats.items()):
            print(f"  {kind:16s} {what:34s} {n}")
    for h, n in misses:
        print(f"  web check at {h:5.2f} h: {n} services miss the SLO")
    return 0


if __name__ == "__main__":
    sys.exit(main())
