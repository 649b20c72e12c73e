"""Where the real DSAN model and :class:`dsan.train.linear.LinearFGDScorer` part on one openb
episode: both score every decision in lockstep (the real model's choice is kept), and the
first decisions where they would pick different nodes are printed with both logits and the
weighted features of the two nodes.

Usage (a model whose head is FGD + skip rows, e.g. ``export_model`` on a zero-residual base)::

    .venv/bin/python bench/dsan_openb_diverge.py out/O5/model-shipped --pods cpu250 --seed 7
    .venv/bin/python bench/dsan_openb_diverge.py out/O5/model-shipped --raw  # session 5's logits

Session 5 (docs/results/dsan_openb.md): float32 noise of one ulp between rows with identical
weighted features broke the exact ties that FGD's node order should break. Since session 6
both scorers choose at :func:`dsan.policies.dsan.quantize_logits`'s resolution; ``--raw``
compares the model's own logits with the fast scorer's float64 sum instead.
"""

from __future__ import annotations

import argparse
import os
from typing import Any

import numpy as np
import numpy.typing as npt

from dsan.core.snapshot import ClusterSnapshot, PodSpec
from dsan.features import FEATURE_NAMES, TargetWorkload, featurize
from dsan.policies.dsan import DSANScorer
from dsan.policies.registry import make_scorer
from dsan.sim import paths
from dsan.sim.openb import load_nodes, load_pods
from dsan.sim.protocol import OpenbConfig, run_openb
from dsan.train.linear import LinearFGDScorer
from dsan.train.skipweights import SkipArgs, linear_from_model


class Lockstep:
    """The real model's scores, with the fast scorer's alongside; the first differences shown."""

    name = "lockstep"

    def __init__(self, target: TargetWorkload, spec: SkipArgs, show: int, raw: bool) -> None:
        real = make_scorer("dsan", target_workload=target)
        assert isinstance(real, DSANScorer)
        self.real = real
        self.fast = LinearFGDScorer(*spec, target=target, quantize=not raw)
        self.cols = [FEATURE_NAMES.index(c) for c in [*spec[0], "fgd_score_int"]]
        self.decisions, self.parted, self.show, self.raw = 0, 0, show, raw

    def __getattr__(self, key: str) -> Any:  # select_gpus and the bind hooks: the real model's
        return getattr(self.real, key)

    def score(
        self, pod: PodSpec, snap: ClusterSnapshot, nodes: npt.NDArray[np.int64]
    ) -> npt.NDArray[np.float64]:
        if self.raw:  # the model's own logits (and the fast scorer's float64 sum as it is)
            r = np.asarray(self.real.serving.logits(pod, snap, nodes), dtype=np.float64)
        else:
            r = self.real.score(pod, snap, nodes)
        f = self.fast.score(pod, snap, nodes)
        self.decisions += 1
        # the simulator's pick: the best score, ties to the lowest index (the seed's node order)
        pr, pf = int(nodes[r == r.max()].min()), int(nodes[f == f.max()].min())
        if pr != pf:
            self.parted += 1
            if self.parted <= self.show:
                i, j = (int(np.flatnonzero(nodes == p)[0]) for p in (pr, pf))
                x, _ = featurize(pod, snap, nodes[[i, j]], self.fast.fgd.target)
                print(
                    f"decision {self.decisions}: pod cpu {pod.cpu_milli:g}, "
                    f"GPUs {pod.num_gpu} x {pod.gpu_milli}"
                )
                for who, k, p in (("real", i, pr), ("fast", j, pf)):
                    print(
                        f"  {who} picks node {p}: real {r[k]!r}, fast {f[k]!r}, "
                        f"features {x[0 if who == 'real' else 1, self.cols].tolist()}"
                    )
        return r


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("model")
    ap.add_argument("--pods", default="cpu250")
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--show", type=int, default=3)
    ap.add_argument("--raw", action="store_true", help="unquantised logits in both scorers")
    a = ap.parse_args(argv)
    os.environ["DSAN_MODEL_DIR"] = a.model  # the dsan scorer reads its model from here
    spec = linear_from_model(a.model)
    nodes_path = paths.openb_csv(paths.DEFAULT_NODES)
    nodes = load_nodes(nodes_path)
    name = f"openb_pod_list_{a.pods}.csv"
    pods = load_pods(paths.openb_csv(name), nodes.gpu_models)
    made: list[Lockstep] = []

    def make(target: TargetWorkload) -> Lockstep:
        made.append(Lockstep(target, spec, a.show, a.raw))
        return made[-1]

    cfg = OpenbConfig(paths.openb_csv(name), nodes_path, "fgd", seed=a.seed)
    res = run_openb(cfg, nodes, pods, make=make)
    print(
        f"{a.pods} seed {a.seed}: real model {res['unallocated_gpu_pct_at_100']}; "
        f"{made[-1].parted} of {made[-1].decisions} decisions would part"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
