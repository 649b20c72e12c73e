"""Policy search for the residual head's skip layer on openb (the FGD protocol).

The residual DSAN scores ``softplus(a) * 100 * fgd_score_int + w . f + MLP(...)``. PPO did
not move ``w`` off zero. :func:`greedy` searches ``w`` as tie-breaks of FGD's integer score
on full 1213-node protocol episodes (reward = minus the unallocated GPU % at arrived workload
100 %); :mod:`dsan.train.es` is the evolution-strategies variant that did not work here.
``w`` lives on a feature subset that :class:`dsan.train.linear.LinearFGDScorer` computes
without the full featurizer.

Stage for the final training command: :func:`search` returns the weights, :func:`apply`
writes them into a :class:`~dsan.model.net.DSANNet`'s residual head.
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

from dsan.features import FEATURE_NAMES
from dsan.model.net import DSANNet
from dsan.sim import paths
from dsan.sim.openb import NodeTrace, PodTrace, load_nodes, load_pods
from dsan.sim.protocol import OpenbConfig, run_openb
from dsan.train.linear import LinearFGDScorer

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

    def unallocated(self, features: tuple[str, ...], w: F64, workload: str, seed: int) -> float:
        """Unallocated GPU % at arrived workload 100 % of the linear policy ``w``."""
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

    def unallocated(self, features: tuple[str, ...], w: F64, workload: str, seed: int) -> float:
        """Unallocated GPU % at arrived workload 100 % of one episode."""
        cfg = OpenbConfig(paths.openb_csv(_file(workload)), self.nodes_path, "fgd", seed=seed)
        res = run_openb(
            cfg,
            self.nodes,
            self.pods[workload],
            make=lambda target: LinearFGDScorer(features, w, target=target),
        )
        return float(res["unallocated_gpu_pct_at_100"])

    def fgd(self, workload: str, seed: int) -> float:
        key = (workload, seed)
        if key not in self._fgd:
            self._fgd[key] = self.unallocated((), np.zeros(0), workload, seed)
        return self._fgd[key]


def _file(w: str) -> str:
    return w if w.endswith(".csv") else f"openb_pod_list_{w}.csv"


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


def greedy(cfg: GreedyConfig, episodes: EpisodeRunner | None = None) -> dict[str, Any]:
    """Policy search over tie-breaks of FGD's integer score.

    Why not plain ES around ``w = 0``: any non-zero weight on a feature re-ranks *every* set
    of FGD-tied nodes by that feature, so the reward is discontinuous at zero and random
    directions mostly replace FGD's consolidating "first node" tie-break by noise (measured:
    +2.6 points on average at sigma 0.1). Instead, each round tries every (feature, sign) at a
    weight below one FGD point (it only breaks ties), scores it on ``screen_seeds`` episodes of
    every workload against same-run FGD, re-scores the ``keep`` best on ``confirm_seeds`` and
    adopts the best if it gains ``min_gain``; later rounds use 10x smaller weights, so the
    result is a lexicographic order of tie-break signals, with FGD's node order last.
    """
    eps: EpisodeRunner = episodes or Episodes(cfg.workloads)
    feats = cfg.features
    w = np.zeros(len(feats))
    out = Path(cfg.out)
    out.mkdir(parents=True, exist_ok=True)
    log = (out / "greedy.jsonl").open("a")

    def gap(v: F64, seeds: tuple[int, ...]) -> float:
        return float(
            np.mean(
                [
                    eps.unallocated(feats, v, wl, s) - eps.fgd(wl, s)
                    for wl in cfg.workloads
                    for s in seeds
                ]
            )
        )

    current = 0.0  # FGD itself, w = 0
    for r in range(cfg.rounds):
        step = cfg.coef * cfg.decay**r
        cands = [(j, sg) for j in range(len(feats)) if w[j] == 0 for sg in (1.0, -1.0)]
        screened = []
        for j, sg in cands:
            v = w.copy()
            v[j] = sg * step
            g = gap(v, cfg.screen_seeds)
            screened.append((g, j, sg))
            log.write(json.dumps({"round": r, "feature": feats[j], "w": sg * step, "screen": g}))
            log.write("\n")
            log.flush()
        screened.sort()
        best: tuple[float, int, float] | None = None
        for _g, j, sg in screened[: cfg.keep]:
            v = w.copy()
            v[j] = sg * step
            c = gap(v, cfg.confirm_seeds)
            log.write(json.dumps({"round": r, "feature": feats[j], "w": sg * step, "confirm": c}))
            log.write("\n")
            log.flush()
            if best is None or c < best[0]:
                best = (c, j, sg)
        if best is None or best[0] > current - cfg.min_gain:
            break
        w[best[1]] = best[2] * step
        current = best[0]
        log.write(json.dumps({"round": r, "adopted": feats[best[1]], "weights": w.tolist()}) + "\n")
        log.flush()
    log.close()
    chosen = [i for i in range(len(feats)) if w[i] != 0]
    result = {
        "config": asdict(cfg),
        "features": [feats[i] for i in chosen],
        "weights": [float(w[i]) for i in chosen],
        "confirm_gap": current,
    }
    (out / "result.json").write_text(json.dumps(result, indent=2) + "\n")
    return result


def apply(
    net: DSANNet,
    features: list[str] | tuple[str, ...],
    weights: list[float],
    gpu_only: bool = False,
) -> DSANNet:
    """Write searched skip weights into ``net``'s residual head: into ``head.gpu_skip`` (GPU
    pods only) if ``gpu_only``, else into ``head.skip``; the other skip zero, skip bias zero,
    FGD prior scale = 1 logit per integer point. The model then ranks nodes as
    :class:`LinearFGDScorer` with the same arguments (up to float32 rounding), as long as
    the MLP's last layer stays zero."""
    if not net.head.residual:
        raise ValueError("apply() needs a residual head (ModelConfig(head='residual'))")
    w = torch.zeros_like(net.head.skip.weight)
    for name, v in zip(features, weights, strict=True):
        w[0, FEATURE_NAMES.index(name)] = float(v)
    with torch.no_grad():
        net.head.skip.weight.copy_(torch.zeros_like(w) if gpu_only else w)
        net.head.gpu_skip.weight.copy_(w if gpu_only else torch.zeros_like(w))
        net.head.skip.bias.zero_()
        net.head.prior_scale.fill_(float(np.log(np.expm1(1.0))))  # softplus^-1(1)
    return net


def export_model(
    result: dict[str, Any], out_dir: str | Path, base_dir: str | Path | None = None
) -> Path:
    """The model ``base_dir`` (default: the shipped one; it must have a residual head) with
    the searched skip weights, saved to ``out_dir`` in all three formats; the manifest's
    ``training`` records the search config, the weights and the training workloads."""
    from dsan.model.export import DEFAULT_DIR, load, save

    base, manifest = load(base_dir or DEFAULT_DIR)
    gpu_only = bool(result.get("gpu_pods_only", False))
    net = apply(base, result["features"], result["weights"], gpu_only)
    cfg = result.get("config", {})
    training = {
        "stage": "openb-tie-break-search",
        "base_model": manifest.get("version"),
        "workloads": [_file(w) for w in cfg.get("workloads", TRAIN_WORKLOADS)],
        "search": cfg,
        "skip_weights": dict(zip(result["features"], result["weights"], strict=True)),
        "gpu_pods_only": gpu_only,
    }
    version = f"dsan-1-openb-{int(time.time())}"
    return save(net, out_dir, version, training, {"confirm_gap": result.get("confirm_gap")})


#: The searched tie-break weights shipped with the package (a ``--greedy`` run's result.json):
#: the openb stage of the final model, ``apply(net, *load_openb_skip())``.
OPENB_SKIP = Path(__file__).with_name("openb_skip.json")


def load_openb_skip(path: str | Path = OPENB_SKIP) -> tuple[list[str], list[float], bool]:
    """(features, weights, gpu_only) of the shipped openb search result: ``apply``'s args."""
    res = json.loads(Path(path).read_text())
    return (
        list(res["features"]),
        [float(v) for v in res["weights"]],
        bool(res.get("gpu_pods_only", False)),
    )


def linear_from_model(model_dir: str | Path) -> tuple[list[str], list[float], bool]:
    """(features, weights, gpu_only) of a model whose residual head is FGD + one skip layer
    (the MLP's last layer zero, prior scale 1): :class:`LinearFGDScorer` with them ranks as
    the model does, ~5x faster. Raises ``ValueError`` for any other model."""
    from dsan.model.export import load

    net, _ = load(model_dir)
    head = net.head
    mlp_out = head.mlp[2]
    assert isinstance(mlp_out, torch.nn.Linear)
    scale = float(torch.nn.functional.softplus(head.prior_scale.detach()))
    if not head.residual or mlp_out.weight.abs().max() > 0 or mlp_out.bias.abs().max() > 0:
        raise ValueError(f"{model_dir}: not a residual head with a zero MLP output")
    if abs(scale - 1.0) > 1e-5 or abs(float(head.skip.bias.detach())) > 0:
        raise ValueError(f"{model_dir}: prior scale {scale} != 1 or non-zero skip bias")
    w = head.skip.weight.detach().double().numpy()[0]
    g = head.gpu_skip.weight.detach().double().numpy()[0]
    if w.any() and g.any():
        raise ValueError(f"{model_dir}: both skip and gpu_skip are non-zero")
    gpu_only = bool(g.any())
    v = g if gpu_only else w
    idx = np.flatnonzero(v)
    return [FEATURE_NAMES[i] for i in idx], [float(v[i]) for i in idx], gpu_only


def main(argv: list[str] | None = None) -> int:
    """``python -m dsan.train.search [--iterations N ...]``: run ES, print the result."""
    import argparse

    from dsan.train.es import SearchConfig, search

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    for f in ("iterations", "pairs", "eval_every", "seed"):
        ap.add_argument("--" + f.replace("_", "-"), type=int, default=getattr(SearchConfig, f))
    for f in ("sigma", "lr"):
        ap.add_argument("--" + f, type=float, default=getattr(SearchConfig, f))
    ap.add_argument("--workloads", nargs="+", default=list(TRAIN_WORKLOADS))
    ap.add_argument("--features", nargs="+", default=list(DEFAULT_FEATURES))
    ap.add_argument("--out", default=SearchConfig.out)
    ap.add_argument("--greedy", action="store_true", help="tie-break forward selection")
    ap.add_argument("--rounds", type=int, default=GreedyConfig.rounds)
    a = ap.parse_args(argv)
    torch.set_num_threads(1)
    if a.greedy:
        g = GreedyConfig(
            features=tuple(a.features), workloads=tuple(a.workloads), rounds=a.rounds, out=a.out
        )
        print(json.dumps(greedy(g), indent=2))
        return 0
    cfg = SearchConfig(
        features=tuple(a.features),
        workloads=tuple(a.workloads),
        iterations=a.iterations,
        pairs=a.pairs,
        sigma=a.sigma,
        lr=a.lr,
        eval_every=a.eval_every,
        seed=a.seed,
        out=a.out,
    )
    res = search(cfg)
    print(json.dumps({k: v for k, v in res.items() if k != "history"}, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
