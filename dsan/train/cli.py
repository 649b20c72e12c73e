"""``dsan train``: parse, wire, run (single process, or ``--workers N`` over torch RPC)."""

from __future__ import annotations

import argparse
import dataclasses
import json

from dsan.core.configload import add_fields, given
from dsan.train.ppo import Args, train
from dsan.train.scenario_train import ScenarioArgs
from dsan.train.scenario_train import train as train_scenario
from dsan.train.selection import select

#: Fields of Args the distributed trainer never reads: it runs no imitation stage, starts
#: afresh and exports to <out>/model.
DIST_UNUSED = ("resume", "model_dir", "teacher", "lr", "imitation_episodes", "imitation_epochs")


def add_parser(sub: argparse._SubParsersAction) -> argparse.ArgumentParser:
    p = sub.add_parser(
        "train",
        help="train the DSAN policy (imitation + PPO, optionally distributed)",
        description="Imitation warm start from the best heuristic, then PPO on openb "
        "episodes (or, with --scenario, on windows of a simulator scenario). Writes "
        "metrics.csv, checkpoints and <out>/model/ (scenario mode: also TensorBoard <out>/tb).",
    )
    p.add_argument(
        "--scenario",
        default=None,
        help="train on this simulator scenario (e.g. seed-table1) instead of openb episodes: "
        "imitation of the per-task-type teacher, then PPO (dsan.train.scenario_train)",
    )
    add_fields(p, {"openb": Args, "scenario": ScenarioArgs}, skip=("scenario",))
    p.add_argument("--workers", type=int, default=0,
                   help="rollout workers on torch.distributed.rpc (0 = single process)")
    p.add_argument("--master-addr", default="127.0.0.1", help="rendezvous address (multi-host)")
    p.add_argument("--master-port", type=int, default=29533)
    p.add_argument("--rank", type=int, default=None, help="this process's rank (multi-host only)")
    p.add_argument("--rollback-threshold", type=float, default=1.0,
                   help="allocation points the shadow tolerates before rolling the PS back")
    p.set_defaults(func=run)
    return p


def _flags(names: list[str]) -> str:
    return ", ".join("--" + n.replace("_", "-") for n in names)


def _unused(ns: argparse.Namespace) -> str | None:
    """What is wrong with flags the chosen trainer would silently ignore, if anything."""
    scenario = ns.scenario is not None
    mine, other = (ScenarioArgs, Args) if scenario else (Args, ScenarioArgs)
    own = {f.name for f in dataclasses.fields(mine)}
    stray = [k for k in given(other, ns) if k not in own and k != "scenario"]
    if scenario:
        stray += [k for k in ("workers", "rank") if getattr(ns, k) not in (0, None)]
    if stray:
        return f"{_flags(stray)} apply only without --scenario" if scenario else (
            f"{_flags(stray)} apply only with --scenario")
    if ns.workers < 0 or (ns.rank is not None and ns.workers == 0):
        return "--workers must be >= 0, and --rank needs --workers"
    dist_stray = [k for k in DIST_UNUSED if hasattr(ns, k)] if ns.workers > 0 else []
    if dist_stray:
        return f"{_flags(dist_stray)} not used by the distributed trainer (--workers)"
    return None


def run(ns: argparse.Namespace) -> int:
    if (why := _unused(ns)) is not None:
        raise SystemExit(f"dsan train: {why}")
    if ns.scenario is not None:
        try:
            sa = ScenarioArgs(**{**given(ScenarioArgs, ns), "scenario": ns.scenario})
        except (TypeError, ValueError) as exc:
            raise SystemExit(f"dsan train --scenario: {exc}") from None
        summary = select(sa) if sa.select_seeds else train_scenario(sa)
    else:
        try:
            a = Args(**given(Args, ns))
        except ValueError as exc:
            raise SystemExit(f"dsan train: {exc}") from None
        if ns.workers > 0:
            from dsan.train.distributed import DistConfig
            from dsan.train.distributed import run as run_dist

            try:
                d = DistConfig(workers=ns.workers, master_addr=ns.master_addr,
                               master_port=ns.master_port,
                               rollback_threshold=ns.rollback_threshold)
            except ValueError as exc:
                raise SystemExit(f"dsan train: {exc}") from None
            summary = run_dist(a, d, ns.rank)
        else:
            summary = train(a)
    print(json.dumps(summary, indent=2, default=str))
    return 0
