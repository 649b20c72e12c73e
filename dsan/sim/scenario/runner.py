"""Run the scenario for one policy (any :class:`~dsan.policies.base.Scorer`) and collect
Table 1. Each placement goes through :func:`dsan.sim.scheduler.select_node` as in openb, ties
from the seeded generator (or, with ``tie_break: name``, to the lowest node name).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import numpy as np
import numpy.typing as npt

from dsan.policies.base import Scorer
from dsan.sim.scenario.config import ScenarioConfig
from dsan.sim.scenario.engine import Engine
from dsan.sim.scenario.workload import Workload, generate
from dsan.sim.scheduler import name_rank, select_node

ScorerFactory = Callable[[str, int, Workload, Engine], Scorer]


def default_factory(name: str, seed: int, wl: Workload, engine: Engine, **options: Any) -> Scorer:
    """Registry scorers; FGD's and DSAN's target workload is this run's own pod mix. ``options``
    go to the scorer's ``make`` (e.g. DSAN's ``model_dir``, through ``functools.partial``)."""
    from dsan.features.target import TargetWorkload
    from dsan.policies.registry import make_scorer, needs

    target = None
    if needs(name).target_workload:
        target = TargetWorkload.from_pods(wl.pods, engine.snap.gpu_models)
    return make_scorer(name, seed=seed, target_workload=target, **options)


def start(cfg: ScenarioConfig, policy: str, seed: int, *, burst: bool = False,
          hours: float | None = None, factory: ScorerFactory = default_factory
          ) -> tuple[Engine, Scorer, np.random.Generator, npt.NDArray[np.int64] | None]:
    """The engine with ``policy``'s scorer attached, the seeded tie stream and the tie ranks
    (``tie_break: name``) that a run places with."""
    wl = generate(cfg, seed, burst)
    engine = Engine(cfg, seed, burst=burst, hours=hours, workload=wl)
    scorer = factory(policy, seed, wl, engine)
    engine.attach(scorer)
    tie_rank = name_rank(engine.snap.names) if cfg.tie_break == "name" else None
    return engine, scorer, np.random.default_rng(seed), tie_rank


def run_policy(cfg: ScenarioConfig, policy: str, seed: int, *, burst: bool = False,
               hours: float | None = None, factory: ScorerFactory = default_factory
               ) -> dict[str, Any]:
    """One run: the summary dict of Table 1 metrics plus the utilisation series."""
    started = time.perf_counter()
    engine, scorer, rng, tie_rank = start(cfg, policy, seed, burst=burst, hours=hours,
                                          factory=factory)
    gen = engine.decisions()
    decisions = 0
    try:
        d = next(gen)
        while True:
            node = select_node(d.pod, d.snapshot, scorer, rng, d.nodes, tie_rank)
            assert node is not None  # d.nodes is never empty
            decisions += 1
            d = gen.send(node)
    except StopIteration:
        pass
    out = engine.summary()
    out["policy"] = policy
    out["seed"] = seed
    out["decisions"] = decisions
    out["runtime_s"] = time.perf_counter() - started
    acc = engine.acc
    out["series"] = {"t_s": acc.series_t, "utilization_pct": acc.series_util,
                     "nodes_on": acc.series_nodes_on}
    return out


def aggregate(runs: list[dict[str, Any]], keys: tuple[str, ...]) -> dict[str, Any]:
    """Mean and sample standard deviation over seeds of the scalar metrics ``keys``."""
    out: dict[str, Any] = {}
    for k in keys:
        vals = np.array([float(r[k]) for r in runs])
        out[k] = float(vals.mean())
        out[f"{k}_sd"] = float(vals.std(ddof=1)) if vals.size > 1 else 0.0
    out["seeds"] = [r["seed"] for r in runs]
    return out
