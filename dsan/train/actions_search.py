"""Policy search for DSAN's actions beyond node choice (:mod:`dsan.policies.dsan_actions`):
the cross-entropy method over the numbers of :class:`ActionParams` (``search``: a subset, the
others held at the start), maximising the article's reward on whole scenario episodes. A
CleanRL-style single file::

    python -m dsan.train.actions_search --out out/actions --seeds 101 102 103

Each candidate plays one ``seed-table1-v3`` episode (``hours`` measured after the warm-up)
plus one burst episode on the iteration's training seed (seeds cycle over iterations; all of
an iteration's candidates share the seed). Its score is its reward minus that of Kubernetes'
actions on the same seed and the same node choice (seeds still differ in how much any action
can gain, so the best candidate tends to come from the seed with the most to gain).
The episode reward reuses the scenario stage's weights (:class:`ScenarioReward`: utilisation
0.4, completion 0.3, cost 0.2, SLA 0.1) on the episode's Table 1 metrics: ``0.4 util/100 -
0.3 mean JCT (h) - 0.2 cost / all-nodes cost - 0.1 SLA violations/100``. The node choice in
the loop is ``node_policy`` (default ``k8s-default``: DSAN's own model costs 2-6x per run on
the 2-core machine; ``--node-policy dsan`` searches with the node model in ``model_dir``,
else ``$DSAN_MODEL_DIR`` or the shipped one). ``init_from`` continues from a
model directory's actions (the current mean competes unperturbed in every iteration). The
best-scoring candidate is written as ``actions.json`` (into ``model_dir`` when set, e.g.
``dsan/model/default``); docs/results/table1.md has the shipped two-stage commands.
"""

from __future__ import annotations

import argparse
import csv
import json
import time
from concurrent.futures import ProcessPoolExecutor
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any

import numpy as np

from dsan.core.configload import add_fields, given
from dsan.policies.base import Scorer, StaticController
from dsan.policies.dsan_actions import (
    ACTIONS,
    ActionParams,
    CostReclaimer,
    LearnedController,
    load_actions,
    save_actions,
)
from dsan.policies.reclaim import DefaultReclaimer
from dsan.policies.registry import needs
from dsan.sim.scenario.config import load
from dsan.sim.scenario.engine import Engine
from dsan.sim.scenario.runner import ScorerFactory, default_factory, run_policy
from dsan.sim.scenario.workload import Workload
from dsan.train.window import ScenarioReward


@dataclass
class Args:
    out: str = "out/actions"
    scenario: str = "seed-table1-v3"
    seeds: tuple[int, ...] = (101, 102, 103)  # training seeds, one per iteration in turn
    hours: float = 12.0  # measured hours of the steady episode (the 11:00 peak inside)
    burst: bool = True  # add a burst episode per candidate
    node_policy: str = "k8s-default"
    population: int = 6
    iterations: int = 3
    elite: int = 2
    init_sd: float = 0.3  # of each bound's width
    seed: int = 0
    model_dir: str = ""  # write actions.json here; with node_policy dsan, also its node model
    init_from: str = ""  # start from this model directory's actions.json (default: Kubernetes')
    search: tuple[str, ...] = ()  # the ActionParams fields searched (default: all)
    jobs: int = 1  # episodes played at once (processes); the results do not depend on it

    def __post_init__(self) -> None:
        if not self.seeds or self.population < 2 or not 1 <= self.elite < self.population:
            raise ValueError("Args: need seeds, population >= 2 and 1 <= elite < population")
        if self.iterations < 1 or self.hours <= 0 or self.init_sd <= 0 or self.jobs < 1:
            raise ValueError("Args: need iterations >= 1, hours > 0, init_sd > 0 and jobs >= 1")
        unknown = set(self.search) - {f.name for f in fields(ActionParams)}
        if unknown:
            raise ValueError(f"Args.search: unknown ActionParams fields {sorted(unknown)}")


def episode_reward(r: dict[str, Any], w: ScenarioReward, full_cost: float) -> float:
    """The article's weighted reward of one episode's Table 1 metrics (module docstring)."""
    return (w.w_util * float(r["utilization_pct"]) / 100.0
            - w.w_completion * float(r["jct_s"]) / 3600.0
            - w.w_cost * float(r["cost"]) / full_cost
            - w.w_sla * float(r["sla_violation_pct"]) / 100.0)


def with_actions(p: ActionParams | None, node_policy: str, model_dir: str = "") -> ScorerFactory:
    """A scorer factory: ``node_policy``'s node choice with ``p``'s actions (None:
    Kubernetes'); DSAN's node model from ``model_dir`` when given (else as ``dsan sim``)."""
    options = {"model_dir": model_dir} if needs(node_policy).model and model_dir else {}

    def factory(name: str, seed: int, wl: Workload, engine: Engine) -> Scorer:
        s = default_factory(node_policy, seed, wl, engine, **options)
        if p is None:
            s.reclaimer, s.controller = DefaultReclaimer(), StaticController()
        else:
            s.reclaimer, s.controller = CostReclaimer(p), LearnedController(p)
        return s
    return factory


def play(a: Args, p: ActionParams | None, seed: int) -> dict[str, Any]:
    cfg = load(a.scenario)
    w = ScenarioReward()
    f = with_actions(p, a.node_policy, a.model_dir)
    runs = [run_policy(cfg, a.node_policy, seed, hours=a.hours, factory=f)]
    if a.burst:
        runs.append(run_policy(cfg, a.node_policy, seed, burst=True, hours=cfg.burst.hours,
                               factory=f))
    cost_h = sum(g.count * g.hourly_cost for g in cfg.cluster.node_groups)
    rew = sum(episode_reward(r, w, cost_h * float(r["sim_hours"])) for r in runs)
    m = runs[0]
    return {"reward": rew, "utilization_pct": m["utilization_pct"], "jct_s": m["jct_s"],
            "sla_violation_pct": m["sla_violation_pct"],
            "p99_task_latency_s": m["p99_task_latency_s"],
            "burst_queued": runs[-1]["burst"]["queued_jobs"] if a.burst else 0,
            "reclaim_gpu_s": float(m["reclaim_cost"]["gpu_s_total"])}


def main(a: Args) -> dict[str, Any]:
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(a.seed)
    lo, hi = np.array(ActionParams.BOUNDS).T
    start = ActionParams()
    if a.init_from:
        rec = load_actions(a.init_from)[0]
        if not isinstance(rec, CostReclaimer):
            raise ValueError(f"{a.init_from}: no {ACTIONS} to start from")
        start = rec.p
    names = [f.name for f in fields(ActionParams)]
    free = np.array([not a.search or n in a.search for n in names])
    mean, sd = start.vector(), free * a.init_sd * (hi - lo)
    pool = ProcessPoolExecutor(a.jobs) if a.jobs > 1 else None
    try:
        run = pool.map if pool is not None else map
        base_seeds = sorted(set(a.seeds[:a.iterations]))
        base = dict(zip(base_seeds, run(play, [a] * len(base_seeds), [None] * len(base_seeds),
                                        base_seeds), strict=True))
        t0 = time.perf_counter()
        best: dict[str, Any] = {"score": -np.inf}
        curve = []
        with (out / "search.csv").open("w", newline="") as fh:
            log = csv.writer(fh)
            log.writerow(["iteration", "seed", "member", "score", "reward", "utilization_pct",
                          "jct_s", "sla_violation_pct", "p99_task_latency_s", "burst_queued",
                          "reclaim_gpu_s", *(f.name for f in fields(ActionParams)), "wall_s"])
            for it in range(a.iterations):
                seed = a.seeds[it % len(a.seeds)]
                # Draws for the searched fields only, so a search over a subset draws what a search
                # over just those fields always drew.
                z = np.zeros((a.population, mean.size))
                z[:, free] = rng.standard_normal((a.population, int(free.sum())))
                xs = np.clip(mean + sd * z, lo, hi)
                if a.init_from:  # a continued search: the current mean competes unperturbed
                    xs[0] = np.clip(mean, lo, hi)
                scores = []
                ps = [ActionParams.from_vector(x) for x in xs]
                for i, (p, r) in enumerate(zip(ps, run(play, [a] * len(ps), ps, [seed] * len(ps)),
                                               strict=True)):
                    score = r["reward"] - base[seed]["reward"]
                    scores.append(score)
                    log.writerow([it, seed, i, score, *(r[k] for k in (
                        "reward", "utilization_pct", "jct_s", "sla_violation_pct",
                        "p99_task_latency_s", "burst_queued", "reclaim_gpu_s")),
                        *asdict(p).values(), time.perf_counter() - t0])
                    fh.flush()
                    if score > best["score"]:
                        best = {"score": score, "params": p, "iteration": it, "seed": seed, **r}
                elite = xs[np.argsort(scores)[::-1][:a.elite]]
                mean = elite.mean(axis=0)
                sd = free * np.maximum(elite.std(axis=0), 0.05 * (hi - lo))
                curve.append({"iteration": it, "seed": seed, "best": max(scores),
                              "mean": float(np.mean(scores))})
                print(json.dumps(curve[-1]), flush=True)
    finally:  # a failed episode must not leave the workers behind
        if pool is not None:
            pool.shutdown(cancel_futures=True)
    p = best.pop("params")
    manifest = {"version": f"dsan-actions-{int(time.time())}",
                "trained_by": "python -m dsan.train.actions_search " + _flags(a),
                "args": asdict(a), "curve": curve, "best": best,
                "kubernetes_on_training_seeds": base}
    if a.init_from:  # provenance of the fields this search did not move
        manifest["started_from"] = load_actions(a.init_from)[2]
    save_actions(out, p, manifest)
    if a.model_dir:
        save_actions(a.model_dir, p, manifest)
    return manifest


def _flags(a: Args) -> str:
    out = []
    for k, v in asdict(a).items():
        flag = "--" + k.replace("_", "-")
        if isinstance(v, bool):
            out.append(flag if v else "--no-" + flag[2:])
        elif k not in ("model_dir", "jobs") and v not in ("", ()):
            out.append(f"{flag} {' '.join(map(str, v)) if isinstance(v, tuple) else v}")
    return " ".join(out)


def parse(argv: list[str] | None = None) -> Args:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_fields(ap, {"": Args})
    return Args(**given(Args, ap.parse_args(argv)))


if __name__ == "__main__":
    main(parse())
