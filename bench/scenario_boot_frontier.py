"""Utilisation against start-up tail: the seed scenario's P99 trade, measured side by side.

The P99 task latency of seed-table1 is 99.5 s (90 s node boot + 7.5 s Spark image pull + 2 s
start) as soon as more than 1 % of the pods wait for a node boot; below that it drops to the
next start-up level (9.5 s Spark pull, 17 s notebook pull, 42 s training pull) or to the GPU
queue. This runs the three baselines and the scenario teachers (``dsan.train.teachers``: the
packing ``Composite`` that DSAN imitates, the same with a powered-headroom knob (``PreWarm``),
and the boot-aware ``Anchored`` at several anchor sets and fill targets) on the same seeds in
one process and prints one markdown row per policy: means over seeds of util / P99 / SLA /
cost, the P99 per seed, and the tail pods (at or above each seed's P99) by cause.

Usage::

    .venv/bin/python bench/scenario_boot_frontier.py --seeds 1-3 > out/boot-frontier.md
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable
from typing import Any

import numpy as np

from dsan.policies.base import Scorer
from dsan.policies.target import TargetWorkload
from dsan.sim.scenario.config import load
from dsan.sim.scenario.engine import Engine
from dsan.sim.scenario.runner import default_factory, run_policy
from dsan.sim.scenario.workload import Workload
from dsan.snapshot import ClusterSnapshot, PodSpec
from dsan.train.teachers import WEB_TYPE, Anchored, Composite

Make = Callable[[TargetWorkload], Scorer]


class PreWarm(Composite):
    """The packing teacher plus a powered-headroom knob (an experiment, not a training teacher:
    it reads a cluster-wide sum that no DSAN feature holds). While the powered, booted CPU
    nodes have fewer than ``h_min`` millicores of free 8-core executor slots (memory-bound
    too; small nodes only up to the 0.8 threshold), a CPU pod (not web) is sent to a
    powered-off 64-core node to boot it ahead of the next wave; booting nodes (pods bound, no
    CPU use in the last sample) rank below powered ones."""

    def __init__(self, target: TargetWorkload, h_min: float) -> None:
        super().__init__(target)
        self.h_min = h_min

    def score(self, pod: PodSpec, snap: ClusterSnapshot, nodes: np.ndarray) -> np.ndarray:
        s = super().score(pod, snap, nodes)
        if pod.num_gpu > 0 or pod.task_type == WEB_TYPE:
            return s
        assert snap.pod_count is not None and snap.images is not None
        assert snap.telemetry is not None
        warm = np.fromiter((len(x) > 0 for x in snap.images), dtype=bool, count=len(snap))
        on = (snap.pod_count > 0) | warm
        last = snap.telemetry[:, -1]
        booting = (snap.pod_count > 0) & (last[:, 0] <= 0) & (last[:, 1] > 0)
        s = s - 60.0 * booting[nodes]
        cpu_free = np.maximum(0.0, snap.cpu_cap - snap.cpu_used)
        small = snap.cpu_cap <= 16000
        cpu_free = np.where(small, np.maximum(0.0, 0.8 * snap.cpu_cap - snap.cpu_used), cpu_free)
        slots = np.minimum(
            cpu_free // 8000, np.maximum(0.0, snap.mem_cap - snap.mem_used) // (8 * 3815)
        )
        if float(slots[on & (snap.gpu_count == 0)].sum()) * 8000 >= self.h_min:
            return s
        off = ~on[nodes] & (snap.cpu_cap[nodes] >= 64000) & (snap.gpu_count[nodes] == 0)
        return s + 5000.0 * off


#: label -> teacher constructor; the anchored rows vary the always-on pool (web replicas one
#: per node of at least that many cores) and the fill target.
TEACHERS: dict[str, Make] = {
    "teacher: packing (Composite, shipped stage)": lambda t: Composite(t),
    "teacher: packing + pre-warm below 500 cores of slots": lambda t: PreWarm(t, 500e3),
    "teacher: packing + pre-warm below 1,000 cores of slots": lambda t: PreWarm(t, 1000e3),
    "teacher: packing + pre-warm below 2,000 cores of slots": lambda t: PreWarm(t, 2000e3),
    "teacher: anchored >=64c (50 nodes)": lambda t: Anchored(t, web_min_cpu=64000.0),
    "teacher: anchored >=32c (120 nodes)": lambda t: Anchored(t),
    "teacher: anchored >=32c, fill to 0.5": lambda t: Anchored(t, tau=0.5),
    "teacher: anchored >=32c, drivers spread": lambda t: Anchored(t, spread_drivers=True),
    "teacher: anchored >=16c (130 of 190)": lambda t: Anchored(t, web_min_cpu=16000.0),
    "teacher: anchored >=64c, web nodes may run full": lambda t: Anchored(
        t, web_min_cpu=64000.0, cool=1.0
    ),
    "teacher: anchored >=32c, fill to 0.8, web nodes may run full": lambda t: Anchored(
        t, cool=1.0, tau=0.8
    ),
    # session 4: anchored-drivers with more SLA margin, a smaller pool, or no overheating
    "teacher: anchored-drivers, web nodes cool to 0.75": lambda t: Anchored(
        t, spread_drivers=True, cool=0.75
    ),
    "teacher: anchored-drivers, web nodes cool to 0.7": lambda t: Anchored(
        t, spread_drivers=True, cool=0.7
    ),
    "teacher: anchored-drivers >=64c (50 nodes)": lambda t: Anchored(
        t, spread_drivers=True, web_min_cpu=64000.0
    ),
    "teacher: anchored-drivers, booting a cool node beats a hot web node (w_on 190)": (
        lambda t: Anchored(t, spread_drivers=True, w_on=190.0)
    ),
}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", default="1-3")
    ap.add_argument("--baselines", default="k8s-default,tetris,fgd")
    a = ap.parse_args(argv)
    lo, _, hi = a.seeds.partition("-")
    seeds = list(range(int(lo), int(hi or lo) + 1))
    cfg = load("seed-table1")

    def factory(name: str, seed: int, wl: Workload, engine: Engine) -> Scorer:
        if name in TEACHERS:
            return TEACHERS[name](TargetWorkload.from_pods(wl.pods, engine.snap.gpu_models))
        return default_factory(name, seed, wl, engine)

    started = time.strftime("%H:%M:%S", time.gmtime())
    print(f"seed-table1, seeds {a.seeds}, one process, {started} UTC; load {_load()}\n")
    print(
        "| policy | util % | P99 s (mean) | P99 s per seed | SLA % | cost "
        "| tail pods per seed: queued / boot / pull / start |"
    )
    print("|---|---|---|---|---|---|---|")
    for pol in [*a.baselines.split(","), *TEACHERS]:
        runs: list[dict[str, Any]] = [run_policy(cfg, pol, s, factory=factory) for s in seeds]
        mean = {
            k: float(np.mean([r[k] for r in runs]))
            for k in ("utilization_pct", "p99_task_latency_s", "sla_violation_pct", "cost")
        }
        per_seed = " / ".join(f"{r['p99_task_latency_s']:.1f}" for r in runs)
        tails = " ; ".join(
            "/".join(str(r["p99_tail_causes"][c]) for c in ("queued", "boot", "pull", "start"))
            for r in runs
        )
        print(
            f"| {pol} | {mean['utilization_pct']:.1f} | {mean['p99_task_latency_s']:.1f} "
            f"| {per_seed} | {mean['sla_violation_pct']:.2f} | {mean['cost']:.0f} | {tails} |",
            flush=True,
        )
    print(f"\nfinished {time.strftime('%H:%M:%S', time.gmtime())} UTC; load {_load()}")
    return 0


def _load() -> str:
    try:
        with open("/proc/loadavg") as f:
            return " ".join(f.read().split()[:3])
    except OSError:
        return "n/a"


if __name__ == "__main__":
    sys.exit(main())
