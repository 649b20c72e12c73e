"""Where DSAN and FGD part on openb by pod kind: the FGD protocol with CPU-only pods scored
by one policy and every other pod by the other, beside plain DSAN and FGD of the same seed.

    DSAN_TRACES=../shared/traces .venv/bin/python bench/dsan_openb_cpuprobe.py \
        --pods cpu300 cpu250 --seeds 47,48 --variants cpu-by-fgd,gpu-by-fgd

``cpu-by-fgd``: CPU-only pods (no GPU share asked) by FGD, the rest by the shipped DSAN;
``gpu-by-fgd``: the reverse. One JSON line per run (unallocated GPU % at arrived workload
100 %, as ``bench/dsan_openb_eval.py`` prints for the plain policies). A diagnostic for
the next model (docs/results/dsan_openb.md, Session 12), not a policy.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable
from typing import Any

import numpy as np

from dsan.core.snapshot import ClusterSnapshot, PodSpec
from dsan.features import TargetWorkload
from dsan.policies.registry import make_scorer
from dsan.sim import paths
from dsan.sim.openb import load_nodes, load_pods
from dsan.sim.protocol import OpenbConfig, run_openb

VARIANTS = ("cpu-by-fgd", "gpu-by-fgd")


class ByKind:
    """DSAN and FGD side by side, each pod scored and its GPUs chosen by one of them; both
    see every bind and release (their caches stay as in a plain run)."""

    name = "by-kind"

    def __init__(self, target: TargetWorkload, cpu_by_fgd: bool) -> None:
        self.dsan = make_scorer("dsan", target_workload=target)
        self.fgd = make_scorer("fgd", target_workload=target)
        self.cpu_by_fgd = cpu_by_fgd

    def _of(self, pod: PodSpec) -> Any:
        cpu_only = pod.num_gpu == 0 or pod.gpu_milli == 0
        return self.fgd if cpu_only == self.cpu_by_fgd else self.dsan

    def score(self, pod: PodSpec, snap: ClusterSnapshot, nodes: np.ndarray) -> np.ndarray:
        return np.asarray(self._of(pod).score(pod, snap, nodes))

    def select_gpus(self, pod: PodSpec, snap: ClusterSnapshot, node: int) -> tuple[int, ...]:
        return tuple(self._of(pod).select_gpus(pod, snap, node))

    def on_bind(self, *args: Any) -> None:
        for s in (self.dsan, self.fgd):
            hook = getattr(s, "on_bind", None)
            if hook is not None:
                hook(*args)

    def on_release(self, *args: Any) -> None:
        for s in (self.dsan, self.fgd):
            hook = getattr(s, "on_release", None)
            if hook is not None:
                hook(*args)


def _maker(cpu_by_fgd: bool) -> Callable[[TargetWorkload], ByKind]:
    return lambda target: ByKind(target, cpu_by_fgd)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--pods", nargs="+", default=["cpu300"])
    ap.add_argument("--seeds", default="42")
    ap.add_argument("--variants", default=",".join(VARIANTS))
    args = ap.parse_args()
    variants = args.variants.split(",")
    if not set(variants) <= set(VARIANTS):
        ap.error(f"--variants: choose from {', '.join(VARIANTS)}")
    nodes_path = paths.openb_csv(paths.DEFAULT_NODES)
    nodes = load_nodes(nodes_path)
    for p in args.pods:
        name = p if p.endswith(".csv") else f"openb_pod_list_{p}.csv"
        pods = load_pods(paths.openb_csv(name), nodes.gpu_models)
        for seed in (int(s) for s in args.seeds.split(",")):
            for v in variants:
                cfg = OpenbConfig(paths.openb_csv(name), nodes_path, "fgd", seed=seed)
                r = run_openb(cfg, nodes, pods, make=_maker(v == "cpu-by-fgd"))
                print(json.dumps({"workload": name, "variant": v, "seed": seed,
                                  "unallocated_gpu_pct_at_100":
                                      r["unallocated_gpu_pct_at_100"]}), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
