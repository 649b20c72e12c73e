"""The ``dsan`` command. Each component registers its own subcommands; only the chosen one's
module is imported, so ``dsan serve`` never imports the simulator's plotting (nor ``dsan sim``
the sidecar's Kubernetes client).
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Callable, Sequence
from typing import Any

from dsan import __version__

#: (subcommand, module with ``add_parser(subparsers)`` returning the parser, help text, the
#: install extra it needs beyond the base install)
SUBCOMMANDS: tuple[tuple[str, str, str, str], ...] = (
    ("sim", "dsan.sim.cli", "run the cluster simulator (openb, seed-table1, burst)", "sim"),
    ("train", "dsan.train.cli", "train the DSAN policy (imitation + PPO, optionally distributed)",
     "train"),
    ("explain", "dsan.explain.cli",
     "explain scheduling decisions (SHAP reports; `dsan explain pod` asks the sidecar)", "sim"),
    ("serve", "sidecar.cli", "run the scoring sidecar (extender HTTP + gRPC Score)", ""),
    ("deviceplugin", "deviceplugin.cli", "run the GPU device plugin and telemetry agent", ""),
)
#: Our top-level packages: a missing module among them is a bug, not a missing extra.
OUR_PACKAGES = ("dsan", "sidecar", "deviceplugin")


def build_parser(argv: Sequence[str] | None = None) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="dsan", description="DSAN Scheduler")
    parser.add_argument("--version", action="version", version=f"dsan {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    wanted = next((a for a in argv or () if not a.startswith("-")), None)
    for name, module, help_text, extra in SUBCOMMANDS:
        if wanted is not None and wanted != name:  # a stub entry: its module is not imported
            sub.add_parser(name, help=help_text)
            continue
        try:
            mod = importlib.import_module(module)
        except ModuleNotFoundError as exc:
            if exc.name is not None and exc.name.split(".")[0] not in OUR_PACKAGES:
                # a dependency of an extra this install lacks: say which to install
                need = f"pip install 'dsan-scheduler[{extra}]'" if extra else exc.name
                stub = sub.add_parser(name, help=f"{help_text} [not installed: {need}]")
                stub.set_defaults(func=_missing(name, exc.name, need))
                continue
            raise
        mod.add_parser(sub)
    return parser


def _missing(name: str, module: str, need: str) -> Callable[[Any], int]:
    def run(args: Any) -> int:
        print(f"dsan {name}: needs {module}, which this install lacks: {need}", file=sys.stderr)
        return 2

    return run


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
