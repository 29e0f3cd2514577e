"""Exports of a Model to other modeling front-ends and file formats.

These are for users who want another solver or to read the model, and for tests that
check HiGHS against independent oracles. They are not the path every solve takes: pulp
creates one Python object per variable and is ~100x slower to build than the arrays
handed to HiGHS (see ``benchmarks/model_build.py``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import scipy.sparse as sp

from heteroplan.errors import ModelError
from heteroplan.milp import Model, as_model

__all__ = ["to_scipy", "to_pulp", "to_cvxpy", "write_lp", "write_mps", "write_model", "file_names"]


def to_scipy(model: Model, relax: bool = False) -> dict[str, Any]:
    """Keyword arguments for :func:`scipy.optimize.milp` (always a minimization).

    The objective is negated for maximization models; add ``offset`` (and negate back)
    to recover the model's objective value: ``obj = sign * res.fun + offset``.
    """
    from scipy.optimize import Bounds, LinearConstraint

    sf = as_model(model).to_standard_form()
    sign = -1.0 if sf.maximize else 1.0
    kwargs: dict[str, Any] = {
        "c": sign * sf.c,
        "integrality": np.zeros(sf.num_vars) if relax else sf.integrality.astype(int),
        "bounds": Bounds(sf.col_lb, sf.col_ub),
    }
    if sf.num_rows:
        kwargs["constraints"] = LinearConstraint(sf.A, sf.row_lb, sf.row_ub)
    return {"kwargs": kwargs, "sign": sign, "offset": sf.offset}


def to_pulp(model: Model, relax: bool = False) -> tuple[Any, list[Any]]:
    """A ``pulp.LpProblem`` equal to ``model`` and its variables (in model order).

    Pick any pulp solver afterwards, e.g. ``prob.solve(pulp.PULP_CBC_CMD(msg=False))``,
    or write it with ``prob.writeLP(path)`` / ``prob.writeMPS(path)``.
    """
    import pulp

    sf = as_model(model).to_standard_form()
    names = model.variable_names()
    sense = pulp.LpMaximize if sf.maximize else pulp.LpMinimize
    prob = pulp.LpProblem(_pulp_name(model.name), sense)
    xs = []
    for j in range(sf.num_vars):
        lb = None if np.isneginf(sf.col_lb[j]) else float(sf.col_lb[j])
        ub = None if np.isposinf(sf.col_ub[j]) else float(sf.col_ub[j])
        cat = pulp.LpInteger if sf.integrality[j] and not relax else pulp.LpContinuous
        xs.append(pulp.LpVariable(_pulp_name(names[j]) + f"_{j}", lb, ub, cat))
    nz = np.flatnonzero(sf.c)
    prob += pulp.LpAffineExpression([(xs[j], float(sf.c[j])) for j in nz], constant=float(sf.offset))
    A = sf.A.tocsr()
    row_names = model.row_names()
    for i in range(sf.num_rows):
        lo, hi = A.indptr[i], A.indptr[i + 1]
        expr = pulp.LpAffineExpression([(xs[j], float(v)) for j, v in zip(A.indices[lo:hi], A.data[lo:hi], strict=True)])
        lb, ub = sf.row_lb[i], sf.row_ub[i]
        base = _pulp_name(row_names[i]) + f"_{i}"
        if lb == ub:
            prob += (expr == float(lb)), base
            continue
        if np.isfinite(lb):
            prob += (expr >= float(lb)), base + "_lo"
        if np.isfinite(ub):
            prob += (expr <= float(ub)), base + "_hi"
    return prob, xs


def _pulp_name(name: str) -> str:
    return "".join(ch if ch.isalnum() else "_" for ch in name)


def to_cvxpy(model: Model, relax: bool = False) -> tuple[Any, Any]:
    """A ``cvxpy.Problem`` equal to ``model`` and its variable vector ``x`` (model order).

    Integer variables become a separate ``cvxpy.Variable(integer=True)`` mapped in by a
    sparse selection matrix, so mixed blocks are exact.
    """
    import cvxpy as cp

    sf = as_model(model).to_standard_form()
    n = sf.num_vars
    int_idx = np.flatnonzero(sf.integrality) if not relax else np.zeros(0, dtype=int)
    cont_idx = np.setdiff1d(np.arange(n), int_idx)
    parts = []
    if cont_idx.size:
        xc = cp.Variable(cont_idx.size)
        parts.append(sp.csr_matrix((np.ones(cont_idx.size), (cont_idx, np.arange(cont_idx.size))), shape=(n, cont_idx.size)) @ xc)
    if int_idx.size:
        xi = cp.Variable(int_idx.size, integer=True)
        parts.append(sp.csr_matrix((np.ones(int_idx.size), (int_idx, np.arange(int_idx.size))), shape=(n, int_idx.size)) @ xi)
    if not parts:
        raise ModelError("model", model.name, "has no variables")
    x = parts[0] if len(parts) == 1 else parts[0] + parts[1]
    cons = []
    for bounds, lower in ((sf.col_lb, True), (sf.col_ub, False)):
        finite = np.flatnonzero(np.isfinite(bounds))
        if finite.size:
            cons.append(x[finite] >= bounds[finite] if lower else x[finite] <= bounds[finite])
    if sf.num_rows:
        eq = np.flatnonzero(sf.row_lb == sf.row_ub)
        lo = np.flatnonzero(np.isfinite(sf.row_lb) & (sf.row_lb != sf.row_ub))
        hi = np.flatnonzero(np.isfinite(sf.row_ub) & (sf.row_lb != sf.row_ub))
        A = sf.A.tocsr()
        if eq.size:
            cons.append(A[eq] @ x == sf.row_lb[eq])
        if lo.size:
            cons.append(A[lo] @ x >= sf.row_lb[lo])
        if hi.size:
            cons.append(A[hi] @ x <= sf.row_ub[hi])
    objective = sf.c @ x + sf.offset
    prob = cp.Problem(cp.Maximize(objective) if sf.maximize else cp.Minimize(objective), cons)
    return prob, x


def write_model(model: Model, path: str | Path) -> Path:
    """Write the model in the format of the file suffix (``.lp`` or ``.mps``) through HiGHS;
    returns the path written. Missing parent directories are created.

    Variables and rows keep their names in the file, spelled as the formats allow
    (:func:`file_names`: ``open[0]`` becomes ``open(0)``, ``flow[1,2]`` ``flow(1,2)``); reading the
    file back with HiGHS gives the same model, optimum and names."""
    import highspy

    from heteroplan.solvers.highs import build_highs

    model = as_model(model)
    path = Path(path)
    if path.suffix not in (".lp", ".mps"):
        raise ModelError("path", str(path), "suffix must be .lp or .mps")
    if path.is_dir():
        raise ModelError("path", str(path), "is a directory; give a file name")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ModelError("path", str(path), f"cannot create its directory: {exc.strerror or exc}") from None
    h = build_highs(model.to_standard_form())
    for j, name in enumerate(file_names(model.variable_names())):
        h.passColName(j, name)
    for i, name in enumerate(file_names(model.row_names())):
        h.passRowName(i, name)
    if h.writeModel(str(path)) == highspy.HighsStatus.kError or not path.exists():
        raise ModelError("path", str(path), "HiGHS could not write the file there")
    return path


# Characters a CPLEX LP name may hold besides letters and digits (HiGHS's LP reader and writer
# follow it; brackets are not among them). Anything else becomes "_".
_LP_NAME_CHARS = frozenset("!\"#$%&()/,.;?@_`'{}|~")
_MAX_NAME = 255


def file_names(names: list[str]) -> list[str]:
    """Names as an LP or MPS file can hold them, one-to-one: ``[ ]`` -> ``( )``, other characters
    outside the LP format's set -> ``_``, a leading digit, ``.`` or an exponent-like ``e``/``E``
    prefixed with ``_``; a name that collides after that gets ``~k`` (its position) appended."""
    out: list[str] = []
    seen: set[str] = set()
    for k, name in enumerate(names):
        text = "".join(c if c.isascii() and (c.isalnum() or c in _LP_NAME_CHARS) else _BRACKETS.get(c, "_")
                       for c in name)[:_MAX_NAME] or "_"
        if text[0].isdigit() or text[0] == "." or (text[0] in "eE" and (len(text) == 1 or not text[1].isalpha())):
            text = "_" + text
        if text in seen:
            text = f"{text}~{k}"
        seen.add(text)
        out.append(text)
    return out


_BRACKETS = {"[": "(", "]": ")"}


def _file_in(path: str | Path, model: Model, suffix: str) -> Path:
    """``path`` with ``suffix``; a directory means ``<directory>/<model name><suffix>``."""
    path = Path(path)
    if path.is_dir():
        stem = "".join(c if c.isalnum() or c in "-_." else "_" for c in model.name) or "model"
        return path / f"{stem}{suffix}"
    return path.with_suffix(suffix)


def write_lp(model: Model, path: str | Path) -> Path:
    """Write the model as a CPLEX LP file (into ``path/<model name>.lp`` when ``path`` is a directory)."""
    return write_model(model, _file_in(path, as_model(model), ".lp"))


def write_mps(model: Model, path: str | Path) -> Path:
    """Write the model as a (free) MPS file (into ``path/<model name>.mps`` when ``path`` is a directory)."""
    return write_model(model, _file_in(path, as_model(model), ".mps"))
