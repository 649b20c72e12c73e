"""The screen behind the session 13 openb stage: CPU-only pods' ``node_cpu_per_gpu``
tie-break switched off by the GPU nodes' CPU load, with the fast scorer.

    DSAN_TRACES=../shared/traces .venv/bin/python bench/dsan_openb_cpugate.py \
        --pods cpu300 cpu250 cpu235 --seeds 7,8,9,10 \
        --variants base,shipped,ratio:1.1,ratio:1.1/floor:0.1,drop:node_cpu_per_gpu

Variants (each against ``base``, the session 9 stage: the shipped ``openb_skip.json``
without ``cpu_bound_cpu_per_gpu``):

* ``shipped``: ``openb_skip.json`` as it is (the column computed by ``dsan.train.linear``);
* ``ratio:R`` (``/floor:F``): the base, with the CPU-only pods' ``node_cpu_per_gpu`` weight
  dropped while used CPU over used GPU (shares, the whole cluster's: openb's nodes all have
  GPUs) is above R (and used CPU at least F); ``ratio:1.1/floor:0.1`` is what shipped;
* ``drop:FEATURE``: the base with the CPU-only pods' weight on FEATURE at 0.

One JSON line per episode (unallocated GPU % at arrived workload 100 %), two processes. A
diagnostic of the LinearFGDScorer kind (``dsan.train.search``), not the real model: the
real model's numbers are ``bench/dsan_openb_eval.py``'s (docs/results/dsan_openb.md).
"""

from __future__ import annotations

import argparse
import itertools
import json
from collections.abc import Callable
from multiprocessing import Pool
from typing import Any

import numpy as np

from dsan.core.snapshot import ClusterSnapshot, PodSpec
from dsan.features import TargetWorkload
from dsan.features.clusterwide import takes_cpu_only
from dsan.sim import paths
from dsan.sim.openb import NodeTrace, PodTrace, load_nodes, load_pods
from dsan.sim.protocol import OpenbConfig, run_openb
from dsan.train.linear import LinearFGDScorer
from dsan.train.skipweights import load_openb_skip

COLUMN = "cpu_bound_cpu_per_gpu"
Gate = Callable[[ClusterSnapshot], bool]


def _base() -> tuple[list[str], np.ndarray, np.ndarray]:
    """The session 9 stage: the shipped weights without the session 13 column."""
    names, w, _, gw = load_openb_skip()
    keep = [i for i, n in enumerate(names) if n != COLUMN]
    cpu = np.array([w[i] for i in keep])
    gpu = cpu + np.array([(gw or [0.0] * len(names))[i] for i in keep])
    return [names[i] for i in keep], cpu, gpu


def _used(snap: ClusterSnapshot) -> tuple[float, float]:
    cpu = float(snap.cpu_used.sum()) / float(snap.cpu_cap.sum())
    gpu = 1 - int(snap.gpu_free.sum(dtype="int64")) / (1000.0 * int(snap.gpu_count.sum()))
    return cpu, gpu


class Switched:
    """The base; CPU-only pods get ``alt`` weights instead while ``gate(snap)`` holds."""

    name = "cpu-gate"

    def __init__(self, target: TargetWorkload, names: list[str], cpu: np.ndarray,
                 gpu: np.ndarray, alt: np.ndarray, gate: Gate) -> None:
        self.main = LinearFGDScorer(names, cpu, False, gpu - cpu, target=target)
        self.alt = LinearFGDScorer(names, alt, False, gpu - alt, target=target)
        self.alt.fgd, self.alt._cache = self.main.fgd, self.main._cache  # one FGD state
        self.gate = gate

    def score(self, pod: PodSpec, snap: ClusterSnapshot, nodes: np.ndarray) -> np.ndarray:
        use = self.alt if takes_cpu_only(pod) and self.gate(snap) else self.main
        return use.score(pod, snap, nodes)

    def select_gpus(self, pod: PodSpec, snap: ClusterSnapshot, node: int) -> tuple[int, ...]:
        return self.main.select_gpus(pod, snap, node)


def make(variant: str) -> Callable[[TargetWorkload], Any]:
    """The scorer factory of one variant (see the module docstring)."""
    names, cpu, gpu = _base()
    if variant == "shipped":
        n, w, _, gw = load_openb_skip()
        return lambda t: LinearFGDScorer(n, w, False, gw, target=t)
    if variant == "base":
        return lambda t: LinearFGDScorer(names, cpu, False, gpu - cpu, target=t)
    if variant.startswith("drop:"):
        alt = cpu.copy()
        alt[names.index(variant[5:])] = 0.0
        return lambda t: Switched(t, names, cpu, gpu, alt, lambda s: True)
    if variant.startswith("ratio:"):
        parts = dict(p.split(":") for p in variant.split("/"))
        ratio, floor = float(parts["ratio"]), float(parts.get("floor", 0.0))
        alt = cpu.copy()
        alt[names.index("node_cpu_per_gpu")] = 0.0

        def gate(snap: ClusterSnapshot) -> bool:
            c, g = _used(snap)
            return c > ratio * g and c >= floor

        return lambda t: Switched(t, names, cpu, gpu, alt, gate)
    raise ValueError(f"unknown variant {variant!r}")


_NODES: NodeTrace | None = None
_PODS: dict[str, PodTrace] = {}


def episode(job: tuple[str, int, str]) -> dict[str, Any]:
    global _NODES
    pods, seed, variant = job
    name = pods if pods.endswith(".csv") else f"openb_pod_list_{pods}.csv"
    if _NODES is None:
        _NODES = load_nodes(paths.openb_csv(paths.DEFAULT_NODES))
    if name not in _PODS:
        _PODS[name] = load_pods(paths.openb_csv(name), _NODES.gpu_models)
    cfg = OpenbConfig(paths.openb_csv(name), paths.openb_csv(paths.DEFAULT_NODES), "fgd",
                      seed=seed)
    r = run_openb(cfg, _NODES, _PODS[name], make=make(variant))
    return {"workload": name, "seed": seed, "variant": variant,
            "unallocated_gpu_pct_at_100": r["unallocated_gpu_pct_at_100"]}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--pods", nargs="+", default=["cpu300"])
    ap.add_argument("--seeds", default="7,8,9,10")
    ap.add_argument("--variants", default="base,shipped")
    ap.add_argument("--procs", type=int, default=2)
    a = ap.parse_args()
    variants = a.variants.split(",")
    for v in variants:
        make(v)  # an unknown variant fails here, before any episode runs
    jobs = list(itertools.product(a.pods, (int(s) for s in a.seeds.split(",")), variants))
    with Pool(a.procs) as pool:
        for r in pool.imap_unordered(episode, jobs):
            print(json.dumps(r), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
