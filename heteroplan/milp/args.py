"""Argument checks of the Model API: numbers, shapes, axes and points, each refused with a
:class:`~heteroplan.errors.ModelError` naming the argument and the value (never a raw numpy or
scipy error, never a NaN let through)."""

from __future__ import annotations

import math
import numbers
from collections.abc import Sequence
from typing import Any

import numpy as np
import scipy.sparse as sp

from heteroplan.errors import ModelError

__all__ = ["brief", "numbers_array", "finite_array", "sparse_matrix", "new_shape", "axes", "point", "count"]

Shape = tuple[int, ...]


def brief(value: Any) -> Any:
    """``value`` for an error message: an array or long sequence as its shape and type only."""
    if sp.issparse(value):
        return f"sparse matrix of shape {value.shape}"
    if isinstance(value, np.ndarray) and value.size > 8:
        return f"array of shape {value.shape} ({value.dtype})"
    if isinstance(value, list | tuple) and len(value) > 8:
        return f"{type(value).__name__} of {len(value)} items"
    return value


def numbers_array(field: str, value: Any) -> np.ndarray:
    """``value`` as a float array (``inf`` and NaN kept); :class:`ModelError` naming ``field`` for
    what is not real numbers: text (``"1"`` is not converted), complex numbers, objects, ragged
    lists, integers beyond a float's range."""
    if isinstance(value, np.ndarray) and value.dtype.kind in "biuf":
        return value.astype(float, copy=False)
    if type(value) is float:  # the common case, fast
        return np.asarray(value)
    try:
        raw = np.asarray(value)
        if raw.dtype.kind not in "biufO":
            raise TypeError(raw.dtype)
        return np.asarray(raw, dtype=float)
    except (TypeError, ValueError, OverflowError):
        raise ModelError(field, brief(value), "must be real numbers (a scalar or an array)") from None


def finite_array(field: str, value: Any) -> np.ndarray:
    """:func:`numbers_array`, with every entry finite."""
    arr = numbers_array(field, value)
    if not np.isfinite(arr).all():
        raise ModelError(field, brief(value), "must be finite")
    return arr


def sparse_matrix(field: str, value: Any) -> sp.spmatrix | np.ndarray:
    """A 2-D matrix of finite numbers: a scipy sparse matrix as given (its stored entries checked),
    anything else as a dense float array."""
    if sp.issparse(value):
        if value.dtype.kind not in "biuf":
            raise ModelError(field, brief(value), "must hold real numbers")
        if not np.isfinite(value.data).all():
            raise ModelError(field, brief(value), "must be finite")
        return value
    arr = np.atleast_2d(finite_array(field, value))
    if arr.ndim != 2:
        raise ModelError(field, f"array of shape {arr.shape}", "must be a 2-D matrix")
    return arr


def _integer(value: Any) -> bool:
    return isinstance(value, numbers.Integral) and not isinstance(value, bool | np.bool_)


def new_shape(shape: Sequence[Any], size: int, old: Shape) -> Shape:
    """The shape ``reshape(*shape)`` asks for (integers, at most one ``-1``, as numpy takes them),
    checked against ``size`` elements without allocating an array."""
    if len(shape) == 1 and isinstance(shape[0], Sequence | np.ndarray) and not isinstance(shape[0], str):
        shape = tuple(shape[0])
    if not all(_integer(s) for s in shape):
        raise ModelError("reshape", brief(shape), "dimensions must be integers (one may be -1)")
    dims = tuple(int(s) for s in shape)
    unknown = [i for i, s in enumerate(dims) if s == -1]
    if len(unknown) > 1 or any(s < -1 for s in dims):
        raise ModelError("reshape", dims, "dimensions must be >= 0, and at most one -1")
    known = math.prod(s for s in dims if s != -1)
    if unknown and known and size % known == 0:
        dims = tuple(size // known if s == -1 else s for s in dims)
    if math.prod(dims) != size or (-1 in dims):
        raise ModelError("reshape", dims, f"cannot reshape an expression of shape {old} ({size} elements)")
    return dims


def axes(axis: Any, ndim: int) -> tuple[int, ...]:
    """The sorted axes ``axis`` names (``None``: all); integers in ``[-ndim, ndim)``, no repeats."""
    if axis is None:
        return tuple(range(ndim))
    raw = (axis,) if _integer(axis) else axis
    if isinstance(raw, str) or not isinstance(raw, Sequence) or not all(_integer(a) for a in raw):
        raise ModelError("axis", brief(axis), "must be an integer or a sequence of integers")
    if any(not -ndim <= a < ndim for a in raw):
        raise ModelError("axis", axis, f"out of range for an expression of {ndim} dimensions")
    out = sorted(int(a) % ndim for a in raw)
    if len(set(out)) != len(out):
        raise ModelError("axis", axis, "names an axis twice")
    return tuple(out)


def point(field: str, value: Any, n: int, finite: bool = True) -> np.ndarray:
    """A full variable (or row) vector: ``n`` real numbers, finite unless ``finite=False``."""
    arr = (finite_array if finite else numbers_array)(field, value)
    if arr.shape != (n,):
        raise ModelError(field, f"shape {arr.shape}", f"must be a vector of {n} numbers")
    return arr


def count(field: str, value: Any, most: int) -> int:
    """An integer in ``[0, most]`` (a number of rows)."""
    if not _integer(value) or not 0 <= value <= most:
        raise ModelError(field, value, f"must be an integer between 0 and {most:,}")
    return int(value)
