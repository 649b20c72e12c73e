"""``dsan explain``: Shapley report of DSAN's decisions on an openb episode, by feature name."""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np


def add_parser(sub: argparse._SubParsersAction) -> argparse.ArgumentParser:  # type: ignore[type-arg]
    p = sub.add_parser(
        "explain",
        help="explain scheduling decisions (SHAP report)",
        description="Play an openb episode with DSAN and attribute sampled decisions to the "
        "128 named features with Shapley values (Monte-Carlo permutations).",
    )
    p.add_argument("--pods", default="openb_pod_list_default.csv", help="openb pod file")
    p.add_argument("--n-nodes", type=int, default=64)
    p.add_argument("--decisions", type=int, default=20, help="decisions to explain")
    p.add_argument("--permutations", type=int, default=64)
    p.add_argument("--top", type=int, default=15, help="features listed in the report")
    p.add_argument("--model-dir", default=None, help="default: the shipped model")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", type=Path, default=None, help="write the markdown report here")
    p.set_defaults(func=run)
    return p


def run(ns: argparse.Namespace) -> int:
    from dsan.explain.report import explain_episode

    if ns.n_nodes < 2 or ns.decisions < 1 or ns.permutations < 1:
        raise SystemExit("dsan explain: --n-nodes >= 2, --decisions >= 1, --permutations >= 1")
    text = explain_episode(
        ns.pods, ns.n_nodes, ns.decisions, ns.permutations, ns.top, ns.model_dir, ns.seed
    )
    if ns.out:
        ns.out.parent.mkdir(parents=True, exist_ok=True)
        ns.out.write_text(text)
    print(text, end="")
    return 0


__all__ = ["add_parser", "np"]
