"""Where one decision's CPU time goes in the lockstep collector (what workers run): wraps the
hot path's stages with process-time timers and prints microseconds per decision for each,
plus the unwrapped rate. Usage (repo root; a quiet machine gives the cleanest split)::

    OMP_NUM_THREADS=1 .venv/bin/python bench/training_decision_breakdown.py [--episodes 16]
"""

from __future__ import annotations

import argparse
import json
import os
import time
from collections.abc import Callable
from typing import Any

import numpy as np
import torch

import dsan.features as features
import dsan.features.featurizer as featurizer
import dsan.train.collector as collector
import dsan.train.openb as openb
from dsan.model.net import DSANNet, ModelConfig
from dsan.train.openb import EnvConfig, OpenbEnv, make_episode

SPENT: dict[str, float] = {}


def _timed(name: str, fn: Callable[..., Any]) -> Callable[..., Any]:
    def wrapper(*a: Any, **kw: Any) -> Any:
        t0 = time.process_time()
        try:
            return fn(*a, **kw)
        finally:
            SPENT[name] = SPENT.get(name, 0.0) + time.process_time() - t0

    return wrapper


def _play(model: DSANNet, env: EnvConfig, episodes: int) -> tuple[int, float]:
    eps = [make_episode(env, s) for s in range(episodes)]
    c0 = time.process_time()
    rng = np.random.default_rng(0)
    # choose= read at call time, so the timed draw below is the one used
    n = sum(len(r) for r in collector.collect(eps, model, "sample", rng=rng,
                                               choose=collector.segment_choice))
    return n, time.process_time() - c0


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--episodes", type=int, default=16)
    ap.add_argument("--n-nodes", type=int, default=96)
    a = ap.parse_args()
    torch.set_num_threads(1)
    torch.manual_seed(0)
    model, env = DSANNet(ModelConfig()), EnvConfig(n_nodes=a.n_nodes)
    _play(model, env, 1)  # warm: trace parsing, first torch calls
    n, cpu = _play(model, env, a.episodes)
    plain = {"decisions": n, "decisions_per_cpu_s": round(n / cpu, 1)}
    # Nested stages are reported exclusive of their children (cache inside featurize).
    collector.featurize_batch = _timed("featurize", features.featurize_batch)
    # the featurizer's own reference: patching the package's name would time nothing
    featurizer.cached_placements = _timed("placement_cache", featurizer.cached_placements)
    model.score = _timed("model_head", model.score)  # type: ignore[method-assign]
    collector.segment_choice = _timed("sampling", collector.segment_choice)
    OpenbEnv.next_decision = _timed("env_next_decision", OpenbEnv.next_decision)  # type: ignore[method-assign]
    openb.bind_many = _timed("env_bind", openb.bind_many)
    openb.refresh_bound = _timed("env_refresh", openb.refresh_bound)
    OpenbEnv.settle = _timed("env_settle", OpenbEnv.settle)  # type: ignore[method-assign]
    SPENT.clear()
    n2, cpu2 = _play(model, env, a.episodes)
    SPENT["featurize"] -= SPENT["placement_cache"]
    us = {k: round(1e6 * v / n2, 1) for k, v in SPENT.items()}
    us["other"] = round(1e6 * (cpu2 - sum(SPENT.values())) / n2, 1)
    print(json.dumps({**plain, "us_per_decision": us, "load_avg_1min": os.getloadavg()[0]}))


if __name__ == "__main__":
    main()
