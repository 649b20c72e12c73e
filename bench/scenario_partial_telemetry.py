"""DSAN on the seed scenario when only the GPU nodes report telemetry (docs/model.md, limits).

A real cluster often runs the device plugin (our telemetry source) on GPU nodes only. The
scenario stage's residual is gated by ``tel_present``, so telemetry-less candidates get one
constant per pod that training never compared with the live rows. This reruns Table 1 for
DSAN with the CPU nodes' telemetry withheld (age = inf, samples zero, after every sample),
beside the same model with full telemetry, in one process, same seeds.

Usage::

    .venv/bin/python bench/scenario_partial_telemetry.py --seeds 1-3 [--model-dir DIR]
"""

from __future__ import annotations

import argparse
import sys
import time
from typing import Any

import numpy as np

from dsan.features.target import TargetWorkload
from dsan.policies.registry import make_scorer
from dsan.sim.scenario.config import ScenarioConfig, load
from dsan.sim.scenario.engine import Engine
from dsan.sim.scenario.workload import generate
from dsan.sim.scheduler import select_node


class GpuOnlyTelemetry(Engine):
    """The engine with the CPU nodes' telemetry withheld from the snapshot the policy reads."""

    def _sample_telemetry(self, t1: float) -> None:
        super()._sample_telemetry(t1)
        s = self.snap
        assert s.telemetry is not None and s.telemetry_age_s is not None
        cpu = s.gpu_count == 0
        s.telemetry[cpu] = 0.0
        s.telemetry_age_s[cpu] = np.inf


def run(cfg: ScenarioConfig, seed: int, gpu_only: bool, model_dir: str | None) -> dict[str, Any]:
    wl = generate(cfg, seed, False)
    eng = (GpuOnlyTelemetry if gpu_only else Engine)(cfg, seed, workload=wl)
    target = TargetWorkload.from_pods(wl.pods, eng.snap.gpu_models)
    kw: dict[str, Any] = {"target_workload": target}
    if model_dir:
        kw["model_dir"] = model_dir
    scorer = make_scorer("dsan", seed=seed, **kw)
    eng.attach(scorer.select_gpus, scorer)
    rng = np.random.default_rng(seed)
    gen = eng.decisions()
    try:
        d = next(gen)
        while True:
            node = select_node(d.pod, d.snapshot, scorer, rng, d.nodes)
            assert node is not None  # d.nodes is never empty
            d = gen.send(node)
    except StopIteration:
        pass
    return eng.summary()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", default="1-3")
    ap.add_argument("--model-dir", default=None)
    a = ap.parse_args(argv)
    lo, _, hi = a.seeds.partition("-")
    cfg = load("seed-table1")
    print(f"start {time.strftime('%H:%M:%S', time.gmtime())} UTC")
    print("| DSAN telemetry | seed | util % | P99 s | SLA % (web / training violations) | cost |")
    print("|---|---|---|---|---|---|")
    for label, gpu_only in (("all nodes", False), ("GPU nodes only", True)):
        for seed in range(int(lo), int(hi or lo) + 1):
            r = run(cfg, seed, gpu_only, a.model_dir)
            sla = r["sla_by_kind"]
            print(
                f"| {label} | {seed} | {r['utilization_pct']:.1f} | "
                f"{r['p99_task_latency_s']:.1f} | {r['sla_violation_pct']:.2f} "
                f"({sla['web']['violations']} / {sla['training']['violations']}) | "
                f"{r['cost']:.0f} |",
                flush=True,
            )
    print(f"end {time.strftime('%H:%M:%S', time.gmtime())} UTC")
    return 0


if __name__ == "__main__":
    sys.exit(main())
