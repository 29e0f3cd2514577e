"""Reading user files and numbers where they enter: UTF-8 text, JSON without repeated keys,
finite numbers. Every failure is an :class:`~heteroplan.errors.InputError` naming the field
(or file) and the value, never a ``UnicodeDecodeError`` or ``OverflowError`` from deep inside.

Small typed functions rather than a validation library: the checks are few, the messages
must name heteroplan's own fields, and ``import heteroplan`` stays light.
"""

from __future__ import annotations

import json
import math
import numbers
import os
from enum import Enum
from pathlib import Path
from typing import Any, TypeGuard, TypeVar

from heteroplan.errors import InputError, check_seconds
from heteroplan.names import a_path

__all__ = ["read_text", "read_json", "finite_number", "is_real", "real_value", "is_count", "work_fraction", "strict_int",
           "enum_choice", "enum_values", "local_process_limit", "check_process_count", "check_wait", "MIN_ROUND_S", "MAX_GENERATED_JOBS", "MAX_WAIT_S"]

E = TypeVar("E", bound=Enum)

MIN_ROUND_S = 10.0
"""Shortest scheduling round (s) a sweep, ``simulate`` or ``hadar`` accepts: below it the round
count explodes (``--round 0.001`` never answers) and no real scheduler reallocates GPUs that often."""

MAX_WAIT_S = 1e9
"""Longest wait (s, ~32 years) a run's timeouts (``RunConfig.timeout_s``, ``--timeout``) take:
torch's process-group timeouts overflow beyond (``--timeout 1e300`` failed every rank with an
OverflowError); a longer wait is no wait a user means."""

MAX_GENERATED_JOBS = 100_000
"""Most jobs ``hadar`` or a sweep's ``generate`` table draws (the largest published traces hold
~100k jobs; a typo of 10**9 would fill memory before the first round)."""


def read_text(path: str | Path, field: str = "path", error: type[InputError] = InputError) -> str:
    """The UTF-8 text of ``path``; unreadable or non-UTF-8 files raise ``error`` naming ``field``,
    and so does a ``path`` that is no path (``5``, ``None``)."""
    try:
        data = a_path(field, path, error).read_bytes()
    except OSError as exc:
        raise error(field, str(path), f"cannot read {field}: {exc.strerror or exc}") from None
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise error(field, str(path), f"not UTF-8 text (byte {exc.start}: {data[exc.start:exc.start + 1]!r})") from None


def _no_repeats(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            raise InputError(f"json key {key!r}", value, "given twice (the first value would be lost)")
        out[key] = value
    return out


def read_json(path: str | Path, field: str = "path", error: type[InputError] = InputError) -> Any:
    """Parse the JSON file ``path`` (UTF-8; ``NaN``/``Infinity`` and repeated keys refused)."""
    text = read_text(path, field, error)

    def refuse_constant(name: str) -> float:
        raise error(field, str(path), f"invalid JSON: {name} is not a valid JSON number")

    try:
        return json.loads(text, object_pairs_hook=_no_repeats, parse_constant=refuse_constant)
    except json.JSONDecodeError as exc:
        raise error(field, str(path), f"invalid JSON: {exc}") from None
    except RecursionError:
        raise error(field, str(path), "invalid JSON: nested too deeply") from None
    except InputError as exc:  # before ValueError, which it is: refuse_constant's names the file already
        if isinstance(exc, error) and exc.field == field:
            raise
        raise error(field, str(path), f"invalid JSON: {exc}") from None  # a repeated key
    except ValueError as exc:  # an integer of more than 4300 digits (int max_str_digits)
        raise error(field, str(path), f"invalid JSON: {exc}") from None


def finite_number(field: str, value: object, low: float | None = None, high: float | None = None,
                  error: type[InputError] = InputError) -> float:
    """``value`` as a finite float within ``[low, high]``: a real number, numpy's too (``np.float32``,
    ``np.int64``); bools and strings refused. Store the float it returns, not ``value``, so that no
    numpy scalar reaches a saved file."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise error(field, value, "must be a number")
    try:
        number = float(value)
    except OverflowError:
        raise error(field, value, "must be a finite number") from None
    if not math.isfinite(number):
        raise error(field, value, "must be a finite number")
    if low is not None and number < low:
        raise error(field, value, f"must be >= {low:g}")
    if high is not None and number > high:
        raise error(field, value, f"must be <= {high:g}")
    return number


def is_real(value: object) -> TypeGuard[float]:
    """A real number (numpy's too) a float holds, not a bool or a string (NaN passes: compare it).
    For type checkers a ``float`` after it (``np.float32`` compares and converts as one)."""
    if not isinstance(value, numbers.Real) or isinstance(value, bool):
        return False
    try:
        float(value)
    except OverflowError:  # an integer beyond a float's range
        return False
    return True


def real_value(value: object) -> float:
    """``value`` as a float where it :func:`is_real` (``np.float32`` too, which is no ``float``),
    else NaN (a bool, a string, an int beyond a float: ``10**400``): for checks such as
    ``math.isfinite(real_value(v)) and real_value(v) > 0`` that name the field themselves."""
    return float(value) if is_real(value) else math.nan


def is_count(value: object) -> TypeGuard[int]:
    """An integer, numpy's too (``np.int64`` from an array), not a bool (``np.bool_`` is no Integral).
    For type checkers an ``int`` after it (``np.int64`` compares and converts as one)."""
    return isinstance(value, numbers.Integral) and not isinstance(value, bool)


def work_fraction(value: object, field: str = "progress") -> float:
    """A job's progress, the fraction of its total work done, as a float: a finite number >= 0
    (anything ``float()`` takes, numpy scalars too; above 1 where a job runs past its nominal work)."""
    try:
        fraction = float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError, OverflowError):
        raise InputError(field, value, "must be a number >= 0 (fraction of total work)") from None
    if not (fraction >= 0 and math.isfinite(fraction)):
        raise InputError(field, value, "must be a number >= 0 (fraction of total work)")
    return fraction


def strict_int(field: str, value: object, low: int | None = None, error: type[InputError] = InputError) -> int:
    """``value`` as an ``int >= low``: an integer (numpy's too), or a float with no fractional part (``8.0``);
    ``8.9``, ``True``, NaN and strings are refused."""
    if isinstance(value, bool):
        raise error(field, value, "must be an integer, not a boolean")
    if isinstance(value, float):
        if not math.isfinite(value) or value != int(value):
            raise error(field, value, "must be a whole number")
    elif not isinstance(value, numbers.Integral):
        raise error(field, value, "must be an integer")
    value = int(value)
    if low is not None and value < low:
        raise error(field, value, f"must be >= {low}")
    return value


def enum_values(enum: type[Enum]) -> tuple[str, ...]:
    """The values of ``enum``'s members, in order (argparse ``choices=``, file-format choices)."""
    return tuple(str(member.value) for member in enum)


def enum_choice(enum: type[E], field: str, value: object, otherwise: str = "") -> E:
    """``value`` as a member of ``enum`` (a member or its value, e.g. a string of a ``StrEnum``);
    :class:`InputError` naming ``field`` and listing the choices otherwise (followed by
    ``otherwise``, what else the field takes, e.g. ``"or give a PerfModel object"``). A member of
    another enum is refused even where its value is one of ``enum``'s (``Recomputation.NONE`` is no
    ``OptimizerSharding``)."""
    tail = f" {otherwise}" if otherwise else ""
    if isinstance(value, Enum) and not isinstance(value, enum):
        raise InputError(field, value, f"is a {type(value).__name__}, not a {enum.__name__}: "
                         f"choose one of {[m.value for m in enum]}{tail}")
    try:
        return enum(value)
    except ValueError:
        raise InputError(field, value, f"choose one of {[m.value for m in enum]}{tail}") from None


def local_process_limit() -> int:
    """The most processes one command starts on this machine: 4 per usable core, at least 16
    (a training rank or benchmark process per GPU; more only thrash a workstation)."""
    try:
        usable = len(os.sched_getaffinity(0))
    except AttributeError:  # macOS, Windows
        usable = os.cpu_count() or 1
    return max(16, 4 * usable)


def check_process_count(field: str, count: int, error: type[InputError] = InputError) -> int:
    """``count`` local processes, refused (naming ``field``) beyond :func:`local_process_limit`."""
    limit = local_process_limit()
    if count > limit:
        raise error(field, count, f"asks for {count} processes on this machine; at most {limit} are started "
                    "locally (4 per core): use a smaller plan, or torchrun across machines")
    return count


def check_wait(field: str, value: object) -> float:
    """``value`` as seconds a process may wait (a torch timeout): ``> 0`` and at most :data:`MAX_WAIT_S`."""
    seconds = check_seconds(field, value)
    if seconds > MAX_WAIT_S:  # inf too
        raise InputError(field, value, f"must be at most {MAX_WAIT_S:g} s (torch's timeouts overflow beyond)")
    return seconds
