"""The ``heteroplan`` command.

Each subcommand lives in its own module under :mod:`heteroplan.commands` exposing
``register(subparsers)``; this file only wires them together.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence

from heteroplan import __version__
from heteroplan.errors import HeteroplanError

# Subcommand modules under heteroplan.commands, in the order shown by --help.
COMMANDS = ("demo", "simulate", "sweep", "hadar", "plan", "profile", "run", "goodput", "clusters")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="heteroplan",
        description="Plan and schedule deep-learning training on heterogeneous GPU clusters.",
    )
    parser.add_argument("--version", action="version", version=f"heteroplan {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in COMMANDS:
        importlib.import_module(f"heteroplan.commands.{name}").register(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return 1
    try:
        return int(args.func(args) or 0)
    except HeteroplanError as exc:
        print(f"heteroplan {args.command}: error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
