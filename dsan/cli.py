"""The ``dsan`` command: parse, wire, run. Each component registers its own subcommands.

Subcommand modules are imported lazily so ``dsan sim`` never imports the sidecar's
Kubernetes client and ``dsan serve`` never imports the simulator's plotting.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Callable, Sequence
from typing import Any

#: (subcommand, module with ``add_parser(subparsers)`` returning the parser, help text)
SUBCOMMANDS: tuple[tuple[str, str, str], ...] = (
    ("sim", "dsan.sim.cli", "run the cluster simulator (openb, seed-table1, burst)"),
    ("train", "dsan.train.cli", "train the DSAN policy (imitation + PPO, optionally distributed)"),
    ("explain", "dsan.explain.cli", "explain scheduling decisions (SHAP report)"),
    ("serve", "sidecar.cli", "run the scoring sidecar (extender HTTP + gRPC Score)"),
    ("deviceplugin", "deviceplugin.cli", "run the GPU device plugin and telemetry agent"),
)

#: Our top-level packages: a missing module among them is a bug, not a missing extra.
_OURS = ("dsan", "sidecar", "deviceplugin")


def build_parser(argv: Sequence[str] | None = None) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="dsan", description="DSAN Scheduler")
    parser.add_argument("--version", action="version", version=_version())
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    wanted = None
    if argv:
        wanted = next((a for a in argv if not a.startswith("-")), None)
    for name, module, help_text in SUBCOMMANDS:
        if wanted is not None and wanted != name:
            # Only the chosen subcommand's module is imported; the others get a stub entry.
            sub.add_parser(name, help=help_text)
            continue
        try:
            mod = importlib.import_module(module)
        except ModuleNotFoundError as exc:
            # The subcommand's module, or a library it needs that this install lacks (the
            # serving images carry no torch: `dsan train` is listed, not offered). A module
            # of ours missing is a bug and raises.
            if exc.name is not None and (module.startswith(exc.name)
                                         or exc.name.split(".")[0] not in _OURS):
                sub.add_parser(name, help=f"{help_text} [not available: {exc.name}]")
                continue
            raise
        add: Callable[[Any], argparse.ArgumentParser] = mod.add_parser
        add(sub)
    return parser


def _version() -> str:
    from dsan import __version__

    return f"dsan {__version__}"


def main(argv: Sequence[str] | None = None) -> int:
    args_list = list(sys.argv[1:] if argv is None else argv)
    parser = build_parser(args_list)
    args = parser.parse_args(args_list)
    run = getattr(args, "func", None)
    if run is None:
        parser.print_help()
        return 2
    return int(run(args) or 0)


if __name__ == "__main__":
    raise SystemExit(main())
