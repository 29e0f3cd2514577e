"""Step-time measurements and the Sia trace readers that produce them.

A :class:`Measurements` holds observed training steps as parallel numpy arrays:
``num_nodes``, ``num_gpus``, ``local_bsz`` (samples per GPU), ``step_time`` and
``sync_time`` (seconds). Readers:

* :func:`load_placements` -- ``placements-<type>.csv`` (``placement`` digits, one per node).
* :func:`load_scalability` -- ``scalability-<type>.csv`` (``num_nodes``, ``num_replicas``).
* :func:`load_validation` -- ``validation-<bsz>.csv`` gradient statistics.

Files may be gzip-compressed (``.csv.gz``). A file missing a required column raises :class:`~heteroplan.errors.InputError` naming the
file and the column.
"""

from __future__ import annotations

import csv
import gzip
import io
import zlib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from heteroplan.errors import InputError
from heteroplan.schema import Number, decode

__all__ = [
    "Measurements",
    "parse_placement",
    "load_placements",
    "load_scalability",
    "load_validation",
    "ValidationRun",
]


def parse_placement(placement: str | int | Sequence[int]) -> tuple[int, int]:
    """``(num_nodes, num_gpus)`` of a placement: digit string (``"22"``) or per-node counts."""
    if isinstance(placement, int | np.integer) and not isinstance(placement, bool):
        placement = str(int(placement))
    if isinstance(placement, str):
        text = placement.strip()
        if not text.isdigit():
            raise InputError("placement", placement, "must be digits, one GPU count per node")
        counts = [int(c) for c in text]
    else:
        try:
            counts = [int(c) for c in placement]
        except (TypeError, ValueError):
            raise InputError("placement", placement, "must be a sequence of GPU counts") from None
    if not counts or any(c < 1 for c in counts):
        raise InputError("placement", placement, "every node must hold >= 1 GPU")
    return len(counts), sum(counts)


@dataclass(frozen=True)
class Measurements:
    """Observed steps (parallel arrays, one entry per observation).

    Attributes:
        num_nodes: nodes the job spanned.
        num_gpus: GPUs (data-parallel replicas) in total.
        local_bsz: samples per GPU per micro-step.
        step_time: seconds per optimizer step (compute + synchronization).
        sync_time: seconds spent synchronizing gradients.
    """

    num_nodes: np.ndarray
    num_gpus: np.ndarray
    local_bsz: np.ndarray
    step_time: np.ndarray
    sync_time: np.ndarray

    def __post_init__(self) -> None:
        arrays = {}
        for name in ("num_nodes", "num_gpus", "local_bsz", "step_time", "sync_time"):
            try:
                arr = np.atleast_1d(np.asarray(getattr(self, name), dtype=float))
            except (TypeError, ValueError):  # strings, None, ragged lists: numpy's errors
                raise InputError(name, getattr(self, name), "must be numbers (one per observation)") from None
            if arr.ndim != 1:
                raise InputError(name, arr.shape, "must be one-dimensional")
            arrays[name] = arr
        n = len(arrays["num_nodes"])
        for name, arr in arrays.items():
            if len(arr) != n:
                raise InputError(name, len(arr), f"length must equal num_nodes length {n}")
            if not np.all(np.isfinite(arr)):
                raise InputError(name, arr[~np.isfinite(arr)][0], "must be finite")
        _check_min("num_nodes", arrays["num_nodes"], 1)
        _check_min("num_gpus", arrays["num_gpus"], 1)
        _check_min("local_bsz", arrays["local_bsz"], 1)
        bad = arrays["num_gpus"] < arrays["num_nodes"]
        if np.any(bad):
            raise InputError("num_gpus", arrays["num_gpus"][bad][0], "must be >= num_nodes")
        if np.any(arrays["step_time"] <= 0):
            raise InputError("step_time", arrays["step_time"].min(), "must be > 0")
        if np.any(arrays["sync_time"] < 0):
            raise InputError("sync_time", arrays["sync_time"].min(), "must be >= 0")
        for name, arr in arrays.items():
            arr.setflags(write=False)
            object.__setattr__(self, name, arr)

    def __len__(self) -> int:
        return len(self.num_nodes)

    @classmethod
    def empty(cls) -> Measurements:
        """No observations (one shared instance: its arrays are read-only)."""
        return _EMPTY

    @classmethod
    def _trusted(cls, *arrays: np.ndarray) -> Measurements:
        """Measurements from float arrays already checked (slices and concatenations of checked
        ones): the same object :meth:`__init__` makes, without re-checking every value."""
        out = object.__new__(cls)
        for name, arr in zip(_COLUMNS, arrays, strict=True):
            arr.setflags(write=False)
            object.__setattr__(out, name, arr)
        return out

    @classmethod
    def from_placements(
        cls,
        placements: Iterable[str | Sequence[int]],
        local_bsz: Iterable[float],
        step_time: Iterable[float],
        sync_time: Iterable[float],
    ) -> Measurements:
        """Build from placement strings/tuples and per-row measurements."""
        parsed = [parse_placement(p) for p in placements]
        nodes = [p[0] for p in parsed]
        gpus = [p[1] for p in parsed]
        return cls(
            np.array(nodes, dtype=float), np.array(gpus, dtype=float),
            np.asarray(list(local_bsz), dtype=float), np.asarray(list(step_time), dtype=float),
            np.asarray(list(sync_time), dtype=float),
        )

    def select(self, mask: np.ndarray) -> Measurements:
        """The observations where ``mask`` (bool array or index array) selects."""
        mask = np.asarray(mask)
        if mask.dtype == bool and mask.shape != self.num_nodes.shape:  # numpy's own error, named
            raise InputError("mask", mask.shape, f"must have one entry per observation ({len(self)})")
        return Measurements._trusted(*(np.atleast_1d(getattr(self, f)[mask]) for f in _COLUMNS))

    def concat(self, other: Measurements) -> Measurements:
        """These observations followed by ``other``'s."""
        if not isinstance(other, Measurements):
            raise InputError("other", type(other).__name__, "must be a Measurements")
        return Measurements._trusted(*(np.concatenate([getattr(self, f), getattr(other, f)]) for f in _COLUMNS))

    @property
    def single_gpu(self) -> np.ndarray:
        """Mask of one-GPU observations."""
        return self.num_gpus == 1


_COLUMNS = ("num_nodes", "num_gpus", "local_bsz", "step_time", "sync_time")


def _check_min(name: str, arr: np.ndarray, minimum: float) -> None:
    if np.any(arr < minimum):
        raise InputError(name, arr[arr < minimum][0], f"must be >= {minimum}")


_EMPTY = Measurements(*(np.empty(0) for _ in _COLUMNS))


def _read_columns(path: str | Path, required: Sequence[str]) -> dict[str, list[str]]:
    path = Path(path)
    if not path.is_file():
        raise InputError("path", str(path), "no such file")
    try:
        data = path.read_bytes()
        if path.suffix == ".gz":
            data = gzip.decompress(data)
    except (OSError, EOFError, zlib.error) as exc:  # gzip.BadGzipFile is an OSError: a .gz that is not gzip
        raise InputError("path", str(path), f"cannot read: {exc}") from None
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise InputError("path", str(path), f"not UTF-8 text (byte {exc.start})") from None
    try:
        reader = csv.DictReader(io.StringIO(text, newline=""))
        header = [h.strip() for h in (reader.fieldnames or [])]
        for col in required:
            if col not in header:
                raise InputError(f"{path.name}: column", col, f"missing (header: {header})")
        rows = list(reader)
    except csv.Error as exc:
        raise InputError("path", str(path), f"not a CSV file: {exc}") from None
    cols: dict[str, list[str]] = {c: [] for c in required}
    for row in rows:
        row = {k.strip(): v for k, v in row.items() if k is not None}
        for c in required:
            cols[c].append(row[c])
    return cols


_SECONDS = Number(low=0, high=86_400.0, unit="seconds", numeral=True)
_COUNT = Number(low=1, high=1_000_000, integer=True, numeral=True)
CELLS = {"local_bsz": Number(low=1, high=1e8, unit="samples per GPU", numeral=True),
         "step_time": Number(above=0, high=86_400.0, unit="seconds", numeral=True), "sync_time": _SECONDS,
         "num_nodes": _COUNT, "num_replicas": _COUNT, "progress": Number(low=0, numeral=True),
         "grad_sqr": Number(numeral=True), "grad_var": Number(numeral=True)}
"""Each numeric column of a measurement CSV: its cells finite, within physical bounds (heteroplan.schema)."""


def _floats(path: str | Path, cols: dict[str, list[str]], name: str) -> np.ndarray:
    """Column ``name`` as floats, each cell decoded by its spec in :data:`CELLS` (errors name the
    file, the row (1 = first data row) and the column)."""
    spec, file = CELLS[name], Path(path).name
    return np.array([float(decode(spec, v, f"{file}: row {i}.{name}")) for i, v in enumerate(cols[name], start=1)],
                    dtype=float)


def load_placements(path: str | Path) -> Measurements:
    """Read a ``placements-<type>.csv`` (columns placement, local_bsz, step_time, sync_time)."""
    cols = _read_columns(path, ("placement", "local_bsz", "step_time", "sync_time"))
    try:
        return Measurements.from_placements(
            cols["placement"], _floats(path, cols, "local_bsz"),
            _floats(path, cols, "step_time"), _floats(path, cols, "sync_time"),
        )
    except InputError as exc:
        raise InputError(f"{Path(path).name}: {exc.field}", exc.value, exc.reason) from None


def load_scalability(path: str | Path) -> Measurements:
    """Read a ``scalability-<type>.csv`` (num_nodes, num_replicas, local_bsz, step/sync time)."""
    names = ("num_nodes", "num_replicas", "local_bsz", "step_time", "sync_time")
    cols = _read_columns(path, names)
    arrays = [_floats(path, cols, n) for n in names]
    try:
        return Measurements(*arrays)
    except InputError as exc:
        raise InputError(f"{Path(path).name}: {exc.field}", exc.value, exc.reason) from None


@dataclass(frozen=True)
class ValidationRun:
    """Gradient statistics of one training run at a fixed batch size.

    Attributes:
        batch_size: total batch size of the run (samples).
        progress: statistical progress at each row, in M0-sized steps.
        grad_sqr: squared norm of the true gradient (estimate).
        grad_var: gradient variance (trace), normalized to batch size M0.
    """

    batch_size: int
    progress: np.ndarray
    grad_sqr: np.ndarray
    grad_var: np.ndarray


def load_validation(path: str | Path, batch_size: int | None = None) -> ValidationRun:
    """Read a ``validation-<bsz>.csv``; the batch size comes from the name unless given."""
    path = Path(path)
    if batch_size is None:
        stem = path.name.split(".")[0].rsplit("-", 1)[-1]
        if not stem.isdigit():
            raise InputError("path", str(path), "name must end in -<batch size>.csv")
        batch_size = int(stem)
    cols = _read_columns(path, ("progress", "grad_sqr", "grad_var"))
    return ValidationRun(
        int(batch_size), _floats(path, cols, "progress"), _floats(path, cols, "grad_sqr"),
        _floats(path, cols, "grad_var"),
    )
