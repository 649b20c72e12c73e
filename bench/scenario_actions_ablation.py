"""DSAN's learned actions (``dsan/model/default/actions.json``) with another policy's node
choice, on ``seed-table1-v3``: the setting the actions were searched in (k8s-default's node
choice), so their effect shows apart from DSAN's model. Prints JSON in the shape of ``dsan
sim --json`` (policy ``<node policy>+actions``), for bench/scenario_table1_v3_report.py.

    python bench/scenario_actions_ablation.py --seeds 1001-1010 > out/heldout-actions.json

``--model-dir out/actions --label "k8s-default+actions (first stage)"`` runs another
search's actions (e.g. the first stage's, before the headroom was searched with DSAN's node
choice) under a row name of its own.
"""

from __future__ import annotations

import argparse
import json
import sys

from dsan.model.artifact import DEFAULT_DIR
from dsan.policies.dsan_actions import CostReclaimer, load_actions
from dsan.sim.cli import parse_seeds
from dsan.sim.scenario.config import load
from dsan.sim.scenario.runner import run_policy
from dsan.train.actions_search import with_actions


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seeds", default="1001-1010")
    ap.add_argument("--node-policy", default="k8s-default")
    ap.add_argument("--burst", action="store_true")
    ap.add_argument("--model-dir", default=str(DEFAULT_DIR), help="where actions.json is")
    ap.add_argument("--label", default="", help="the row's name (default <node policy>+actions)")
    a = ap.parse_args(argv)
    reclaimer, _, _ = load_actions(a.model_dir)
    if not isinstance(reclaimer, CostReclaimer):
        ap.error(f"no actions.json in {a.model_dir}")
    cfg = load("seed-table1-v3")
    f = with_actions(reclaimer.p, a.node_policy)
    runs = []
    for seed in parse_seeds(a.seeds):
        r = run_policy(cfg, a.node_policy, seed, factory=f, burst=a.burst,
                       hours=cfg.burst.hours if a.burst else None)
        r.pop("series")
        runs.append(r)
        print(f"seed {seed}: util {r['utilization_pct']:.1f}", file=sys.stderr, flush=True)
    print(json.dumps({a.label or f"{a.node_policy}+actions": {"runs": runs}}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
