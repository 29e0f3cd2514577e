"""A solver-neutral MILP/LP model built with numpy arrays.

A :class:`Model` holds variable blocks (n-dimensional arrays of variables with bounds and
integrality), constraint blocks (sparse rows with lower/upper bounds) and a linear
objective. Expressions (:class:`LinExpr`) are n-dimensional arrays of affine functions
stored as one sparse matrix (one row per element), so every operation — sums along axes,
elementwise products, indexing, matrix products — is a sparse-matrix operation and never a
Python loop per variable or per row.

Example::

    m = Model("assign")
    x = m.add_variables("x", (J, C), ub=1, integer=True)
    m.add_constraints(x.sum(axis=1) <= 1, name="one_config")
    m.add_constraints(gpus_per_type @ x.sum(axis=0) <= capacity, name="capacity")
    m.maximize((x * value).sum())
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import scipy.sparse as sp

from heteroplan.errors import ModelError
from heteroplan.milp import args

__all__ = ["Model", "LinExpr", "VarBlock", "Constraint", "ConstraintBlock", "StandardForm", "as_model"]

Shape = tuple[int, ...]


def _as_shape(shape: int | Sequence[int], field: str) -> Shape:
    if isinstance(shape, int | np.integer):
        shape = (int(shape),)
    if isinstance(shape, str | bytes) or not all(isinstance(s, int | float | np.number) for s in _items(shape)):
        raise ModelError(field, args.brief(shape), "must be an int or a sequence of ints")
    try:
        out = tuple(int(s) for s in shape)
    except (TypeError, ValueError, OverflowError):
        raise ModelError(field, args.brief(shape), "must be an int or a sequence of ints") from None
    if any(s < 0 for s in out) or any(int(s) != s for s in shape):
        raise ModelError(field, shape, "dimensions must be non-negative integers")
    if math.prod(out) > MAX_BLOCK_SIZE:  # before numpy tries to allocate terabytes
        raise ModelError(field, shape, f"{math.prod(out):,} entries; at most {MAX_BLOCK_SIZE:,} (HiGHS indexes "
                         "columns and rows with 32-bit integers)")
    return out


MAX_BLOCK_SIZE = 2**31 - 1


def _items(value: Any) -> Sequence[Any]:
    """The items of a sequence given as a shape (none when it is not one)."""
    return value if isinstance(value, Sequence | np.ndarray) else ()


def _size(shape: Shape) -> int:
    return math.prod(shape)


def _constant(value: float, n: int, dtype: type = np.float64) -> np.ndarray:
    """A read-only length-``n`` view of one ``value`` (stride 0): costs no memory per element
    and, unlike ``np.broadcast_to``, next to nothing to make."""
    out = np.ndarray((n,), dtype, np.array([value], dtype=dtype), 0, (0,))
    out.flags.writeable = False
    return out


def _broadcast_rows(shape: Shape, out_shape: Shape) -> np.ndarray:
    """Row index in an array of ``shape`` feeding each element of ``out_shape``."""
    return np.broadcast_to(np.arange(_size(shape)).reshape(shape), out_shape).ravel()


class LinExpr:
    """An n-dimensional array of affine expressions.

    Stored as unordered COO terms: term ``t`` adds ``vals[t] * x[cols[t]]`` to element
    ``rows[t]`` (C-order flat index); ``const`` holds the constant of each element.
    Every operation is a handful of numpy array operations on the terms, so building a
    model costs about as much as writing its arrays by hand.
    """

    __array_ufunc__ = None  # make numpy defer to our reflected operators
    __hash__ = None  # type: ignore[assignment]  # == builds a constraint

    def __init__(
        self,
        model: Model,
        rows: np.ndarray,
        cols: np.ndarray,
        vals: np.ndarray,
        const: np.ndarray,
        shape: Shape,
        unique: int = 0,
        dense: bool = False,
    ) -> None:
        #: 2: every variable appears at most once in the whole expression; 1: at most once per
        #: element; 0: unknown. Lets assembly skip the duplicate-summing sort.
        self.unique = unique
        #: True when ``rows`` is ``arange(size)``: one term per element, in element order
        #: (a variable block and its scalings). Lets sums skip a gather.
        self.dense = dense
        self.model = model
        self.rows = rows
        self.cols = cols
        self.vals = vals
        self.const = const
        self.shape = shape

    # ---------------------------------------------------------------- basics
    @property
    def size(self) -> int:
        return _size(self.shape)

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def nnz(self) -> int:
        return len(self.vals)

    @property
    def coef(self) -> sp.csr_matrix:
        """The terms as a CSR matrix (one row per element, one column per model variable)."""
        return sp.csr_matrix((self.vals, (self.rows, self.cols)), shape=(self.size, self.model.num_vars))

    def __repr__(self) -> str:
        return f"LinExpr(shape={self.shape}, nnz={self.nnz})"

    def _with_terms(self, vals: np.ndarray, const: np.ndarray, shape: Shape | None = None) -> LinExpr:
        """Same rows and columns (and so the same flags), new coefficients and constants."""
        shape = self.shape if shape is None else shape
        return LinExpr(self.model, self.rows, self.cols, vals, const, shape, self.unique, self.dense)

    def _coerce(self, other: Any) -> LinExpr | np.ndarray:
        if isinstance(other, LinExpr):
            if other.model is not self.model:
                raise ModelError("expression", other, "belongs to another Model")
            return other
        return args.finite_array("constant", other)

    def _select(self, src: np.ndarray, shape: Shape) -> LinExpr:
        """New expression whose element ``r`` is this expression's element ``src[r]``."""
        src = np.asarray(src, dtype=np.int64).ravel()
        if src.size == self.size and np.array_equal(src, np.arange(self.size)):
            return self._with_terms(self.vals, self.const, shape)
        order = np.argsort(src, kind="stable")
        counts = np.bincount(src, minlength=self.size)
        starts = np.cumsum(counts) - counts
        rep = counts[self.rows]
        term = np.repeat(np.arange(self.nnz), rep)
        within = np.arange(term.size) - np.repeat(np.cumsum(rep) - rep, rep)
        new_rows = order[starts[self.rows[term]] + within]
        repeats = bool(counts.max(initial=0) > 1)
        unique = min(self.unique, 1) if repeats else self.unique
        return LinExpr(self.model, new_rows, self.cols[term], self.vals[term], self.const[src], shape, unique)

    def broadcast_to(self, shape: Shape) -> LinExpr:
        """This expression repeated to ``shape`` (numpy broadcasting rules)."""
        shape = _as_shape(shape, "shape")
        if shape == self.shape:
            return self
        try:
            src = _broadcast_rows(self.shape, shape)
        except ValueError:
            raise ModelError("shape", shape, f"cannot broadcast expression of shape {self.shape}") from None
        return self._select(src, shape)

    def _out_shape(self, other_shape: Shape) -> Shape:
        try:
            return tuple(np.broadcast_shapes(self.shape, other_shape))
        except ValueError:
            raise ModelError("shape", other_shape, f"does not broadcast with expression shape {self.shape}") from None

    # ------------------------------------------------------------ arithmetic
    def __add__(self, other: Any) -> LinExpr:
        other = self._coerce(other)
        if isinstance(other, LinExpr):
            out = self._out_shape(other.shape)
            a, b = self.broadcast_to(out), other.broadcast_to(out)
            separate = not a.nnz or not b.nnz or a.cols.max() < b.cols.min() or b.cols.max() < a.cols.min()
            return LinExpr(
                self.model,
                np.concatenate([a.rows, b.rows]),
                np.concatenate([a.cols, b.cols]),
                np.concatenate([a.vals, b.vals]),
                a.const + b.const,
                out,
                min(a.unique, b.unique) if separate else 0,
            )
        out = self._out_shape(other.shape)
        a = self.broadcast_to(out)
        return a._with_terms(a.vals, a.const + np.broadcast_to(other, out).ravel())

    __radd__ = __add__

    def __neg__(self) -> LinExpr:
        return self._with_terms(-self.vals, -self.const)

    def __sub__(self, other: Any) -> LinExpr:
        return self + (-other if isinstance(other, LinExpr) else -self._coerce(other))

    def __rsub__(self, other: Any) -> LinExpr:
        return (-self) + other

    def __mul__(self, other: Any) -> LinExpr:
        other = self._coerce(other)
        if isinstance(other, LinExpr):
            raise ModelError("product", "expr * expr", "the product of two expressions is not linear")
        out = self._out_shape(other.shape)
        a = self.broadcast_to(out)
        zero_const = _is_zero_view(a.const)  # stays a free view: 0 * anything finite is 0
        if other.ndim == 0:
            return a._with_terms(a.vals * float(other), a.const if zero_const else a.const * float(other))
        scale = np.broadcast_to(other, out).ravel()
        const = a.const if zero_const else a.const * scale
        return a._with_terms(a.vals * (scale if a.dense else scale[a.rows]), const)

    __rmul__ = __mul__

    def __truediv__(self, other: Any) -> LinExpr:
        arr = self._coerce(other)
        if isinstance(arr, LinExpr) or np.any(arr == 0):
            raise ModelError("divisor", other, "must be a non-zero constant")
        return self * (1.0 / arr)

    def __rmatmul__(self, matrix: Any) -> LinExpr:
        """``A @ expr`` for a 1-D expression of length n and an (m, n) dense or sparse A."""
        if self.ndim != 1:
            raise ModelError("expression.shape", self.shape, "A @ expr needs a 1-D expression")
        A = args.sparse_matrix("matrix", matrix)
        if A.ndim != 2 or A.shape[1] != self.shape[0]:
            raise ModelError("matrix.shape", A.shape, f"needs {self.shape[0]} columns")
        if not sp.issparse(A):
            nonzero = A != 0
            per_column = nonzero.sum(axis=0)
            if per_column.max(initial=0) <= 1 and A.shape[0]:  # no scipy needed: find each column's non-zero
                out_row = nonzero.argmax(axis=0)
                return self._rmatmul_one_per_column(A, out_row, A[out_row, np.arange(A.shape[1])], per_column)
        # Term t (element r_t) becomes one term per non-zero A[i, r_t]: walk A's columns.
        if not sp.issparse(A):
            A = sp.csc_matrix(A)
        elif A.format != "csc":
            A = A.tocsc()  # a copy; a CSC matrix given is only read
        if not np.all(A.data):
            A = A.copy()
            A.eliminate_zeros()
        per_column = np.diff(A.indptr)
        if per_column.max(initial=0) <= 1:
            # Columns without a non-zero are never looked up; the clip keeps the gather in range.
            first = np.minimum(A.indptr[:-1], max(A.nnz - 1, 0))
            out_row = np.append(A.indices, 0)[first]
            return self._rmatmul_one_per_column(A, out_row, np.append(A.data, 0.0)[first], per_column)
        rep = per_column[self.rows]
        term = np.repeat(np.arange(self.nnz), rep)
        within = np.arange(term.size) - np.repeat(np.cumsum(rep) - rep, rep)
        pos = A.indptr[self.rows[term]] + within
        return LinExpr(
            self.model,
            A.indices[pos].astype(np.int64),
            self.cols[term],
            self.vals[term] * A.data[pos],
            A @ self.const,
            (A.shape[0],),
            1 if self.unique == 2 else 0,
        )

    def scatter(self, out_row: Any, coef: Any, num_rows: int) -> LinExpr:
        """``A @ expr`` for the ``(num_rows, n)`` matrix ``A`` with one non-zero per column,
        ``coef[i]`` in row ``out_row[i]`` of column ``i`` (``expr`` 1-D of length n), without
        building ``A``: e.g. ``x.scatter(job_of, gpus, num_jobs)`` sums each job's terms."""
        if self.ndim != 1:
            raise ModelError("expression.shape", self.shape, "scatter needs a 1-D expression")
        num_rows = args.count("scatter.num_rows", num_rows, MAX_BLOCK_SIZE)
        out_row = np.asarray(out_row)
        if out_row.dtype.kind not in "iu":
            raise ModelError("scatter.out_row", args.brief(out_row), "must be integer row indices")
        coef = args.finite_array("scatter.coef", coef)
        if out_row.shape != self.shape or coef.shape != self.shape:
            raise ModelError("scatter.shape", (out_row.shape, coef.shape), f"need {self.shape} rows and coefficients")
        if out_row.size and (out_row.min() < 0 or out_row.max() >= num_rows):
            raise ModelError("scatter.out_row", int(out_row.min() if out_row.min() < 0 else out_row.max()),
                             f"rows are 0..{num_rows - 1}")
        if not _is_zero_view(self.const):  # constants to carry: the matrix after all
            A = sp.csc_matrix((coef, out_row, np.arange(len(coef) + 1)), shape=(num_rows, len(coef)))
            return A @ self
        return self._rmatmul_one_per_column(_Rows(num_rows), out_row, coef.copy(), (coef != 0).astype(np.int64))

    def _rmatmul_one_per_column(
        self, A: Any, out_row: np.ndarray, coef: np.ndarray, per_column: np.ndarray
    ) -> LinExpr:
        """``A @ expr`` when every column of ``A`` has at most one non-zero, in row
        ``out_row[i]`` with value ``coef[i]`` for column ``i``: each term maps to at most one
        output term, so no repeat is needed and uniqueness is kept."""
        rows, cols, vals = self.rows, self.cols, self.vals
        if not per_column.all():
            keep = per_column[rows].astype(bool)
            rows, cols, vals = rows[keep], cols[keep], vals[keep]
        coef = coef[rows]
        coef *= vals
        return LinExpr(
            self.model,
            out_row.astype(np.int64)[rows],
            cols,
            coef,
            _constant(0.0, A.shape[0]) if _is_zero_view(self.const) else A @ self.const,
            (A.shape[0],),
            2 if self.unique == 2 else 0,  # several elements may land in one row
        )

    def __matmul__(self, vector: Any) -> LinExpr:
        """``expr @ v``: contract the last axis with a 1-D constant vector."""
        v = self._coerce(vector)
        if isinstance(v, LinExpr) or v.ndim != 1 or not self.shape or v.shape[0] != self.shape[-1]:
            raise ModelError("vector", getattr(v, "shape", v), f"needs a 1-D constant of length {self.shape[-1:]}")
        return (self * v).sum(axis=-1)

    def __getitem__(self, key: Any) -> LinExpr:
        try:
            src = np.arange(self.size).reshape(self.shape)[key]
        except IndexError as exc:
            raise ModelError("index", key, str(exc)) from None
        src = np.asarray(src)
        return self._select(src, src.shape)

    def reshape(self, *shape: Any) -> LinExpr:
        """The same elements in C order in ``shape`` (integers, one of them may be -1)."""
        new = args.new_shape(shape, self.size, self.shape)
        return self._with_terms(self.vals, self.const, new)

    def ravel(self) -> LinExpr:
        return self.reshape(-1)

    def sum(self, axis: int | Sequence[int] | None = None) -> LinExpr:
        """Sum over ``axis`` (all axes when None, giving a scalar expression)."""
        axes = args.axes(axis, self.ndim)
        out_shape = tuple(s for i, s in enumerate(self.shape) if i not in axes)
        out_size = _size(out_shape)
        if _is_zero_view(self.const):
            const = _constant(0.0, out_size)
        else:
            const = self.const.reshape(self.shape).sum(axis=axes).ravel()
        if out_size == 1:
            target_rows = _constant(0, self.nnz, np.int64)
        else:
            # Output element of every input element: write the kept axes' index, broadcast
            # over the summed ones, straight into one array.
            target = np.empty(self.shape, dtype=np.int64)
            keep = tuple(1 if i in axes else s for i, s in enumerate(self.shape))
            target[...] = np.arange(out_size).reshape(keep)
            target = target.reshape(-1)
            target_rows = target if self.dense else target[self.rows]
        unique = 2 if self.unique == 2 else 0
        return LinExpr(self.model, target_rows, self.cols, self.vals, const, out_shape, unique)

    # ----------------------------------------------------------- constraints
    def _constraint(self, other: Any, lower: bool, upper: bool) -> Constraint:
        other = self._coerce(other)
        if isinstance(other, LinExpr):
            diff = self - other
            rhs = -diff.const
        elif other.ndim == 0:
            diff = self
            rhs = float(other) - diff.const
        else:
            diff = self.broadcast_to(self._out_shape(other.shape))
            rhs = np.broadcast_to(other, diff.shape).ravel() - diff.const
        inf = np.full(diff.size, np.inf)
        lb = rhs if lower else -inf
        ub = rhs if upper else inf
        return Constraint(diff._with_terms(diff.vals, np.zeros(diff.size)), lb, ub)

    def __le__(self, other: Any) -> Constraint:
        return self._constraint(other, lower=False, upper=True)

    def __ge__(self, other: Any) -> Constraint:
        return self._constraint(other, lower=True, upper=False)

    def __eq__(self, other: Any) -> Constraint:  # type: ignore[override]
        return self._constraint(other, lower=True, upper=True)

    # -------------------------------------------------------------- evaluate
    def value(self, x: np.ndarray) -> np.ndarray:
        """Evaluate at the full variable vector ``x`` (length ``model.num_vars``)."""
        x = args.point("x", x, self.model.num_vars)
        out = np.bincount(self.rows, weights=self.vals * x[self.cols], minlength=self.size)
        return (out + self.const).reshape(self.shape)


@dataclass(frozen=True)
class _Rows:
    """The shape of a matrix that :meth:`LinExpr.scatter` does not build (its constants are 0)."""

    num_rows: int

    @property
    def shape(self) -> tuple[int]:
        return (self.num_rows,)


def _csc(
    rows: np.ndarray, cols: np.ndarray, vals: np.ndarray, shape: tuple[int, int], unique: bool
) -> sp.csc_matrix:
    """CSC matrix from COO terms (a counting sort by column inside scipy).

    Duplicates are summed (a sort) only when the expressions could not vouch for ``unique``
    terms; row indices within a column may stay unsorted, which HiGHS accepts.
    """
    coo = sp.coo_matrix((vals, (rows, cols)), shape=shape)
    if unique:
        coo.has_canonical_format = True
    return coo.tocsc()


def _is_zero_view(arr: np.ndarray) -> bool:
    """True for a read-only broadcast view of one 0.0 (a variable block's constants)."""
    return arr.ndim == 1 and arr.size > 0 and arr.strides == (0,) and arr[0] == 0.0


def _covers_all(expr: LinExpr) -> bool:
    """True when the expression's terms are exactly variables ``0..n-1`` in order.

    Sums, scalings and one-non-zero products keep a variable block's column array itself,
    so in a one-block model an identity test answers without reading the terms."""
    model = expr.model
    if expr.nnz != model.num_vars:
        return False
    if len(model.variables) == 1 and expr.cols is next(iter(model.variables.values())).cols:
        return True
    return bool(np.array_equal(expr.cols, np.arange(model.num_vars)))


def _csc_from_blocks(blocks: Sequence[ConstraintBlock], shape: tuple[int, int]) -> sp.csc_matrix:
    """Stack the blocks' terms into one CSC matrix (int32 indices, as HiGHS takes them).

    When every block holds each variable at most once (``unique == 2``, as sums and
    one-non-zero-per-column products of variable blocks do), the terms are scattered
    straight into their column slots — block by block, in order — with no sort; when every
    block's columns are exactly ``0..n-1`` in order (each touches every variable once, as in
    an assignment model) the slots are strided slices. Otherwise scipy's COO -> CSC
    conversion sums duplicates.
    """
    num_rows, n = shape
    if not all(b.expr.unique == 2 for b in blocks) or n >= 2**31 or num_rows >= 2**31:
        rows = np.concatenate([b.expr.rows + b.offset for b in blocks])
        cols = np.concatenate([b.expr.cols for b in blocks])
        vals = np.concatenate([b.expr.vals for b in blocks])
        A = _csc(rows, cols, vals, shape, all(b.expr.unique for b in blocks))
    else:
        covers = [_covers_all(b.expr) for b in blocks]
        if all(covers):
            # k terms in every column, block i's in slot i: strided writes, no index arrays.
            k = len(blocks)
            indptr = np.arange(0, k * n + 1, k, dtype=np.int32)
            indices = np.empty(k * n, dtype=np.int32)
            data = np.empty(k * n)
            for i, b in enumerate(blocks):
                np.add(b.expr.rows, b.offset, out=indices[i::k], casting="unsafe")
                data[i::k] = b.expr.vals
        else:
            counts = np.full(n, sum(covers), dtype=np.int32)
            for b, cover in zip(blocks, covers, strict=True):
                if not cover:
                    counts += np.bincount(b.expr.cols, minlength=n).astype(np.int32)
            indptr = np.zeros(n + 1, dtype=np.int32)
            np.cumsum(counts, out=indptr[1:])
            indices = np.empty(int(indptr[-1]), dtype=np.int32)
            data = np.empty(int(indptr[-1]))
            fill = indptr[:-1].copy()
            for b, cover in zip(blocks, covers, strict=True):
                slot = fill if cover else fill[b.expr.cols]
                indices[slot] = b.expr.rows + b.offset
                data[slot] = b.expr.vals
                if cover:
                    fill += 1
                else:
                    fill[b.expr.cols] += 1
        A = sp.csc_matrix((data, indices, indptr), shape=shape)
    if A.nnz and not np.all(A.data):
        A.eliminate_zeros()
    return A


class VarBlock(LinExpr):
    """A named n-dimensional block of variables; usable as an expression."""

    def __init__(
        self, model: Model, name: str, offset: int, shape: Shape, lb: np.ndarray, ub: np.ndarray, integer: bool
    ) -> None:
        size = _size(shape)
        idx = np.arange(size)
        # Coefficients 1 and constants 0 as read-only broadcast views: expressions never write
        # their terms in place, and fresh arrays are what building a model mostly pays for.
        ones, zeros = _constant(1.0, size), _constant(0.0, size)
        cols = idx if offset == 0 else offset + idx  # never written in place, so shareable
        super().__init__(model, idx, cols, ones, zeros, shape, unique=2, dense=True)
        self.name = name
        self.offset = offset
        self.lb = lb
        self.ub = ub
        self.integer = integer

    def __repr__(self) -> str:
        kind = "integer" if self.integer else "continuous"
        return f"VarBlock({self.name!r}, shape={self.shape}, {kind})"

    @property
    def slice(self) -> slice:
        """Columns of this block in the model's variable vector."""
        return slice(self.offset, self.offset + self.size)


@dataclass
class Constraint:
    """``lb <= expr <= ub`` elementwise (an unnamed constraint block)."""

    expr: LinExpr
    lb: np.ndarray
    ub: np.ndarray

    def __bool__(self) -> bool:
        raise TypeError("a Constraint has no truth value; pass it to Model.add_constraints")


@dataclass
class ConstraintBlock:
    """A named block of rows in the model."""

    name: str
    offset: int
    shape: Shape
    expr: LinExpr
    lb: np.ndarray
    ub: np.ndarray

    @property
    def size(self) -> int:
        return _size(self.shape)

    @property
    def slice(self) -> slice:
        return slice(self.offset, self.offset + self.size)


@dataclass
class StandardForm:
    """The model as arrays: ``min/max c@x + offset`` s.t. ``row_lb <= A x <= row_ub``, bounds, integrality."""

    c: np.ndarray
    offset: float
    A: sp.csc_matrix
    row_lb: np.ndarray
    row_ub: np.ndarray
    col_lb: np.ndarray
    col_ub: np.ndarray
    integrality: np.ndarray
    maximize: bool

    @property
    def num_vars(self) -> int:
        return len(self.c)

    @property
    def num_rows(self) -> int:
        return self.A.shape[0]

    @property
    def is_mip(self) -> bool:
        return bool(self.integrality.any())


class Model:
    """A linear or mixed-integer program built from variable and constraint blocks."""

    def __init__(self, name: str = "model") -> None:
        if not isinstance(name, str):
            raise ModelError("name", name, "a model's name must be a string")
        self.name = name
        self.variables: dict[str, VarBlock] = {}
        self.constraints: dict[str, ConstraintBlock] = {}
        self.num_vars = 0
        self.num_rows = 0
        self._objective: LinExpr | None = None
        self.maximize_objective = False

    def __repr__(self) -> str:
        kind = "MILP" if any(v.integer for v in self.variables.values()) else "LP"
        return (
            f"Model({self.name!r}, {kind}, {self.num_vars} variables in {len(self.variables)} blocks, "
            f"{self.num_rows} rows in {len(self.constraints)} blocks)"
        )

    # ------------------------------------------------------------- variables
    def add_variables(
        self,
        name: str,
        shape: int | Sequence[int] = (),
        lb: Any = 0.0,
        ub: Any = np.inf,
        integer: bool = False,
    ) -> VarBlock:
        """Add a block of variables.

        Args:
            name: unique block name.
            shape: block shape (``()`` for a single variable).
            lb: lower bounds, a scalar or an array broadcastable to ``shape`` (``-inf`` allowed).
            ub: upper bounds, likewise (``inf`` allowed).
            integer: integrality of the whole block.
        """
        if not isinstance(name, str) or not name:
            raise ModelError("variables.name", name, "must be a non-empty string")
        if name in self.variables:
            raise ModelError("variables.name", name, "a variable block with this name exists")
        shape = _as_shape(shape, f"variables[{name}].shape")
        if not isinstance(integer, bool | np.bool_):  # integer="no" is truthy: an integer block
            raise ModelError(f"variables[{name}].integer", integer, "must be True or False")
        given = []
        for field, value in (("lb", lb), ("ub", ub)):
            arr = args.numbers_array(f"variables[{name}].{field}", value)
            if np.any(arr == (np.inf if field == "lb" else -np.inf)):
                raise ModelError(f"variables[{name}].{field}", value,
                                 "a lower bound of +inf or an upper bound of -inf leaves no value")
            if arr.ndim and arr.shape != shape:
                try:
                    fits = np.broadcast_shapes(arr.shape, shape) == shape
                except ValueError:
                    fits = False
                if not fits:
                    raise ModelError(f"variables[{name}].{field}", arr.shape, f"does not broadcast to {shape}")
            if np.isnan(arr).any():
                raise ModelError(f"variables[{name}].{field}", value, "contains NaN")
            given.append(arr)
        # Checked on the arrays as given (a scalar bound costs nothing per variable).
        crossed = given[0] > given[1]
        if crossed.any():
            first = int(np.flatnonzero(np.broadcast_to(crossed, shape).ravel())[0])
            i = [int(k) for k in np.unravel_index(first, shape)] if shape else []
            pair = (np.broadcast_to(given[0], shape).ravel()[first], np.broadcast_to(given[1], shape).ravel()[first])
            raise ModelError(f"variables[{name}]{i}", pair, "lb > ub")
        lb_arr, ub_arr = (_flat_bounds(arr, shape) for arr in given)
        block = VarBlock(self, name, self.num_vars, shape, lb_arr, ub_arr, bool(integer))
        self.variables[name] = block
        self.num_vars += block.size
        return block

    def binary(self, name: str, shape: int | Sequence[int] = ()) -> VarBlock:
        """A block of 0/1 variables."""
        return self.add_variables(name, shape, 0.0, 1.0, integer=True)

    def continuous(self, name: str, shape: int | Sequence[int] = (), lb: Any = 0.0, ub: Any = np.inf) -> VarBlock:
        """A block of continuous variables."""
        return self.add_variables(name, shape, lb, ub, integer=False)

    # ----------------------------------------------------------- constraints
    def add_constraints(self, constraint: Constraint, name: str | None = None) -> ConstraintBlock:
        """Add ``lb <= expr <= ub`` rows built with ``<=``, ``>=`` or ``==`` on expressions."""
        if not isinstance(constraint, Constraint):
            raise ModelError(
                f"constraints[{name}]", type(constraint).__name__, "expected `expr <= rhs`, `expr >= rhs` or `expr == rhs`"
            )
        if constraint.expr.model is not self:
            raise ModelError(f"constraints[{name}]", name, "expression belongs to another Model")
        if name is not None and (not isinstance(name, str) or not name):
            raise ModelError("constraints.name", name, "must be a non-empty string or None")
        name = name or f"c{len(self.constraints)}"
        if name in self.constraints:
            raise ModelError("constraints.name", name, "a constraint block with this name exists")
        for field, arr in (("lb", constraint.lb), ("ub", constraint.ub)):
            if np.isnan(arr).any():
                raise ModelError(f"constraints[{name}].{field}", arr[np.isnan(arr)][:3], "contains NaN")
        block = ConstraintBlock(
            name,
            self.num_rows,
            constraint.expr.shape,
            constraint.expr,
            np.asarray(constraint.lb, dtype=float),
            np.asarray(constraint.ub, dtype=float),
        )
        self.constraints[name] = block
        self.num_rows += block.size
        return block

    def add_matrix_constraints(
        self, name: str, A: Any, lb: Any = -np.inf, ub: Any = np.inf, columns: VarBlock | None = None
    ) -> ConstraintBlock:
        """Add rows ``lb <= A x <= ub`` from a sparse/dense matrix.

        ``A`` spans all model variables, or only the block ``columns`` when given.
        """
        if not isinstance(name, str) or not name:
            raise ModelError("constraints.name", name, "must be a non-empty string")
        if columns is not None and (not isinstance(columns, VarBlock) or columns.model is not self):
            raise ModelError(f"constraints[{name}].columns", args.brief(columns), "must be a variable block of this Model")
        A = sp.csr_matrix(args.sparse_matrix(f"constraints[{name}].A", A), dtype=float)
        A.sum_duplicates()
        A = A.tocoo()
        width = columns.size if columns is not None else self.num_vars
        if (columns is not None and A.shape[1] != width) or A.shape[1] > width:
            raise ModelError(f"constraints[{name}].A", A.shape, f"needs {width} columns")
        m = A.shape[0]
        cols = A.col.astype(np.int64) + (columns.offset if columns is not None else 0)
        lbs, ubs = (_row_bounds(f"constraints[{name}].{field}", value, m, bad)
                    for field, value, bad in (("lb", lb, np.inf), ("ub", ub, -np.inf)))
        expr = LinExpr(self, A.row.astype(np.int64), cols, A.data, np.zeros(m), (m,), unique=1)
        return self.add_constraints(Constraint(expr, lbs, ubs), name)

    # ------------------------------------------------------------- objective
    def _set_objective(self, expr: Any, maximize: bool) -> None:
        if isinstance(expr, int | float | np.number):
            if not np.isfinite(args.numbers_array("objective", expr)):
                raise ModelError("objective", expr, "a constant objective must be finite")
            empty = np.zeros(0, dtype=np.int64)
            expr = LinExpr(self, empty, empty, np.zeros(0), np.array([float(expr)]), ())
        if not isinstance(expr, LinExpr) or expr.model is not self:
            raise ModelError("objective", type(expr).__name__, "must be an expression of this Model")
        if expr.size != 1:
            raise ModelError("objective.shape", expr.shape, "must be a scalar expression (use .sum())")
        self._objective = expr
        self.maximize_objective = maximize

    def maximize(self, expr: Any) -> None:
        """Set the objective to maximize the scalar expression ``expr``."""
        self._set_objective(expr, True)

    def minimize(self, expr: Any) -> None:
        """Set the objective to minimize the scalar expression ``expr``."""
        self._set_objective(expr, False)

    @property
    def objective(self) -> LinExpr | None:
        return self._objective

    # ------------------------------------------------------------ assembling
    def to_standard_form(self) -> StandardForm:
        """Stack all blocks into arrays (one CSC matrix for all rows, as HiGHS takes it)."""
        n = self.num_vars
        obj = self._objective
        if obj is None:
            c, offset = np.zeros(n), 0.0
        else:
            if _covers_all(obj):
                c = np.ascontiguousarray(obj.vals, dtype=float)  # one term per variable, in order
            else:
                c = np.bincount(obj.cols, weights=obj.vals, minlength=n)
            offset = float(obj.const[0])
        blocks = list(self.constraints.values())
        if blocks:
            A = _csc_from_blocks(blocks, (self.num_rows, n))
            row_lb = np.concatenate([b.lb for b in blocks])
            row_ub = np.concatenate([b.ub for b in blocks])
        else:
            A = sp.csc_matrix((0, n))
            row_lb = row_ub = np.zeros(0)
        vars_ = list(self.variables.values())
        col_lb = np.concatenate([v.lb for v in vars_]) if vars_ else np.zeros(0)
        col_ub = np.concatenate([v.ub for v in vars_]) if vars_ else np.zeros(0)
        integrality = (
            np.concatenate([np.full(v.size, v.integer) for v in vars_]) if vars_ else np.zeros(0, dtype=bool)
        )
        return StandardForm(c, offset, A, row_lb, row_ub, col_lb, col_ub, integrality, self.maximize_objective)

    def unpack(self, x: np.ndarray) -> dict[str, np.ndarray]:
        """Split a full variable vector into arrays shaped like the blocks."""
        x = args.point("x", x, self.num_vars, finite=False)
        return {name: np.asarray(x[v.slice]).reshape(v.shape) for name, v in self.variables.items()}

    def unpack_rows(self, y: np.ndarray) -> dict[str, np.ndarray]:
        """Split a full row vector (e.g. row duals) into arrays shaped like the constraint blocks."""
        y = args.point("y", y, self.num_rows, finite=False)
        return {name: np.asarray(y[b.slice]).reshape(b.shape) for name, b in self.constraints.items()}

    def pack(self, values: Mapping[str, Any], default: float = 0.0, field: str = "values") -> np.ndarray:
        """Inverse of :meth:`unpack`: finite values per block name (each broadcast to its block's
        shape); missing blocks get ``default``. ``field`` names the argument in errors."""
        if not isinstance(values, Mapping):
            raise ModelError(field, args.brief(values), "must be a mapping of variable block names to values")
        x = np.full(self.num_vars, default, dtype=float)
        for name, value in values.items():
            if not isinstance(name, str) or name not in self.variables:
                raise ModelError(field, name, f"unknown variable block; known: {list(self.variables)}")
            v = self.variables[name]
            arr = args.finite_array(f"{field}[{name!r}]", value)
            try:
                x[v.slice] = np.broadcast_to(arr, v.shape).ravel()
            except ValueError:
                raise ModelError(f"{field}[{name!r}]", np.shape(value), f"must be numbers of shape {v.shape}") from None
        return x

    def violation(self, x: np.ndarray) -> float:
        """Largest violation of any row, bound or integrality at the full vector ``x``."""
        x = args.point("x", x, self.num_vars)
        sf = self.to_standard_form()
        ax = sf.A @ x
        parts = [
            np.maximum(sf.row_lb - ax, 0),
            np.maximum(ax - sf.row_ub, 0),
            np.maximum(sf.col_lb - x, 0),
            np.maximum(x - sf.col_ub, 0),
            np.abs(x - np.round(x)) * sf.integrality,
        ]
        return float(max((p.max() for p in parts if p.size), default=0.0))

    def variable_names(self) -> list[str]:
        """Readable names ``block[i,j]`` for every variable (used by exports)."""
        return [n for v in self.variables.values() for n in _element_names(v.name, v.shape)]

    def row_names(self) -> list[str]:
        """Readable names ``block[i]`` for every constraint row (used by exports)."""
        return [n for b in self.constraints.values() for n in _element_names(b.name, b.shape)]


def as_model(value: Any, field: str = "model") -> Model:
    """``value`` when it is a :class:`Model`, else :class:`ModelError` naming ``field``."""
    if not isinstance(value, Model):
        raise ModelError(field, args.brief(value), f"must be a heteroplan Model, not {type(value).__name__}")
    return value


def _row_bounds(field: str, value: Any, m: int, unbounded_wrong_way: float) -> np.ndarray:
    """Row bounds for ``m`` rows: a scalar or ``m`` numbers (an infinite bound on its own side
    allowed; NaN and ``unbounded_wrong_way``, a lower bound of +inf or an upper bound of -inf, refused:
    HiGHS rejected the whole model for it)."""
    arr = args.numbers_array(field, value)
    if np.isnan(arr).any():
        raise ModelError(field, args.brief(value), "contains NaN")
    if (arr == unbounded_wrong_way).any():
        raise ModelError(field, args.brief(value), "a lower bound of +inf or an upper bound of -inf leaves no value")
    try:
        return np.broadcast_to(arr, (m,)).copy()
    except ValueError:
        raise ModelError(field, f"shape {arr.shape}", f"needs a scalar or {m} bounds") from None


def _flat_bounds(arr: np.ndarray, shape: Shape) -> np.ndarray:
    """Bounds as a flat array of ``size(shape)``: a read-only broadcast view for a scalar,
    a private copy otherwise (so later changes to the caller's array do not leak in)."""
    if arr.ndim == 0:
        return _constant(float(arr), _size(shape))
    return np.array(np.broadcast_to(arr, shape), dtype=float).reshape(-1)


def _element_names(name: str, shape: Shape) -> list[str]:
    """``name[i,j,...]`` for every element of an array of ``shape`` (just ``name`` for a scalar)."""
    if not shape:
        return [name]
    idx = np.indices(shape).reshape(len(shape), -1).T
    return [f"{name}[{','.join(map(str, i))}]" for i in idx]
