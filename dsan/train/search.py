"""Policy search for the residual head's skip layer on openb (the FGD protocol).

The residual DSAN scores ``softplus(a) * 100 * fgd_score_int + w . f + MLP(...)``. PPO did
not move ``w`` off zero. :func:`greedy` searches ``w`` as tie-breaks of FGD's integer score
on full 1213-node protocol episodes (reward = minus the unallocated GPU % at arrived workload
100 %). An evolution-strategies variant was tried and dropped: the perturbed weights
re-rank every FGD tie at once and the gradient estimate drowned in that noise.
``w`` lives on a feature subset that :class:`dsan.train.linear.LinearFGDScorer` computes
without the full featurizer.

Stage for the final training command: :func:`greedy` returns the weights, which
:mod:`dsan.train.skipweights` writes into a :class:`~dsan.model.net.DSANNet`'s residual head
(:func:`export_model` saves that model).
"""

from __future__ import annotations

import json
import time
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
from dsan.train.skipweights import OPENB_SKIP, apply, load_openb_skip, share_args, skip_args

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
        self,
        features: tuple[str, ...],
        w: F64,
        workload: str,
        seed: int,
        gpu_w: F64 | None = None,
        share_w: F64 | None = None,
    ) -> float:
        """Unallocated GPU % at arrived workload 100 % of the linear policy ``w`` (for GPU
        pods ``gpu_w`` instead, when given; for GPU-sharing pods ``share_w``)."""
        ...

    def fgd(self, workload: str, seed: int) -> float:
        """The same for FGD (the policy with ``w = 0``)."""
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
        self,
        features: tuple[str, ...],
        w: F64,
        workload: str,
        seed: int,
        gpu_w: F64 | None = None,
        share_w: F64 | None = None,
    ) -> float:
        """Unallocated GPU % at arrived workload 100 % of one episode."""
        cfg = OpenbConfig(paths.openb_csv(_file(workload)), self.nodes_path, "fgd", seed=seed)
        gpu = np.asarray(w if gpu_w is None else gpu_w, dtype=np.float64)
        extra = None if gpu_w is None else gpu - np.asarray(w)
        share = None if share_w is None else np.asarray(share_w) - gpu
        res = run_openb(
            cfg,
            self.nodes,
            self.pods[workload],
            make=lambda target: LinearFGDScorer(
                features, w, False, extra, target=target, share_weights=share
            ),
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

    Why not plain ES around ``w = 0``: any non-zero weight on a feature re-ranks *every* set
    of FGD-tied nodes by that feature, so the reward is discontinuous at zero and random
    directions mostly replace FGD's consolidating "first node" tie-break by noise (measured:
    +2.6 points on average at sigma 0.1). Instead, each round tries every (feature, sign,
    pod class) at a weight below one FGD point (it only breaks ties), plus zeroing any
    non-zero weight of one class, scores it on ``screen_seeds`` episodes of every workload
    against same-run FGD, re-scores the ``keep`` best on ``confirm_seeds`` and adopts the
    best if it gains ``min_gain``; later rounds use 10x smaller weights, so the result is a
    lexicographic order of tie-break signals, with FGD's node order last. Weights are kept
    per class (row 0: CPU-only pods, row 1: GPU pods), the head's ``skip`` and ``gpu_skip``.
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


def screen(
    base: dict[str, Any],
    candidates: dict[str, dict[str, dict[str, float]]],
    workloads: tuple[str, ...],
    seeds: tuple[int, ...],
    out: str | Path,
    episodes: EpisodeRunner | None = None,
) -> dict[str, float]:
    """Mean gap to same-run FGD of tie-break variants of ``base`` (a result dict such as
    ``openb_skip.json``) over ``workloads`` x ``seeds``: the hand-directed complement of
    :func:`greedy`, for weights of any size and several changes at once.

    A candidate is ``{"cpu": {feature: w}, "gpu": {feature: w}}``: the weight CPU-only or GPU
    pods get for ``feature`` (replacing the base's; unnamed features keep it). ``"whole"``
    and ``"share"`` then set it for whole-GPU or GPU-sharing pods alone (the head's
    ``share_skip``). Every episode goes to ``out`` (JSON lines) as it finishes, so a long run
    can be read while it runs.
    """
    eps: EpisodeRunner = episodes or Episodes(workloads)
    names0, w0, gpu_only, gw0 = skip_args(base)
    sw0 = share_args(base)
    if gpu_only:
        raise ValueError("screen() starts from a per-class result, not a gpu_pods_only one")
    gap: dict[str, list[float]] = {label: [] for label in candidates}
    with Path(out).open("a") as log:
        for wl in workloads:
            for seed in seeds:
                f = eps.fgd(wl, seed)
                for label, c in candidates.items():
                    names = list(names0)
                    cpu = list(w0)
                    gpu = [x + y for x, y in zip(w0, gw0 or [0.0] * len(w0), strict=True)]
                    share = [x + y for x, y in zip(gpu, sw0 or [0.0] * len(w0), strict=True)]
                    rows = {"cpu": (cpu,), "gpu": (gpu, share), "whole": (gpu,), "share": (share,)}
                    for key in ("cpu", "gpu", "whole", "share"):
                        for feat, v in c.get(key, {}).items():
                            if feat not in names:
                                names.append(feat)
                                for r in (cpu, gpu, share):
                                    r.append(0.0)
                            for r in rows[key]:
                                r[names.index(feat)] = float(v)
                    kw = {} if share == gpu else {"share_w": np.array(share)}
                    v = eps.unallocated(tuple(names), np.array(cpu), wl, seed, np.array(gpu), **kw)
                    gap[label].append(v - f)
                    log.write(json.dumps(dict(label=label, wl=wl, seed=seed, v=v, fgd=f)) + "\n")
                    log.flush()
    return {label: float(np.mean(g)) for label, g in gap.items()}


def export_model(
    result: dict[str, Any], out_dir: str | Path, base_dir: str | Path | None = None
) -> Path:
    """The model ``base_dir`` (default: the shipped one; it must have a residual head) with
    the searched skip weights, saved to ``out_dir`` in all three formats; the manifest's
    ``training`` records the search config, the weights and the training workloads."""
    from dsan.model.export import DEFAULT_DIR, load, save

    base, manifest = load(base_dir or DEFAULT_DIR)
    args = skip_args(result)
    net = apply(base, *args)
    cfg = result.get("config", {})
    training = {
        "stage": "openb-tie-break-search",
        "base_model": manifest.get("version"),
        "workloads": [_file(w) for w in cfg.get("workloads", TRAIN_WORKLOADS)],
        "search": cfg,
        "skip_weights": dict(zip(args[0], args[1], strict=True)),
        "gpu_skip_weights": dict(zip(args[0], args[3] or [], strict=False)),
        "gpu_pods_only": args[2],
    }
    version = f"dsan-1-openb-{int(time.time())}"
    return save(net, out_dir, version, training, {"confirm_gap": result.get("confirm_gap")})


def main(argv: list[str] | None = None) -> int:
    """``python -m dsan.train.search [--screen FILE] ...``: the greedy tie-break search, or
    a screen of weight variants against FGD; prints the result."""
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
    ap.add_argument(
        "--screen",
        default="",
        help="JSON file {label: {cpu|gpu: {feature: weight}}}: score these variants of --init "
        "(default: the shipped openb_skip.json) on --workloads x --screen-seeds vs FGD",
    )
    a = ap.parse_args(argv)
    torch.set_num_threads(1)
    if a.screen:
        base = json.loads(Path(a.init or OPENB_SKIP).read_text())
        cands = json.loads(Path(a.screen).read_text())
        Path(a.out).mkdir(parents=True, exist_ok=True)
        gaps = screen(
            base, cands, tuple(a.workloads), tuple(a.screen_seeds), Path(a.out) / "screen.jsonl"
        )
        print(json.dumps(gaps, indent=2))
        return 0
    init: tuple[tuple[str, float, float], ...] = ()
    if a.init:
        names, w0, gpu_only, gw = load_openb_skip(a.init)
        extra = gw or [0.0] * len(names)
        init = tuple(
            (n, 0.0 if gpu_only else x, x + y) for n, x, y in zip(names, w0, extra, strict=True)
        )
    g = GreedyConfig(
        features=tuple(a.features),
        workloads=tuple(a.workloads),
        rounds=a.rounds,
        out=a.out,
        coef=a.coef,
        keep=a.keep,
        screen_seeds=tuple(a.screen_seeds),
        confirm_seeds=tuple(a.confirm_seeds),
        classes=tuple(a.classes),
        init=init,
    )
    print(json.dumps(greedy(g), indent=2))
    return 0



if __name__ == "__main__":
    raise SystemExit(main())
