"""argparse ``type=`` functions: each flag is parsed and checked once, where it enters.

A bad value is an argparse error (``heteroplan CMD: error: argument --jobs: ...``, exit 2),
never a silent reinterpretation (``--jobs 0`` meaning all jobs, ``--round inf`` looping).
"""

from __future__ import annotations

import argparse
import math
from collections.abc import Callable

__all__ = ["integer", "number", "fraction", "int_list", "nonempty", "MAX_TOKENS"]

MAX_TOKENS = 65_536
"""Longest sequence (tokens) the built-in tiny GPT is asked to run: a typo of 10**9 would fail to allocate."""


def integer(low: int = 1, high: int | None = None) -> Callable[[str], int]:
    """An integer in ``[low, high]``."""
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
        if value < low or (high is not None and value > high):
            bound = f"between {low} and {high}" if high is not None else f">= {low}"
            raise argparse.ArgumentTypeError(f"{value} is out of range: must be {bound}")
        return value
    parse.__name__ = "integer"
    return parse


def number(low: float = 0.0, *, strict: bool = True, high: float | None = None) -> Callable[[str], float]:
    """A finite number ``> low`` (``strict``) or ``>= low``, and ``<= high`` when given."""
    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
        if not math.isfinite(value):
            raise argparse.ArgumentTypeError(f"{text!r} is not a finite number")
        if (value <= low if strict else value < low) or (high is not None and value > high):
            bound = f"{'>' if strict else '>='} {low:g}" + (f" and <= {high:g}" if high is not None else "")
            raise argparse.ArgumentTypeError(f"{value:g} is out of range: must be {bound}")
        return value
    parse.__name__ = "number"
    return parse


fraction = number(0.0, strict=False, high=1.0)
"""A number in ``[0, 1]`` (a fraction of training done)."""


def int_list(low: int = 1) -> Callable[[str], list[int]]:
    """Comma-separated integers, each ``>= low`` (``"1,2,4"``)."""
    one = integer(low)

    def parse(text: str) -> list[int]:
        items = [one(x.strip()) for x in text.split(",") if x.strip()]
        if not items:
            raise argparse.ArgumentTypeError(f"{text!r} holds no integers")
        return items
    parse.__name__ = "integer list"
    return parse


def nonempty(what: str) -> Callable[[str], str]:
    """A value that is not empty or blank (``what`` it should be: ``"a path"``, ``"a name"``):
    ``--out "$DIR"`` with ``DIR`` unset is refused, not taken as the flag left out (no file
    written, a default plan trained) or as the current directory."""
    def parse(text: str) -> str:
        if not text.strip():
            raise argparse.ArgumentTypeError(f"{text!r} is empty: give {what}")
        return text
    parse.__name__ = what
    return parse
