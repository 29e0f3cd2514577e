"""The ``heteroplan`` command.

Each subcommand lives in its own module under :mod:`heteroplan.commands` exposing
``register(subparsers)``; this file only wires them together. Exit codes: 0 done, 1 no
command, 2 bad input, 3 a simulation stopped early, 130/143 interrupted (docs/errors.md).
"""

from __future__ import annotations

import argparse
import importlib
import logging
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
    parser.add_argument("-v", "--verbose", action="store_true",
                        help="log what the library does (heteroplan.* loggers, INFO) to stderr")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in COMMANDS:
        importlib.import_module(f"heteroplan.commands.{name}").register(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.verbose:
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logging.Formatter("%(levelname)s %(name)s: %(message)s"))
        root = logging.getLogger("heteroplan")
        root.addHandler(handler)
        root.setLevel(logging.INFO)
    if not getattr(args, "func", None):
        parser.print_help()
        return 1
    try:
        return int(args.func(args) or 0)
    except HeteroplanError as exc:
        print(f"heteroplan {args.command}: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"heteroplan {args.command}: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
