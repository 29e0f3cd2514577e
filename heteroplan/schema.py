"""One typed decoder for every file heteroplan reads: plan files, profile and network
directories, calibration tables, sweep files, cluster files, workload CSVs, saved scheduling
sessions and checkpoint manifests.

A format is a tree of small frozen *specs* — :class:`Number`, :class:`Text`, :class:`Flag`,
:class:`Seq`, :class:`Pair`, :class:`Table`, :class:`Record`, :class:`Nullable`,
:class:`OneOf`, :class:`Plain`, :class:`Later` and :class:`Versioned` — and :func:`decode` walks a document
(parsed JSON or TOML, or a CSV row) along it. Every value is checked for its type, its range
and its physical sense (finite numbers; non-negative times, sizes and prices; integer counts
within a bound; names of bounded length, printable; bounded list lengths and
nesting), and the first bad one raises :class:`~heteroplan.errors.InputError` naming its path
(``stages[0].replicas[1].count``), its value (long strings and containers shortened) and the
rule. :func:`naming_file` prefixes the file to that path (``plan.json: stages[0].tp``).

What comes out is the same plain data that went in (dicts, lists, ints, floats, strings), so
the typed constructors that follow (``Plan.from_dict``, ``Cluster.from_dict`` ...) build
exactly the objects they built before; they keep the checks that relate fields to each other.

Why not pydantic or msgspec: neither is a dependency of heteroplan (``import heteroplan`` stays
light and CI's fresh environment has neither), the formats are small, the messages must name
heteroplan's own fields, and the specs here are also what the tests' hypothesis strategies read.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from heteroplan.errors import InputError

__all__ = ["Spec", "Number", "Text", "Flag", "Seq", "Pair", "Table", "Record", "Nullable", "OneOf", "Plain",
           "Later", "Versioned", "IntKey", "decode", "check", "naming_file", "shown", "MAX_NAME", "MAX_ITEMS", "MAX_DEPTH"]

MAX_NAME = 256
"""Most characters of a name read from a file (a GPU type, zone, model, job, label)."""

MAX_ITEMS = 100_000
"""Most entries of any list or table in a file (layers, jobs, replicas, rows) unless a format says less."""

MAX_DEPTH = 16
"""Deepest nesting of free-form data (a sweep's policy options)."""


def shown(value: object, limit: int = 80) -> object:
    """``value`` as an error shows it: strings cut to ``limit`` characters (with their length),
    containers whose ``repr`` is long summarised by type and size; small values as they are."""
    if isinstance(value, str):
        return value if len(value) <= limit else f"{value[:limit // 2]}...({len(value):,} characters)"
    if isinstance(value, Mapping | list | tuple):
        try:
            text = repr(value)
        except RecursionError:
            text = ""
        if text and len(text) <= 2 * limit:
            return value
        return f"<{type(value).__name__} of {len(value):,} entries>"
    return value


def _at(path: str, key: str | int) -> str:
    """``path`` extended by a record key (``a.b``) or a list index / table key (``a[3]``)."""
    if isinstance(key, int):
        return f"{path}[{key}]"
    return f"{path}.{key}" if path else key


def _fail(path: str, value: object, reason: str) -> InputError:
    return InputError(path or "document", shown(value), reason)


def _num(x: float) -> str:
    """A bound as messages print it: ``100,000``, ``0.5``, ``1e+15``."""
    return f"{int(x):,}" if float(x).is_integer() and abs(x) < 1e12 else f"{x:g}"


class Spec:
    """A rule for one value of a file; :meth:`decode` returns the value (normalised: ``8.0`` read
    as the integer 8 where an integer is asked for) or raises :class:`InputError` at ``path``."""

    def decode(self, value: object, path: str) -> Any:  # pragma: no cover - abstract
        raise NotImplementedError


@dataclass(frozen=True)
class Number(Spec):
    """A finite number (bools and strings refused) within ``[low, high]``, ``> above`` when given;
    ``integer``: a whole number, returned as ``int``; ``unit`` names the unit in messages (``"s"``);
    ``numeral``: a string holding the number is read too (a CSV cell); ``finite=False``: NaN and
    infinities pass too (a training loss that diverged; bounds still apply to the others)."""

    low: float | None = None
    high: float | None = None
    above: float | None = None
    integer: bool = False
    unit: str = ""
    numeral: bool = False
    finite: bool = True

    def _rule(self) -> str:
        what = "a whole number" if self.integer else "a finite number" if self.finite else "a number"
        parts = []
        if self.above is not None:
            parts.append(f"> {_num(self.above)}")
        elif self.low is not None:
            parts.append(f">= {_num(self.low)}")
        if self.high is not None:
            parts.append(f"at most {_num(self.high)}")
        unit = f" ({self.unit})" if self.unit else ""
        return f"must be {what}" + (f" {' and '.join(parts)}" if parts else "") + unit

    def decode(self, value: object, path: str) -> int | float:
        number = value
        if self.numeral and isinstance(value, str):
            try:
                number = float(value) if len(value) <= 64 else None
            except ValueError:
                number = None
            if number is None:
                raise _fail(path, value, f"not a number: {self._rule()}")
        if isinstance(number, bool) or not isinstance(number, numbers.Real):
            raise _fail(path, value, self._rule())
        try:
            as_float = float(number)
        except OverflowError:  # an integer beyond float range
            raise _fail(path, value, self._rule()) from None
        if not math.isfinite(as_float):
            if self.finite or self.integer:
                raise _fail(path, value, self._rule())
            return as_float
        if self.integer:
            if as_float != int(as_float):
                raise _fail(path, value, self._rule())
            number = int(number)
        if (self.above is not None and not as_float > self.above) or (self.low is not None and as_float < self.low) \
                or (self.high is not None and as_float > self.high):
            raise _fail(path, value, self._rule())
        if self.integer:
            return int(number)
        return number if isinstance(number, int | float) and not isinstance(value, str) else as_float


@dataclass(frozen=True)
class Text(Spec):
    """A string of ``min_len..max_len`` printable characters (no control characters: escape
    sequences would reach a terminal; no bidi overrides), one of ``choices`` when given.
    ``printable=False``: any characters (free text an API took as given, e.g. a saved session's
    job ids and reasons; escaped where printed)."""

    max_len: int = MAX_NAME
    min_len: int = 1
    choices: tuple[str, ...] | None = None
    printable: bool = True

    def decode(self, value: object, path: str) -> str:
        if not isinstance(value, str):
            raise _fail(path, value, "must be a string" if self.choices is None else f"choose one of {list(self.choices)}")
        if self.choices is not None:
            if value not in self.choices:
                raise _fail(path, value, f"choose one of {list(self.choices)}")
            return value
        if not self.min_len <= len(value) <= self.max_len:
            bound = f"{self.min_len} to {self.max_len}" if self.max_len < MAX_ITEMS ** 2 else f"at least {self.min_len}"
            raise _fail(path, value, f"must have {bound} characters, not {len(value):,}")
        if self.printable and not value.isprintable():  # control (escape sequences), format (bidi overrides), unassigned
            raise _fail(path, value, "must be printable text (no control, format or unassigned characters)")
        return value


@dataclass(frozen=True)
class Flag(Spec):
    """``true`` or ``false``."""

    def decode(self, value: object, path: str) -> bool:
        if not isinstance(value, bool):
            raise _fail(path, value, "must be true or false")
        return value


@dataclass(frozen=True)
class IntKey(Spec):
    """A table key holding an integer in ``[low, high]``, written plainly (``"8"``, not ``"08"``
    or ``"8.0"``); decodes to the ``int``."""

    low: int = 0
    high: int = MAX_ITEMS
    unit: str = ""

    def decode(self, value: object, path: str) -> int:
        if not isinstance(value, str) or not (value.isascii() and value.isdigit()) or len(value) > 12 \
                or str(int(value)) != value or not self.low <= int(value) <= self.high:
            unit = f" ({self.unit})" if self.unit else ""
            raise _fail(path, value, f"must be an integer key{unit} from {self.low} to {self.high}")
        return int(value)


@dataclass(frozen=True)
class Seq(Spec):
    """A list of ``min_len..max_len`` items, each decoded by ``item``."""

    item: Spec
    min_len: int = 0
    max_len: int = MAX_ITEMS

    def decode(self, value: object, path: str) -> list[Any]:
        if isinstance(value, str | bytes) or not isinstance(value, Sequence):
            raise _fail(path, value, "must be a list")
        if not self.min_len <= len(value) <= self.max_len:
            raise _fail(path, value, f"must have {self.min_len} to {self.max_len:,} entries, not {len(value):,}")
        return [self.item.decode(v, _at(path, i)) for i, v in enumerate(value)]


@dataclass(frozen=True)
class Pair(Spec):
    """A list of exactly ``len(items)`` values, the ``i``-th decoded by ``items[i]``."""

    items: tuple[Spec, ...]

    def decode(self, value: object, path: str) -> list[Any]:
        if isinstance(value, str | bytes) or not isinstance(value, Sequence) or len(value) != len(self.items):
            raise _fail(path, value, f"must be a list of {len(self.items)} entries")
        return [spec.decode(v, _at(path, i)) for i, (spec, v) in enumerate(zip(self.items, value, strict=True))]


@dataclass(frozen=True)
class Table(Spec):
    """An object of ``min_len..max_len`` entries with free keys (decoded by ``key``: a
    :class:`Text` or an :class:`IntKey`) and values decoded by ``value``."""

    value: Spec
    key: Spec = field(default_factory=Text)
    min_len: int = 0
    max_len: int = MAX_ITEMS

    def decode(self, value: object, path: str) -> dict[Any, Any]:
        if not isinstance(value, Mapping):
            raise _fail(path, value, "must be an object {key: value}")
        if not self.min_len <= len(value) <= self.max_len:
            raise _fail(path, value, f"must have {self.min_len} to {self.max_len:,} entries, not {len(value):,}")
        out: dict[Any, Any] = {}
        for k, v in value.items():
            at = f"{path}[{k}]" if isinstance(k, int) else f"{path}[{shown(k, 40)!r}]" if isinstance(k, str) \
                else f"{path}[?]"
            key = self.key.decode(k, at)
            if key in out:
                raise _fail(at, k, "the same key as an earlier entry")
            out[key] = self.value.decode(v, at)
        return out


@dataclass(frozen=True)
class Record(Spec):
    """An object with the keys of ``required`` (each must be there) and of ``optional`` (absent:
    left out of the result, so the typed constructor's default applies). Other keys are refused
    (a typo is an error, not ignored) unless ``extra``: then they pass through unchecked.
    ``missing`` is the reason an absent required key gives."""

    required: Mapping[str, Spec] = field(default_factory=dict)
    optional: Mapping[str, Spec] = field(default_factory=dict)
    extra: bool = False
    missing: str = "missing"

    def decode(self, value: object, path: str) -> dict[str, Any]:
        if not isinstance(value, Mapping):
            raise _fail(path, value, "must be an object")
        known = {**self.required, **self.optional}
        if not self.extra:
            unknown = [k for k in value if k not in known]
            if unknown:
                key = unknown[0]
                where = _at(path, key) if isinstance(key, str) and len(key) <= MAX_NAME else f"{path}[?]"
                raise _fail(where, value[key], f"unknown key{'' if isinstance(key, str) else f' {shown(key)!r}'}; "
                            f"known: {sorted(known)}")
        for name in self.required:
            if name not in value:
                raise _fail(_at(path, name), None, self.missing)
        out = {k: v for k, v in value.items() if k not in known} if self.extra else {}
        for name, spec in known.items():
            if name in value:
                out[name] = spec.decode(value[name], _at(path, name))
        return out


@dataclass(frozen=True)
class Nullable(Spec):
    """``null`` (``None``) or what ``spec`` accepts."""

    spec: Spec

    def decode(self, value: object, path: str) -> Any:
        return None if value is None else self.spec.decode(value, path)


@dataclass(frozen=True)
class OneOf(Spec):
    """The first of ``specs`` that accepts the value, tried by the kind of value each takes:
    a :class:`Seq`/:class:`Pair` for a list, a :class:`Record`/:class:`Table` for an object,
    the others for scalars; a value no spec takes fails with the last matching spec's error."""

    specs: tuple[Spec, ...]

    def decode(self, value: object, path: str) -> Any:
        error: InputError | None = None
        for spec in self.specs:
            try:
                return spec.decode(value, path)
            except InputError as exc:
                error = exc if error is None or _takes(spec, value) else error
        assert error is not None
        raise error


def _takes(spec: Spec, value: object) -> bool:
    """Whether ``spec`` is meant for values of ``value``'s kind (which error to report)."""
    if isinstance(spec, Seq | Pair):
        return isinstance(value, list | tuple)
    if isinstance(spec, Record | Table):
        return isinstance(value, Mapping)
    return not isinstance(value, list | tuple | Mapping)


@dataclass(frozen=True)
class Plain(Spec):
    """Free-form data (a policy's options): finite numbers, strings of at most ``max_len``
    characters, booleans, lists and tables nested at most ``max_depth`` deep; tables' keys
    become strings and tuples lists (so it hashes and pickles alike everywhere)."""

    max_depth: int = MAX_DEPTH
    max_len: int = 4096

    def decode(self, value: object, path: str, depth: int = 0) -> Any:
        if depth > self.max_depth:
            raise _fail(path, value, f"nested more than {self.max_depth} deep")
        if isinstance(value, bool) or value is None:
            return value
        if isinstance(value, int):
            if abs(value) > 2 ** 63:
                raise _fail(path, value, "integer beyond 64 bits")
            return value
        if isinstance(value, float):
            if not math.isfinite(value):
                raise _fail(path, value, "must be a finite number")
            return value
        if isinstance(value, str):
            return Text(self.max_len, 0).decode(value, path)
        if isinstance(value, list | tuple):
            if len(value) > MAX_ITEMS:
                raise _fail(path, value, f"must have at most {MAX_ITEMS:,} entries")
            return [self.decode(v, _at(path, i), depth + 1) for i, v in enumerate(value)]
        if isinstance(value, Mapping):
            if len(value) > MAX_ITEMS:
                raise _fail(path, value, f"must have at most {MAX_ITEMS:,} entries")
            return {str(k): self.decode(v, _at(path, str(k)), depth + 1) for k, v in value.items()}
        raise _fail(path, value, "must be a number, string, boolean, array or table")


@dataclass(frozen=True)
class Later(Spec):
    """A value decoded after its record, by a spec another field of the record picks (a saved
    job's ``model`` by its ``model_kind``) or by its own type's parser (a policy's saved state):
    passed through as it is here."""

    def decode(self, value: object, path: str) -> Any:
        return value


@dataclass(frozen=True)
class Versioned(Spec):
    """A document whose ``key`` (default ``"format_version"``) picks its spec from ``versions``;
    absent, it is ``default`` (files written before formats had versions). An unknown version is
    refused (a newer heteroplan wrote it). The key stays in the decoded result when present."""

    versions: Mapping[int, Record]
    default: int = 1
    key: str = "format_version"

    def decode(self, value: object, path: str) -> dict[str, Any]:
        if not isinstance(value, Mapping):
            raise _fail(path, value, "must be an object")
        version = value.get(self.key, self.default)
        if isinstance(version, bool) or not isinstance(version, int) or version not in self.versions:
            raise _fail(_at(path, self.key), version, f"unknown format version; this heteroplan reads "
                        f"{sorted(self.versions)} (a newer heteroplan wrote it?)")
        rest = {k: v for k, v in value.items() if k != self.key}
        out = self.versions[version].decode(rest, path)
        return {self.key: version, **out} if self.key in value else out


def decode(spec: Spec, value: object, where: str = "", error: type[InputError] = InputError) -> Any:
    """``value`` decoded by ``spec``; the first bad value raises ``error`` (an :class:`InputError`
    class) naming its path under ``where``, its value and the rule it breaks."""
    try:
        return spec.decode(value, where)
    except InputError as exc:
        if isinstance(exc, error):
            raise
        raise error(exc.field, exc.value, exc.reason) from None
    except RecursionError:  # a spec deeper than the interpreter allows (never the data: specs bound depth)
        raise error(where or "document", shown(value), "nested too deeply") from None


@contextmanager
def naming_file(path: str | Path, what: str = "") -> Iterator[None]:
    """Re-raise an :class:`InputError` from the block with the file ``path`` in front of its field
    (``"plan.json: stages[0].tp"``), keeping its class, value and reason; ``what`` (``"plan"``)
    says what the file is when the field does not. Errors that already name the file pass as they are."""
    name = str(path)
    try:
        yield
    except InputError as exc:
        named = name in str(exc.field) or exc.value == name
        said = not what or what in str(exc.field)
        if (named and said) or type(exc).__init__ is not InputError.__init__:  # a subclass with other arguments
            raise
        where = ("" if named else name) + ("" if said else f" ({what})" if not named else what)
        field_name = f"{where.strip()}: {exc.field}"
        raise type(exc)(field_name, exc.value, exc.reason) from None


def check(condition: bool, path: str, value: object, reason: str) -> None:
    """Raise :class:`InputError` at ``path`` unless ``condition`` (a check between fields)."""
    if not condition:
        raise _fail(path, value, reason)

