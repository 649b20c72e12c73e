"""Replaying a simulator run up to decision N, to freeze that decision for explaining. openb
runs exactly as :func:`dsan.sim.protocol.run_openb` does (node permutation, pod order, tie rule,
random stream); decision N is the pod at position N of the submission order, pods that fit
nowhere included.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from dsan.explain.decision import Decision, ExplainError, decide
from dsan.features.target import TargetWorkload
from dsan.policies.registry import make_scorer
from dsan.sim.openb import load_nodes, load_pods
from dsan.sim.protocol import OpenbConfig, tie_ranks, tuned_order
from dsan.sim.scheduler import schedule_one, select_node


def replay_openb(cfg: OpenbConfig, decision: int, **scorer_kwargs: Any) -> Decision:
    """The state of ``cfg``'s run just before decision ``decision``, scored (``scorer_kwargs``
    go to the policy's factory)."""
    nodes = load_nodes(cfg.nodes)
    pods = load_pods(cfg.pods, nodes.gpu_models)
    rng = np.random.default_rng(cfg.seed)
    snap = nodes.snapshot(rng.permutation(len(nodes)))
    specs = pods.pod_specs(snap.gpu_models)
    target = TargetWorkload.from_pods(specs, snap.gpu_models)
    capacity = 1000 * int(snap.gpu_count.sum())
    if capacity == 0:
        raise ExplainError(f"{cfg.nodes}: the node list has no GPUs")
    order = tuned_order(pods.gpu_request_milli(), capacity, cfg.tune, rng)
    if not 0 <= decision < len(order):
        raise ExplainError(f"decision {decision} is out of range: this run makes {len(order)} "
                           f"decisions (0..{len(order) - 1})")
    scorer = make_scorer(cfg.policy, seed=cfg.seed, target_workload=target, **scorer_kwargs)
    tie_rank = tie_ranks(cfg.tie_break, snap)
    for e in range(decision):
        schedule_one(specs[order[e]], snap, scorer, rng, tie_rank)
    return decide(specs[order[decision]], snap, scorer, rng, tie_rank, index=decision)


def replay_scenario(scenario: str, policy: str, seed: int, decision: int,
                    hours: float | None = None, burst: bool = False,
                    **scorer_kwargs: Any) -> Decision:
    """Decision ``decision`` of a seed-scenario run, driven as
    :func:`dsan.sim.scenario.runner.run_policy` drives it (same scorer wiring and tie stream)."""
    from dsan.sim.scenario.config import load
    from dsan.sim.scenario.engine import Engine
    from dsan.sim.scenario.workload import generate

    if decision < 0:
        raise ExplainError(f"decision must be >= 0, got {decision}")
    cfg = load(scenario)
    wl = generate(cfg, seed, burst)
    engine = Engine(cfg, seed, burst=burst, hours=hours, workload=wl)
    fgd_like = policy in ("fgd", "dsan")
    target = TargetWorkload.from_pods(wl.pods, engine.snap.gpu_models) if fgd_like else None
    scorer = make_scorer(policy, seed=seed, target_workload=target, **scorer_kwargs)
    engine.attach(scorer)
    rng = np.random.default_rng(seed)
    gen = engine.decisions()
    try:
        d = next(gen, None)
        for _ in range(decision):
            if d is None:
                break
            node = select_node(d.pod, d.snapshot, scorer, rng, d.nodes)
            d = gen.send(int(node)) if node is not None else None
    except StopIteration:
        d = None
    if d is None:
        gen.close()
        raise ExplainError(f"decision {decision} is out of range: the run ended before it")
    # a copy: closing the generator may let the engine move on with its live snapshot
    out = decide(d.pod, d.snapshot.copy(), scorer, rng, None, index=decision, nodes=d.nodes)
    gen.close()
    return out
