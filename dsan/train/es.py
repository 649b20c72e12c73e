"""OpenAI-ES over the residual head's skip weights on openb (Salimans et al. 2017).

Black-box gradient estimates from antithetic perturbations ``w +- sigma eps``, both halves of
a pair run on the same (workload, seed) episode (common random numbers); reward = minus the
unallocated GPU % at arrived workload 100 %. Adam follows the estimate; every ``eval_every``
iterations ``w`` is scored on fixed validation episodes against same-run FGD and the best is
kept. On openb it did not work (perturbed policies +2.6 points worse than FGD: any non-zero
weight re-ranks every FGD tie); :func:`dsan.train.search.greedy` is what was used. Kept for
heads whose reward is smooth in ``w`` and because the unit test pins its mechanics.
"""

from __future__ import annotations

import json
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from dsan.train.linear import SUPPORTED
from dsan.train.search import (
    DEFAULT_FEATURES,
    F64,
    TRAIN_WORKLOADS,
    EpisodeRunner,
    Episodes,
    GreedyConfig,
    greedy,
    screen,
)
from dsan.train.skipweights import OPENB_SKIP, load_openb_skip


@dataclass(frozen=True)
class SearchConfig:
    """One ES run. Training seeds are disjoint from the evaluation's (42..)."""

    features: tuple[str, ...] = DEFAULT_FEATURES
    workloads: tuple[str, ...] = TRAIN_WORKLOADS
    train_seeds: tuple[int, int] = (1000, 2000)  # [lo, hi) drawn per pair
    val_seeds: tuple[int, ...] = (7, 8)
    iterations: int = 40
    pairs: int = 4
    sigma: float = 0.1
    lr: float = 0.05
    eval_every: int = 5
    seed: int = 0
    init: tuple[float, ...] = field(default_factory=tuple)
    out: str = "out/search"

    def __post_init__(self) -> None:
        bad = [f for f in self.features if f not in SUPPORTED]
        if bad:
            raise ValueError(f"SearchConfig.features not supported by LinearFGDScorer: {bad}")
        if self.init and len(self.init) != len(self.features):
            raise ValueError("SearchConfig.init needs one weight per feature")
        if self.pairs < 1 or self.iterations < 0 or self.sigma <= 0 or self.lr <= 0:
            raise ValueError("SearchConfig: pairs >= 1, iterations >= 0, sigma and lr > 0")


class _Adam:
    def __init__(self, n: int, lr: float) -> None:
        self.m, self.v, self.t, self.lr = np.zeros(n), np.zeros(n), 0, lr

    def step(self, grad: F64) -> F64:
        self.t += 1
        self.m = 0.9 * self.m + 0.1 * grad
        self.v = 0.999 * self.v + 0.001 * grad**2
        mh, vh = self.m / (1 - 0.9**self.t), self.v / (1 - 0.999**self.t)
        return np.asarray(-self.lr * mh / (np.sqrt(vh) + 1e-8), dtype=np.float64)


def validate(cfg: SearchConfig, eps: EpisodeRunner, w: F64) -> dict[str, float]:
    """Mean (policy - same-run FGD) unallocated GPU points per validation workload."""
    out = {}
    for wl in cfg.workloads:
        diffs = [eps.unallocated(cfg.features, w, wl, s) - eps.fgd(wl, s) for s in cfg.val_seeds]
        out[wl] = float(np.mean(diffs))
    return out


def search(cfg: SearchConfig, episodes: EpisodeRunner | None = None) -> dict[str, Any]:
    """Run ES; returns ``{"features", "weights" (best by validation), "val", "history"}`` and
    writes ``<out>/search.jsonl`` (one line per iteration) and ``<out>/result.json``."""
    eps: EpisodeRunner = episodes or Episodes(cfg.workloads)
    rng = np.random.default_rng(cfg.seed)
    d = len(cfg.features)
    theta = np.asarray(cfg.init, dtype=np.float64) if cfg.init else np.zeros(d)
    adam = _Adam(d, cfg.lr)
    out = Path(cfg.out)
    out.mkdir(parents=True, exist_ok=True)
    log = (out / "search.jsonl").open("a")
    best_w, best_val = theta.copy(), validate(cfg, eps, theta)
    history: list[dict[str, Any]] = [{"it": 0, "val": best_val, "w": theta.tolist()}]
    log.write(json.dumps(history[0]) + "\n")
    log.flush()
    for it in range(1, cfg.iterations + 1):
        t0 = time.perf_counter()
        grad = np.zeros(d)
        gaps = []
        for _ in range(cfg.pairs):
            e = rng.standard_normal(d)
            wl = cfg.workloads[int(rng.integers(len(cfg.workloads)))]
            seed = int(rng.integers(*cfg.train_seeds))
            up = eps.unallocated(cfg.features, theta + cfg.sigma * e, wl, seed)
            dn = eps.unallocated(cfg.features, theta - cfg.sigma * e, wl, seed)
            grad += (up - dn) * e / (2 * cfg.sigma * cfg.pairs)  # d(unallocated)/d(theta)
            gaps.append(0.5 * (up + dn) - eps.fgd(wl, seed))
        theta = theta + adam.step(grad)
        rec: dict[str, Any] = {
            "it": it,
            "gap_vs_fgd": float(np.mean(gaps)),
            "w": theta.round(4).tolist(),
            "s": round(time.perf_counter() - t0, 1),
        }
        if it % cfg.eval_every == 0 or it == cfg.iterations:
            val = validate(cfg, eps, theta)
            rec["val"] = val
            if np.mean(list(val.values())) < np.mean(list(best_val.values())):
                best_w, best_val = theta.copy(), val
        history.append(rec)
        log.write(json.dumps(rec) + "\n")
        log.flush()
    log.close()
    result = {
        "config": asdict(cfg),
        "features": list(cfg.features),
        "weights": best_w.tolist(),
        "val": best_val,
        "val_mean_gap": float(np.mean(list(best_val.values()))),
    }
    (out / "result.json").write_text(json.dumps(result, indent=2) + "\n")
    return {**result, "history": history}


def main(argv: list[str] | None = None) -> int:
    """``python -m dsan.train.es [--iterations N ...]``: run ES (or ``--greedy``, the
    search :mod:`dsan.train.search` shipped), print the result."""
    import argparse

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
    if a.greedy:
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
