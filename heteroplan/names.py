"""Names from users and files where they become paths or reach a terminal.

:func:`path_component` is the one gate every name that becomes a file or directory name passes
(policy names, plugin policies' included, sweep names, job ids, output stems): it refuses what
would leave the directory or confuse it. :func:`printable` is what the command line prints of
text it did not write itself (names, zones, GPU types, job ids from files): control characters
come out escaped, so a name cannot clear the screen or fake a line of output. :func:`a_path`
is the gate of a path argument of the Python API (a string or ``os.PathLike``).
"""

from __future__ import annotations

import os
import unicodedata
from pathlib import Path

from heteroplan.errors import InputError

__all__ = ["path_component", "a_path", "printable", "MAX_NAME_BYTES"]

MAX_NAME_BYTES = 200
"""Longest name (UTF-8 bytes) that becomes a path component: file systems take 255 bytes per
component, and the library adds suffixes (``.partial.json``, ``gpus_<policy>.png``)."""

_HIDDEN = frozenset({"Cc", "Cf", "Cs", "Co", "Cn", "Zl", "Zp"})
"""Unicode categories escaped on a terminal and refused in a path: control, format (bidi
overrides, zero-width), surrogate, private-use and unassigned code points, line and paragraph separators."""


def _hidden(char: str) -> bool:
    return unicodedata.category(char) in _HIDDEN


def path_component(field: str, name: object) -> str:
    """``name`` unchanged if it is safe as one file or directory name inside a directory the
    library writes; :class:`InputError` naming ``field`` otherwise.

    Refused: a non-string, the empty name, ``.`` and ``..``, a path separator (``/`` or ``\\``),
    NUL and other control or invisible characters (see :func:`printable`), and names over
    :data:`MAX_NAME_BYTES` bytes of UTF-8."""
    if not isinstance(name, str):
        raise InputError(field, name, "must be a name (a string)")
    if not name.strip():
        raise InputError(field, name, "must be a non-empty name")
    if name in (".", ".."):
        raise InputError(field, name, "is not a name (it would name a directory above or this one)")
    if "/" in name or "\\" in name:
        raise InputError(field, printable(name), "must not contain a path separator ('/' or '\\'): it "
                         "becomes a file name")
    bad = next((c for c in name if _hidden(c)), None)
    if bad is not None:
        raise InputError(field, printable(name), f"must not contain the control or invisible character "
                         f"{printable(bad)}: it becomes a file name")
    size = len(name.encode("utf-8"))
    if size > MAX_NAME_BYTES:
        raise InputError(field, printable(name[:40]) + "...", f"is {size} bytes long; a name that becomes a file "
                         f"name has at most {MAX_NAME_BYTES} bytes")
    return name


def _escape(char: str) -> str:
    code = ord(char)
    if code <= 0xFF:
        return f"\\x{code:02x}"
    return f"\\u{code:04x}" if code <= 0xFFFF else f"\\U{code:08x}"


def printable(text: object, keep: str = "") -> str:
    """``str(text)`` with every control or invisible character (Unicode categories Cc, Cf, Cs,
    Co, Cn, Zl, Zp: escape sequences, carriage returns, tabs, newlines, bidi overrides) written as
    a Python-style escape (``\\x1b``, ``\\u202e``), except the characters in ``keep`` (``"\\n"``
    for a multi-line text); everything else unchanged."""
    text = str(text)
    if text.isprintable():  # the common case, in C: no category above occurs (nor Zs other than ' ')
        return text
    return "".join(_escape(c) if _hidden(c) and c not in keep else c for c in text)


def a_path(field: str, value: object, error: type[InputError] = InputError) -> Path:
    """``value``, a path given to the Python API (a ``str`` or an ``os.PathLike`` naming text), as a
    :class:`~pathlib.Path`; ``error`` (an :class:`InputError` class) naming ``field`` otherwise (``5``,
    ``None``, bytes), where ``Path(5)`` raised a TypeError from inside pathlib."""
    if not isinstance(value, str | os.PathLike) or not isinstance(os.fspath(value), str):
        raise error(field, value, "must be a path (a string or pathlib.Path)")
    return Path(value)
