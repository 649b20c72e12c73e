"""Training-seed selection (``--select-seeds``): train each seed, play each model on full
``validate_seeds`` days as ``dsan sim`` does, copy the best (:func:`rank_key`) to
``model_dir``. Why: the stage's one-hour checks cannot tell seeds apart, full days can
(docs/model.md). ``--resume`` keeps seeds already trained and validated.
"""

from __future__ import annotations

import json
import multiprocessing
import shutil
from concurrent.futures import ProcessPoolExecutor
from dataclasses import replace
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np

from dsan.model.export import MANIFEST
from dsan.sim.scenario.config import load as load_scenario
from dsan.sim.scenario.runner import default_factory, run_policy
from dsan.train.scenario_train import ScenarioArgs, train

#: The per-day metrics a validation keeps (the Table 1 columns plus cost).
METRICS = ("utilization_pct", "p99_task_latency_s", "sla_violation_pct", "cost")


def validate(
    scenario: str, model_dir: str | Path, seeds: tuple[int, ...], hours: float
) -> dict[str, Any]:
    """The model at ``model_dir`` on full days of ``scenario``: per-seed rows and means."""
    factory = partial(default_factory, model_dir=str(model_dir))
    cfg = load_scenario(scenario)
    days = []
    for s in seeds:
        r = run_policy(cfg, "dsan", s, hours=hours, factory=factory)
        days.append({"seed": s, **{k: float(r[k]) for k in METRICS}})
    means = {k: float(np.mean([d[k] for d in days])) for k in METRICS}
    return {"model_dir": str(model_dir), "seeds": list(seeds), "hours": hours, "days": days,
            **means}


def rank_key(v: dict[str, Any]) -> tuple[float, float, float, float]:
    """Lower is better: SLA %, then utilisation (negated), P99, cost."""
    return (round(v["sla_violation_pct"], 9), -round(v["utilization_pct"], 9),
            round(v["p99_task_latency_s"], 9), round(v["cost"], 9))


def candidate(sub: ScenarioArgs) -> dict[str, Any]:
    """One seed trained and validated (each skipped when ``resume`` finds it done)."""
    seed_out = Path(sub.out)
    trained = (seed_out / "summary.json").is_file() and (Path(sub.model_dir) / MANIFEST).is_file()
    if not (sub.resume and trained):
        train(sub)
    cached = seed_out / "validation.json"
    v = json.loads(cached.read_text()) if sub.resume and cached.is_file() else {}
    if (v.get("seeds"), v.get("hours")) != (list(sub.validate_seeds), sub.validate_hours):
        v = validate(sub.scenario, sub.model_dir, sub.validate_seeds, sub.validate_hours)
        cached.write_text(json.dumps(v, indent=2) + "\n")
    return {"training_seed": sub.seed, **v}


def select(a: ScenarioArgs) -> dict[str, Any]:
    """Train ``a.select_seeds`` (``a.select_jobs`` at a time), validate each, copy the winner
    to ``a.model_dir``."""
    out = Path(a.out)
    final_dir = Path(a.model_dir) if a.model_dir else out / "model"
    subs = [replace(a, seed=s, out=str(out / f"seed{s}"), model_dir=str(out / f"seed{s}/model"),
                    select_seeds=()) for s in a.select_seeds]
    if a.select_jobs > 1:  # seeds are independent and each trains on one thread
        # spawn, not fork: a parent that has already run autograd cannot fork safely
        ctx = multiprocessing.get_context("spawn")
        with ProcessPoolExecutor(min(a.select_jobs, len(subs)), mp_context=ctx) as pool:
            rows = list(pool.map(candidate, subs))
    else:
        rows = [candidate(sub) for sub in subs]
    best = min(rows, key=rank_key)
    if final_dir.resolve() != Path(best["model_dir"]).resolve():
        # Replace, not merge: a stale model.ts or .pt2 from another seed must not survive.
        if final_dir.exists():
            if any(final_dir.iterdir()) and not (final_dir / MANIFEST).is_file():
                raise FileExistsError(f"{final_dir} exists and is not a model directory")
            shutil.rmtree(final_dir)
        shutil.copytree(best["model_dir"], final_dir)
    selection = {
        "chosen_seed": best["training_seed"],
        "criterion": "min SLA %, then max utilisation %, min P99 s, min cost (means)",
        "validate_seeds": list(a.validate_seeds),
        "validate_hours": a.validate_hours,
        "candidates": [
            {"training_seed": r["training_seed"], **{k: r[k] for k in METRICS}} for r in rows
        ],
    }
    manifest_path = final_dir / MANIFEST
    manifest = json.loads(manifest_path.read_text())
    manifest.setdefault("eval", {})["selection"] = selection
    manifest_path.write_text(json.dumps(manifest, indent=2, sort_keys=True) + "\n")
    (out / "selection.json").write_text(json.dumps({**selection, "rows": rows}, indent=2) + "\n")
    return {**selection, "model_dir": str(final_dir)}
