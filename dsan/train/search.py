"""The openb stage: a greedy search over tie-breaks of FGD's integer score (the residual head's
skip weights), on full openb protocol episodes run with :class:`~dsan.train.linear.LinearFGDScorer`.

``python -m dsan.train.search`` prints the result; :mod:`dsan.train.skipweights` writes it into
a model (the shipped one is ``openb_skip.json``).
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Protocol

import numpy as np
import numpy.typing as npt
import torch

from dsan.sim import paths
from dsan.sim.openb import NodeTrace, PodTrace, load_nodes, load_pods
from dsan.sim.protocol import OpenbConfig, run_openb
from dsan.train.linear import LinearFGDScorer
from dsan.train.skipweights import load_openb_skip

F64 = npt.NDArray[np.float64]

#: Node-state signals FGD ignores (packing, partly used GPUs) and static node-type
#: preferences (GPU model, GPUs per node, CPU per GPU) that can break FGD's integer ties.
DEFAULT_FEATURES: tuple[str, ...] = (
    "node_idle",
    "node_gpu_partly_used",
    "gpu_min_free",
    "gpu_max_free",
    "partial_gpus_before",
    "full_gpus_before",
    "gpus_fitting_spare",
    "gpu_free_after",
    "cpu_free_after",
    "pod_cpu_of_node",
    "pod_gpu_of_node",
    *(f"node_gpu_model_{k}" for k in range(7)),
    "node_gpu_count",
    "node_cpu_per_gpu",
)
TRAIN_WORKLOADS = ("default", "gpushare40", "multigpu20", "gpuspec20", "cpu050")


class EpisodeRunner(Protocol):
    """What the search needs from the simulator (a fake in unit tests)."""

    def unallocated(
        self, features: tuple[str, ...], w: F64, workload: str, seed: int, gpu_w: F64 | None = None
    ) -> float:
        """Unallocated GPU % at arrived workload 100 % with weights ``w`` (``gpu_w`` for GPU
        pods, when given)."""
        ...

    def fgd(self, workload: str, seed: int) -> float:
        """The same for FGD (``w = 0``)."""
        ...


class Episodes:
    """Full openb protocol episodes of the linear policy; FGD's result per episode cached."""

    def __init__(self, workloads: tuple[str, ...]) -> None:
        self.nodes_path = paths.openb_csv(paths.DEFAULT_NODES)
        self.nodes: NodeTrace = load_nodes(self.nodes_path)
        self.pods: dict[str, PodTrace] = {
            w: load_pods(paths.openb_csv(_file(w)), self.nodes.gpu_models) for w in workloads
        }
        self._fgd: dict[tuple[str, int], float] = {}

    def unallocated(
        self, features: tuple[str, ...], w: F64, workload: str, seed: int, gpu_w: F64 | None = None
    ) -> float:
        cfg = OpenbConfig(paths.openb_csv(_file(workload)), self.nodes_path, "fgd", seed=seed)
        extra = None if gpu_w is None else np.asarray(gpu_w, dtype=np.float64) - np.asarray(w)
        res = run_openb(
            cfg,
            self.nodes,
            self.pods[workload],
            make=lambda target: LinearFGDScorer(features, w, extra, target=target),
        )
        return float(res["unallocated_gpu_pct_at_100"])

    def fgd(self, workload: str, seed: int) -> float:
        key = (workload, seed)
        if key not in self._fgd:
            self._fgd[key] = self.unallocated((), np.zeros(0), workload, seed)
        return self._fgd[key]


def _file(w: str) -> str:
    return w if w.endswith(".csv") else f"openb_pod_list_{w}.csv"


#: Pod classes a greedy move may change: CPU-only pods, GPU pods, or both alike.
CLASS_ROWS: dict[str, tuple[int, ...]] = {"cpu": (0,), "gpu": (1,), "all": (0, 1)}


@dataclass(frozen=True)
class GreedyConfig:
    """Forward selection of lexicographic tie-breaks (see :func:`greedy`)."""

    features: tuple[str, ...] = DEFAULT_FEATURES
    workloads: tuple[str, ...] = TRAIN_WORKLOADS
    screen_seeds: tuple[int, ...] = (7,)  # stage 1: every candidate, every workload
    confirm_seeds: tuple[int, ...] = (8, 9)  # stage 2: the ``keep`` best of stage 1
    keep: int = 3
    rounds: int = 3
    coef: float = 0.5  # round r adds +-coef * decay**r: each new signal only breaks ties left
    decay: float = 0.1
    min_gain: float = 0.02  # unallocated points a round must gain on the confirm episodes
    out: str = "out/greedy"
    classes: tuple[str, ...] = ("all",)  # pod classes a move may target (keys of CLASS_ROWS)
    # start point: (feature, CPU-pod weight, GPU-pod weight); a move may also zero one class
    init: tuple[tuple[str, float, float], ...] = ()

    def __post_init__(self) -> None:
        bad = [c for c in self.classes if c not in CLASS_ROWS]
        if bad or not self.classes:
            raise ValueError(f"GreedyConfig.classes must be among {tuple(CLASS_ROWS)}: {bad}")
        missing = [f for f, _, _ in self.init if f not in self.features]
        if missing:
            raise ValueError(f"GreedyConfig.init names features not in features: {missing}")


def greedy(cfg: GreedyConfig, episodes: EpisodeRunner | None = None) -> dict[str, Any]:
    """Policy search over tie-breaks of FGD's integer score, per pod class.

    Any non-zero weight re-ranks every set of FGD-tied nodes, so the reward is discontinuous
    at ``w = 0`` and random (ES) directions mostly add noise. Instead each round tries every
    (feature, sign, pod class) at a weight below one FGD point, plus zeroing one class's
    weight, on ``screen_seeds`` against same-run FGD, re-scores the ``keep`` best on
    ``confirm_seeds`` and adopts the best if it gains ``min_gain``; later rounds use smaller
    weights, giving a lexicographic order of signals with FGD's node order last. Row 0 of the
    weights is CPU-only pods (``head.skip``), row 1 GPU pods.
    """
    eps: EpisodeRunner = episodes or Episodes(cfg.workloads)
    feats = cfg.features
    w = np.zeros((2, len(feats)))
    for name, wc, wg in cfg.init:
        w[:, feats.index(name)] = (wc, wg)
    out = Path(cfg.out)
    out.mkdir(parents=True, exist_ok=True)
    log = (out / "greedy.jsonl").open("a")

    def run(v: F64, wl: str, s: int) -> float:
        if np.array_equal(v[0], v[1]):  # one weight vector for every pod
            return eps.unallocated(feats, v[0], wl, s)
        return eps.unallocated(feats, v[0], wl, s, gpu_w=v[1])

    def gap(v: F64, seeds: tuple[int, ...]) -> float:
        return float(
            np.mean([run(v, wl, s) - eps.fgd(wl, s) for wl in cfg.workloads for s in seeds])
        )

    def moves(step: float) -> list[tuple[str, F64]]:
        out: list[tuple[str, F64]] = []
        for c in cfg.classes:
            rows = list(CLASS_ROWS[c])
            for j, f in enumerate(feats):
                if np.any(w[rows, j] != 0):
                    if len(cfg.classes) > 1 or cfg.init:  # drop this class's weight
                        v = w.copy()
                        v[rows, j] = 0.0
                        out.append((f"{c}:{f}=0", v))
                    continue
                for sg in (1.0, -1.0):
                    v = w.copy()
                    v[rows, j] = sg * step
                    out.append((f"{c}:{f}={sg * step:g}", v))
        return out

    def note(**kv: Any) -> None:
        log.write(json.dumps(kv) + "\n")
        log.flush()

    current = gap(w, cfg.confirm_seeds) if cfg.init else 0.0  # w = 0 is FGD itself
    note(start=current, weights=w.tolist())
    for r in range(cfg.rounds):
        screened = []
        for label, v in moves(cfg.coef * cfg.decay**r):
            g = gap(v, cfg.screen_seeds)
            screened.append((g, label, v))
            note(round=r, move=label, screen=g)
        screened.sort(key=lambda t: t[0])
        best: tuple[float, str, F64] | None = None
        for _g, label, v in screened[: cfg.keep]:
            c = gap(v, cfg.confirm_seeds)
            note(round=r, move=label, confirm=c)
            if best is None or c < best[0]:
                best = (c, label, v)
        if best is None or best[0] > current - cfg.min_gain:
            break
        current, w = best[0], best[2]
        note(round=r, adopted=best[1], weights=w.tolist())
    log.close()
    chosen = [i for i in range(len(feats)) if np.any(w[:, i] != 0)]
    result: dict[str, Any] = {
        "config": asdict(cfg),
        "features": [feats[i] for i in chosen],
        "weights": [float(w[0, i]) for i in chosen],
        "confirm_gap": current,
    }
    if not np.array_equal(w[0], w[1]):  # head.gpu_skip: what GPU pods add to head.skip
        result["gpu_weights"] = [float(w[1, i] - w[0, i]) for i in chosen]
    (out / "result.json").write_text(json.dumps(result, indent=2) + "\n")
    return result


def main(argv: list[str] | None = None) -> int:
    """``python -m dsan.train.search ...``: the greedy tie-break search; prints the result."""
    import argparse

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--workloads", nargs="+", default=list(TRAIN_WORKLOADS))
    ap.add_argument("--features", nargs="+", default=list(DEFAULT_FEATURES))
    ap.add_argument("--out", default=GreedyConfig.out)
    ap.add_argument("--rounds", type=int, default=GreedyConfig.rounds)
    ap.add_argument("--coef", type=float, default=GreedyConfig.coef)
    ap.add_argument("--keep", type=int, default=GreedyConfig.keep)
    ap.add_argument("--screen-seeds", type=int, nargs="+", default=GreedyConfig.screen_seeds)
    ap.add_argument("--confirm-seeds", type=int, nargs="+", default=GreedyConfig.confirm_seeds)
    ap.add_argument("--classes", nargs="+", default=list(GreedyConfig.classes))
    ap.add_argument(
        "--init", default="", help="start from this result JSON (e.g. dsan/train/openb_skip.json)"
    )
    a = ap.parse_args(argv)
    torch.set_num_threads(1)
    init: tuple[tuple[str, float, float], ...] = ()
    if a.init:
        names, w0, gw = load_openb_skip(a.init)
        extra = gw or [0.0] * len(names)
        init = tuple((n, x, x + y) for n, x, y in zip(names, w0, extra, strict=True))
    kw: dict[str, Any] = {k: tuple(v) if isinstance(v, list) else v for k, v in vars(a).items()}
    g = GreedyConfig(**{**kw, "init": init})
    print(json.dumps(greedy(g), indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
