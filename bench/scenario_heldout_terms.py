"""The scenario trainer's held-out reward, split into its terms, per window.

``dsan train --scenario`` keeps the PPO iteration with the best greedy reward on held-out
windows (``scenario_train.evaluate``: seeds from 10000, one hour from each of
``start_hours``). This replays those windows with a tree's default model (and the teacher)
and prints one JSON line per window with the reward's terms (``dsan.train.window``:
utilisation, completion, cost, SLA and the SLA shaping) and the window's own utilisation
and SLA. Session 10 used it to find why a model's held-out reward fell while its Table 1
improved (docs/results/dsan_openb.md)::

    .venv/bin/python bench/scenario_heldout_terms.py --seeds 2 --hours 0 8
    # another commit's model: from a worktree of it (/tmp/old), its code first on the path
    PYTHONPATH=/tmp/old .venv/bin/python bench/scenario_heldout_terms.py \
        --model /tmp/old/dsan/model/default
"""

from __future__ import annotations

import argparse
import json
from collections import defaultdict
from typing import Any

import numpy as np
import torch

from dsan.model.export import load
from dsan.sim.scenario.metrics import RewardParts
from dsan.train import window
from dsan.train.scenario_train import EVAL_SEED_BASE, ScenarioArgs, play


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="dsan/model/default")
    ap.add_argument("--seeds", type=int, default=2, help="held-out seeds 10000.. (trainer: 2)")
    ap.add_argument("--hours", type=float, nargs="*", default=None,
                    help="window start hours (default: the trainer's start_hours)")
    a = ap.parse_args(argv)
    torch.set_num_threads(1)
    args = ScenarioArgs()
    model, _ = load(a.model)
    terms: dict[str, float] = defaultdict(float)
    reward = window.WindowEnv.reward

    def split(self: window.WindowEnv, parts: RewardParts, overheat: float,
              boot_wait_s: float = 0.0) -> float:
        w = self.weights
        terms["util"] += w.w_util * parts.util_integral / self.window_s
        terms["completion"] -= w.w_completion * parts.jct_sum_s / (3600.0 * w.jobs_norm)
        terms["cost"] -= w.w_cost * parts.cost / self.full_cost
        terms["sla"] -= w.w_sla * parts.sla_violations / self.sla_norm
        terms["sla_shaping"] -= w.sla_shaping * overheat
        terms["overheating_steps"] += overheat > 0
        terms["steps"] += 1
        return reward(self, parts, overheat, boot_wait_s)

    window.WindowEnv.reward = split  # type: ignore[method-assign]
    for mode in ("greedy", "teacher"):
        for i in range(a.seeds):
            for start in a.hours if a.hours is not None else args.start_hours:
                terms.clear()
                ro = play(args, EVAL_SEED_BASE + i, start, model if mode == "greedy" else None,
                          mode, np.random.default_rng(i))
                row: dict[str, Any] = {
                    "policy": "model" if mode == "greedy" else "teacher",
                    "seed": EVAL_SEED_BASE + i, "start_h": start, "reward": round(ro.total, 4),
                    **{k: round(v, 4) for k, v in terms.items()},
                    "window_util_pct": round(ro.summary["utilization_pct"], 2),
                    "window_sla_pct": round(ro.summary["sla_violation_pct"], 3),
                }
                print(json.dumps(row), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
