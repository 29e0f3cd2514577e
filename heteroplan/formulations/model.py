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

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import scipy.sparse as sp

from heteroplan.errors import ModelError

__all__ = ["Model", "LinExpr", "VarBlock", "Constraint", "ConstraintBlock", "StandardForm"]

Shape = tuple[int, ...]


def _as_shape(shape: int | Sequence[int], field: str) -> Shape:
    if isinstance(shape, int | np.integer):
        shape = (int(shape),)
    try:
        out = tuple(int(s) for s in shape)
    except TypeError:
        raise ModelError(field, shape, "must be an int or a sequence of ints") from None
    if any(s < 0 for s in out) or any(int(s) != s for s in shape):
        raise ModelError(field, shape, "dimensions must be non-negative integers")
    return out


def _size(shape: Shape) -> int:
    return int(np.prod(shape, dtype=np.int64))


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
    ) -> None:
        #: 2: every variable appears at most once in the whole expression; 1: at most once per
        #: element; 0: unknown. Lets assembly skip the duplicate-summing sort.
        self.unique = unique
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

    def _new(
        self, rows: np.ndarray, cols: np.ndarray, vals: np.ndarray, const: np.ndarray, shape: Shape, unique: int = 0
    ) -> LinExpr:
        return LinExpr(self.model, rows, cols, vals, const, shape, unique)

    def _coerce(self, other: Any) -> LinExpr | np.ndarray:
        if isinstance(other, LinExpr):
            if other.model is not self.model:
                raise ModelError("expression", other, "belongs to another Model")
            return other
        arr = np.asarray(other, dtype=float)
        if not np.all(np.isfinite(arr)):
            raise ModelError("constant", other, "must be finite")
        return arr

    def _select(self, src: np.ndarray, shape: Shape) -> LinExpr:
        """New expression whose element ``r`` is this expression's element ``src[r]``."""
        src = np.asarray(src, dtype=np.int64).ravel()
        if src.size == self.size and np.array_equal(src, np.arange(self.size)):
            return self._new(self.rows, self.cols, self.vals, self.const, shape, self.unique)
        order = np.argsort(src, kind="stable")
        counts = np.bincount(src, minlength=self.size)
        starts = np.cumsum(counts) - counts
        rep = counts[self.rows]
        term = np.repeat(np.arange(self.nnz), rep)
        within = np.arange(term.size) - np.repeat(np.cumsum(rep) - rep, rep)
        new_rows = order[starts[self.rows[term]] + within]
        repeats = bool(counts.max(initial=0) > 1)
        unique = min(self.unique, 1) if repeats else self.unique
        return self._new(new_rows, self.cols[term], self.vals[term], self.const[src], shape, unique)

    def broadcast_to(self, shape: Shape) -> LinExpr:
        """This expression repeated to ``shape`` (numpy broadcasting rules)."""
        shape = tuple(shape)
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
            return self._new(
                np.concatenate([a.rows, b.rows]),
                np.concatenate([a.cols, b.cols]),
                np.concatenate([a.vals, b.vals]),
                a.const + b.const,
                out,
                min(a.unique, b.unique) if separate else 0,
            )
        out = self._out_shape(other.shape)
        a = self.broadcast_to(out)
        return self._new(a.rows, a.cols, a.vals, a.const + np.broadcast_to(other, out).ravel(), out, a.unique)

    __radd__ = __add__

    def __neg__(self) -> LinExpr:
        return self._new(self.rows, self.cols, -self.vals, -self.const, self.shape, self.unique)

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
        if other.ndim == 0:
            return self._new(a.rows, a.cols, a.vals * float(other), a.const * float(other), out, a.unique)
        scale = np.broadcast_to(other, out).ravel()
        return self._new(a.rows, a.cols, a.vals * scale[a.rows], a.const * scale, out, a.unique)

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
        A = matrix if sp.issparse(matrix) else np.atleast_2d(np.asarray(matrix, dtype=float))
        if A.ndim != 2 or A.shape[1] != self.shape[0]:
            raise ModelError("matrix.shape", A.shape, f"needs {self.shape[0]} columns")
        if isinstance(A, np.ndarray) and A.shape[0] * self.nnz <= 4_000_000:
            # Small dense A: new term (i, t) = A[i, row_t] * val_t, zeros dropped; no scipy round trip.
            weights = A[:, self.rows] * self.vals  # (m, nnz)
            i, t = np.nonzero(weights)
            return self._new(i, self.cols[t], weights[i, t], A @ self.const, (A.shape[0],), 1 if self.unique == 2 else 0)
        A = sp.csr_matrix(A)
        E = sp.csr_matrix((self.vals, (self.rows, self.cols)), shape=(self.size, self.model.num_vars))
        P = (A @ E).tocoo()
        return self._new(P.row.astype(np.int64), P.col.astype(np.int64), P.data, A @ self.const, (A.shape[0],), 1)

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
        new = np.empty(self.shape, dtype=np.int8).reshape(*shape).shape
        return self._new(self.rows, self.cols, self.vals, self.const, new, self.unique)

    def ravel(self) -> LinExpr:
        return self.reshape(-1)

    def sum(self, axis: int | Sequence[int] | None = None) -> LinExpr:
        """Sum over ``axis`` (all axes when None, giving a scalar expression)."""
        if axis is None:
            axes = tuple(range(self.ndim))
        else:
            raw = (axis,) if isinstance(axis, int | np.integer) else tuple(axis)
            if any(not -self.ndim <= a < self.ndim for a in raw):
                raise ModelError("axis", axis, f"out of range for an expression of {self.ndim} dimensions")
            axes = tuple(sorted({int(a) % self.ndim for a in raw}))
        out_shape = tuple(s for i, s in enumerate(self.shape) if i not in axes)
        out_size = _size(out_shape)
        if out_size == 1:
            target_rows = np.zeros(self.nnz, dtype=np.int64)
            const = np.array([self.const.sum()])
        else:
            target = np.arange(out_size).reshape(out_shape)
            target = np.broadcast_to(np.expand_dims(target, axes), self.shape).ravel()
            target_rows = target[self.rows]
            const = np.bincount(target, weights=self.const, minlength=out_size)
        unique = 2 if self.unique == 2 else 0
        return self._new(target_rows, self.cols, self.vals, const, out_shape, unique)

    # ----------------------------------------------------------- constraints
    def _constraint(self, other: Any, lower: bool, upper: bool) -> Constraint:
        other = self._coerce(other)
        if isinstance(other, LinExpr):
            diff = self - other
            rhs = np.zeros(diff.size)
        else:
            diff = self.broadcast_to(self._out_shape(other.shape))
            rhs = np.broadcast_to(other, diff.shape).ravel()
        rhs = rhs - diff.const
        inf = np.full(diff.size, np.inf)
        lb = rhs if lower else -inf
        ub = rhs if upper else inf
        return Constraint(diff._new(diff.rows, diff.cols, diff.vals, np.zeros(diff.size), diff.shape, diff.unique), lb, ub)

    def __le__(self, other: Any) -> Constraint:
        return self._constraint(other, lower=False, upper=True)

    def __ge__(self, other: Any) -> Constraint:
        return self._constraint(other, lower=True, upper=False)

    def __eq__(self, other: Any) -> Constraint:  # type: ignore[override]
        return self._constraint(other, lower=True, upper=True)

    # -------------------------------------------------------------- evaluate
    def value(self, x: np.ndarray) -> np.ndarray:
        """Evaluate at the full variable vector ``x`` (length ``model.num_vars``)."""
        out = np.bincount(self.rows, weights=self.vals * np.asarray(x)[self.cols], minlength=self.size)
        return (out + self.const).reshape(self.shape)


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
    A = coo.tocsc()
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
        super().__init__(model, idx, offset + idx, np.ones(size), np.zeros(size), shape, unique=2)
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
        bounds = []
        for field, value in (("lb", lb), ("ub", ub)):
            try:
                arr = np.broadcast_to(np.asarray(value, dtype=float), shape).ravel().copy()
            except ValueError:
                raise ModelError(f"variables[{name}].{field}", np.shape(value), f"does not broadcast to {shape}") from None
            if np.isnan(arr).any():
                raise ModelError(f"variables[{name}].{field}", value, "contains NaN")
            bounds.append(arr)
        lb_arr, ub_arr = bounds
        bad = np.flatnonzero(lb_arr > ub_arr)
        if bad.size:
            i = [int(k) for k in np.unravel_index(bad[0], shape)] if shape else []
            raise ModelError(f"variables[{name}]{i}", (lb_arr[bad[0]], ub_arr[bad[0]]), "lb > ub")
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
        A = sp.csr_matrix(A, dtype=float)
        A.sum_duplicates()
        A = A.tocoo()
        width = columns.size if columns is not None else self.num_vars
        if (columns is not None and A.shape[1] != width) or A.shape[1] > width:
            raise ModelError(f"constraints[{name}].A", A.shape, f"needs {width} columns")
        m = A.shape[0]
        cols = A.col.astype(np.int64) + (columns.offset if columns is not None else 0)
        lbs = np.broadcast_to(np.asarray(lb, dtype=float), (m,)).copy()
        ubs = np.broadcast_to(np.asarray(ub, dtype=float), (m,)).copy()
        expr = LinExpr(self, A.row.astype(np.int64), cols, A.data, np.zeros(m), (m,), unique=1)
        return self.add_constraints(Constraint(expr, lbs, ubs), name)

    # ------------------------------------------------------------- objective
    def _set_objective(self, expr: Any, maximize: bool) -> None:
        if isinstance(expr, int | float | np.number):
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
        """Stack all blocks into arrays (one CSR matrix for all rows)."""
        n = self.num_vars
        c = np.zeros(n)
        offset = 0.0
        if self._objective is not None:
            obj = self._objective
            c = np.bincount(obj.cols, weights=obj.vals, minlength=n)
            offset = float(obj.const[0])
        blocks = list(self.constraints.values())
        if blocks:
            rows = np.concatenate([b.expr.rows + b.offset for b in blocks])
            cols = np.concatenate([b.expr.cols for b in blocks])
            vals = np.concatenate([b.expr.vals for b in blocks])
            A = _csc(rows, cols, vals, (self.num_rows, n), all(b.expr.unique for b in blocks))
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
        return {name: np.asarray(x[v.slice]).reshape(v.shape) for name, v in self.variables.items()}

    def pack(self, values: dict[str, Any], default: float = 0.0) -> np.ndarray:
        """Inverse of :meth:`unpack`; missing blocks get ``default``."""
        x = np.full(self.num_vars, default, dtype=float)
        for name, value in values.items():
            if name not in self.variables:
                raise ModelError("values", name, f"unknown variable block; known: {list(self.variables)}")
            v = self.variables[name]
            x[v.slice] = np.broadcast_to(np.asarray(value, dtype=float), v.shape).ravel()
        return x

    def violation(self, x: np.ndarray) -> float:
        """Largest violation of any row, bound or integrality at the full vector ``x``."""
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


def _element_names(name: str, shape: Shape) -> list[str]:
    """``name[i,j,...]`` for every element of an array of ``shape`` (just ``name`` for a scalar)."""
    if not shape:
        return [name]
    idx = np.indices(shape).reshape(len(shape), -1).T
    return [f"{name}[{','.join(map(str, i))}]" for i in idx]
