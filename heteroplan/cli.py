"""The ``heteroplan`` command.

Each subcommand lives in its own module under :mod:`heteroplan.commands` exposing
``register(subparsers)``; this file only wires them together. Exit codes: 0 done, 1 no
command, 2 bad input, 3 a simulation stopped early, 130/143 interrupted, 141 stdout's reader
went away (docs/errors.md). With ``--json`` a command prints exactly one JSON document on stdout
(notes and progress go to stderr).
"""

from __future__ import annotations

import argparse
import importlib
import logging
import os
import sys
from collections.abc import Sequence

from heteroplan.errors import HeteroplanError
from heteroplan.names import printable
from heteroplan.version import __version__

# Subcommand modules under heteroplan.commands, in the order shown by --help.
COMMANDS = ("demo", "simulate", "sweep", "hadar", "plan", "profile", "run", "schedule", "goodput", "clusters")


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
    """Run the command; a reader that closes the pipe early (``| head -1``) ends it quietly
    with exit code 141 (128 + SIGPIPE), as a shell tool killed by SIGPIPE would."""
    try:
        code = _main(argv)
        sys.stdout.flush()  # a closed pipe shows here, not at exit as "Exception ignored ..."
        return code
    except BrokenPipeError:
        _silence_stdout()
        return EXIT_BROKEN_PIPE


# Exit code when stdout's reader went away (a shell reports 128 + SIGPIPE for such a command).
EXIT_BROKEN_PIPE = 141


def _silence_stdout() -> None:
    """Point stdout at /dev/null so that the interpreter's last flush does not raise again."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (OSError, ValueError, AttributeError):  # no real descriptor (captured in tests)
        pass


def _main(argv: Sequence[str] | None = None) -> int:
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
        print(printable(f"heteroplan {args.command}: error: {exc}", keep="\n"), file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"heteroplan {args.command}: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
