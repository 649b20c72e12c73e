"""``dsan-deviceplugin`` / ``python -m deviceplugin``: the same as ``dsan deviceplugin``."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from deviceplugin.cli import add_parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="dsan-deviceplugin")
    sub = parser.add_subparsers(dest="command")
    add_parser(sub)
    args = parser.parse_args(["deviceplugin", *(sys.argv[1:] if argv is None else argv)])
    return int(args.func(args) or 0)


if __name__ == "__main__":
    raise SystemExit(main())
