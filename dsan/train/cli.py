"""``dsan train``: parse, wire, run (single process, or ``--workers N`` over torch RPC)."""

from __future__ import annotations

import argparse
import json
from dataclasses import fields
from typing import Any

from dsan.train.ppo import Args


def add_parser(sub: argparse._SubParsersAction) -> argparse.ArgumentParser:
    p = sub.add_parser(
        "train",
        help="train the DSAN policy (imitation + PPO, optionally distributed)",
        description="Imitation warm start from the best heuristic, then PPO on openb "
        "episodes. Writes metrics.csv, checkpoints and <out>/model/.",
    )
    for f in fields(Args):
        if f.name in ("extra",):
            continue
        flag = "--" + f.name.replace("_", "-")
        default = f.default if not callable(f.default_factory) else f.default_factory()
        if isinstance(default, bool):
            p.add_argument(flag, action=argparse.BooleanOptionalAction, default=default)
        elif isinstance(default, tuple):
            p.add_argument(
                flag, nargs="+", default=list(default), help=f"default: {' '.join(default)}"
            )
        else:
            p.add_argument(flag, type=type(default), default=default, help=f"default: {default}")
    p.add_argument(
        "--workers",
        type=int,
        default=0,
        help="rollout workers on torch.distributed.rpc (0 = single process)",
    )
    p.add_argument("--master-addr", default="127.0.0.1", help="rendezvous address (multi-host)")
    p.add_argument("--master-port", type=int, default=29533)
    p.add_argument("--rank", type=int, default=None, help="this process's rank (multi-host only)")
    p.add_argument(
        "--rollback-threshold",
        type=float,
        default=1.0,
        help="allocation points the shadow tolerates before rolling the PS back",
    )
    p.add_argument("--inject-degraded-at", type=int, default=-1, help=argparse.SUPPRESS)
    p.add_argument("--init-weights", default=None, help="start PPO from these weights (weights.pt)")
    p.set_defaults(func=run)
    return p


def run(ns: argparse.Namespace) -> int:
    kw: dict[str, Any] = {f.name: getattr(ns, f.name) for f in fields(Args) if f.name != "extra"}
    kw["workloads"] = tuple(kw["workloads"])
    try:
        a = Args(**kw, extra={"init_weights": ns.init_weights})
    except ValueError as exc:
        raise SystemExit(f"dsan train: {exc}") from None
    if ns.workers > 0:
        from dsan.train.distributed import DistConfig
        from dsan.train.distributed import run as run_dist

        d = DistConfig(
            workers=ns.workers,
            master_addr=ns.master_addr,
            master_port=ns.master_port,
            rollback_threshold=ns.rollback_threshold,
            inject_degraded_at=ns.inject_degraded_at,
        )
        summary = run_dist(a, d, ns.rank)
    else:
        from dsan.train.ppo import train

        summary = train(a)
    print(json.dumps(summary, indent=2, default=str))
    return 0
