"""Table 1 on variants of the seed scenario, every policy side by side, one table.

    DSAN_TRACES=../shared/traces .venv/bin/python bench/scenario_variants.py \
        --seeds 1-3 --policies k8s-default,tetris,fgd,dsan --variants ca,warm32,warm64,name

Variants (docs/results/table1.md and docs/model.md, *Known limits*):

* ``shipped``: the scenario as shipped (Table 1 itself);
* ``ca``: cluster-autoscaler semantics, ``scale_up.ready_nodes_first`` (a pod is offered the
  Ready nodes that fit, else the booting ones, else the powered-off ones);
* ``warm32`` / ``warm64``: ``ca`` plus 32 / 64 placeholder pods of 8 cores
  (``overprovisioning.pods``), the cluster-autoscaler's warm capacity;
* ``name``: score ties to the lowest node name, as the sidecar breaks them (``tie_break``);
* ``gpu-telemetry``: only the GPU nodes report telemetry (a device plugin on GPU nodes
  only): the CPU nodes' samples are withheld from the snapshot the policy reads (age
  infinite, samples zero). Only DSAN reads telemetry; the baselines' rows equal ``shipped``.

Every row: mean utilisation %, P99 task latency s (per seed), SLA violation %, cost, and the
summed web windows missed / training jobs started late. The simulator is deterministic per
seed, so machine load changes only the run time.
"""

from __future__ import annotations

import argparse
import sys
from concurrent.futures import ProcessPoolExecutor
from typing import Any

import numpy as np

from dsan.sim.scenario.config import ScenarioConfig, load
from dsan.sim.scenario.engine import Engine
from dsan.sim.scenario.runner import default_factory
from dsan.sim.scenario.workload import generate
from dsan.sim.scheduler import name_rank, select_node

CA = ("scale_up.ready_nodes_first=true",)
VARIANTS: dict[str, tuple[str, ...]] = {
    "shipped": (),
    "ca": CA,
    "warm32": (*CA, "overprovisioning.pods=32"),
    "warm64": (*CA, "overprovisioning.pods=64"),
    "name": ("tie_break=name",),
    "gpu-telemetry": (),
}


class GpuOnlyTelemetry(Engine):
    """The engine with the CPU nodes' telemetry withheld from the snapshot policies read."""

    def _sample_telemetry(self, t1: float) -> None:
        super()._sample_telemetry(t1)
        s = self.snap
        assert s.telemetry is not None and s.telemetry_age_s is not None
        cpu = s.gpu_count == 0
        s.telemetry[cpu] = 0.0
        s.telemetry_age_s[cpu] = np.inf


def run(job: tuple[str, str, int, float | None]) -> dict[str, Any]:
    variant, policy, seed, hours = job
    cfg: ScenarioConfig = load("seed-table1", VARIANTS[variant])
    wl = generate(cfg, seed, False)
    engine_cls = GpuOnlyTelemetry if variant == "gpu-telemetry" else Engine
    engine = engine_cls(cfg, seed, hours=hours, workload=wl)
    scorer = default_factory(policy, seed, wl, engine)
    engine.attach(scorer)
    rng = np.random.default_rng(seed)
    tie_rank = name_rank(engine.snap.names) if cfg.tie_break == "name" else None
    gen = engine.decisions()
    try:
        d = next(gen)
        while True:
            node = select_node(d.pod, d.snapshot, scorer, rng, d.nodes, tie_rank)
            assert node is not None  # d.nodes is never empty
            d = gen.send(node)
    except StopIteration:
        pass
    out = engine.summary()
    out.update(variant=variant, policy=policy, seed=seed)
    return out


def row(runs: list[dict[str, Any]]) -> str:
    def mean(k: str) -> float:
        return float(np.mean([r[k] for r in runs]))

    p99 = " / ".join(f"{r['p99_task_latency_s']:.1f}" for r in runs)
    web = sum(r["sla_by_kind"]["web"]["violations"] for r in runs)
    late = sum(r["sla_by_kind"]["training"]["violations"] for r in runs)
    r0 = runs[0]
    return (
        f"| {r0['variant']} | {r0['policy']} | {mean('utilization_pct'):.2f} | "
        f"{mean('p99_task_latency_s'):.1f} ({p99}) | {mean('sla_violation_pct'):.3f} | "
        f"{mean('cost'):.0f} | {web} / {late} |"
    )


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", default="1-3", help="a range, e.g. 1-3")
    ap.add_argument("--policies", default="k8s-default,tetris,fgd,dsan")
    ap.add_argument("--variants", default="ca,warm32,warm64,name,gpu-telemetry")
    ap.add_argument("--hours", type=float, default=None, help="simulated hours (default 24)")
    ap.add_argument("--jobs", type=int, default=1, help="worker processes")
    a = ap.parse_args(argv)
    lo, _, hi = a.seeds.partition("-")
    seeds = range(int(lo), int(hi or lo) + 1)
    variants = a.variants.split(",")
    unknown = [v for v in variants if v not in VARIANTS]
    if unknown:
        ap.error(f"unknown variants {unknown}; known: {', '.join(VARIANTS)}")
    policies = a.policies.split(",")
    todo = [(v, p, s, a.hours) for v in variants for p in policies for s in seeds]
    with ProcessPoolExecutor(max_workers=a.jobs) as pool:
        results = list(pool.map(run, todo))
    print("| variant | policy | util % | P99 s (per seed) | SLA % | cost "
          "| web windows missed / late training starts |")
    print("|---|---|---|---|---|---|---|")
    for v in variants:
        for p in policies:
            print(row([r for r in results if r["variant"] == v and r["policy"] == p]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
