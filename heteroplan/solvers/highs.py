"""HiGHS backend: hands the model to highspy as numpy arrays (``passModel``)."""

from __future__ import annotations

import time

import highspy
import numpy as np

from heteroplan.errors import SolverError
from heteroplan.milp import Model, Solution, SolveStatus, StandardForm, relative_gap

__all__ = ["solve_highs", "build_highs"]

_STATUS = {
    highspy.HighsModelStatus.kOptimal: SolveStatus.OPTIMAL,
    highspy.HighsModelStatus.kInfeasible: SolveStatus.INFEASIBLE,
    highspy.HighsModelStatus.kUnbounded: SolveStatus.UNBOUNDED,
    highspy.HighsModelStatus.kUnboundedOrInfeasible: SolveStatus.INFEASIBLE_OR_UNBOUNDED,
    highspy.HighsModelStatus.kTimeLimit: SolveStatus.TIME_LIMIT,
    highspy.HighsModelStatus.kIterationLimit: SolveStatus.TIME_LIMIT,
    highspy.HighsModelStatus.kSolutionLimit: SolveStatus.TIME_LIMIT,
    highspy.HighsModelStatus.kInterrupt: SolveStatus.TIME_LIMIT,
    highspy.HighsModelStatus.kModelEmpty: SolveStatus.OPTIMAL,
}

ALGORITHMS = {"auto": "choose", "simplex": "simplex", "ipm": "ipm", "pdlp": "pdlp"}


def build_highs(sf: StandardForm, relax: bool = False) -> highspy.Highs:
    """A quiet ``Highs`` object holding the model (column-wise arrays, no Python loop)."""
    h = highspy.Highs()
    h.setOptionValue("output_flag", False)
    A = sf.A  # column-wise, as HiGHS stores it
    integrality = np.zeros(sf.num_vars, dtype=np.int32) if relax else sf.integrality.astype(np.int32)
    sense = highspy.ObjSense.kMaximize if sf.maximize else highspy.ObjSense.kMinimize
    status = h.passModel(
        sf.num_vars,
        sf.num_rows,
        int(A.nnz),
        int(highspy.MatrixFormat.kColwise),
        int(sense),
        float(sf.offset),
        np.ascontiguousarray(sf.c, dtype=np.float64),
        np.ascontiguousarray(sf.col_lb, dtype=np.float64),
        np.ascontiguousarray(sf.col_ub, dtype=np.float64),
        np.ascontiguousarray(sf.row_lb, dtype=np.float64),
        np.ascontiguousarray(sf.row_ub, dtype=np.float64),
        np.asarray(A.indptr, dtype=np.int32),
        np.asarray(A.indices, dtype=np.int32),
        np.asarray(A.data, dtype=np.float64),
        integrality,
    )
    if status == highspy.HighsStatus.kError:
        raise SolverError(f"HiGHS rejected the model {sf.num_vars} columns x {sf.num_rows} rows (passModel error)")
    return h


def solve_highs(
    model: Model,
    time_limit: float = 60.0,
    mip_gap: float = 1e-4,
    threads: int | None = None,
    relax: bool = False,
    warm_start: dict[str, np.ndarray] | None = None,
    algorithm: str = "auto",
    verbose: bool = False,
    options: dict[str, object] | None = None,
) -> Solution:
    """Solve ``model`` with HiGHS; see :func:`heteroplan.solvers.solve` for the arguments."""
    t0 = time.perf_counter()
    sf = model.to_standard_form()
    h = build_highs(sf, relax)
    h.setOptionValue("time_limit", float(time_limit))
    h.setOptionValue("mip_rel_gap", float(mip_gap))
    h.setOptionValue("solver", ALGORITHMS[algorithm])
    h.setOptionValue("output_flag", bool(verbose))
    if threads is not None:
        h.setOptionValue("threads", int(threads))
    for key, value in (options or {}).items():
        h.setOptionValue(key, value)
    if warm_start:
        sol = highspy.HighsSolution()
        sol.col_value = model.pack(warm_start).tolist()
        sol.value_valid = True
        h.setSolution(sol)
    build_time = time.perf_counter() - t0

    t1 = time.perf_counter()
    h.run()
    solve_time = time.perf_counter() - t1

    model_status = h.getModelStatus()
    status = _STATUS.get(model_status, SolveStatus.ERROR)
    info = h.getInfo()
    has_point = info.primal_solution_status == highspy.SolutionStatus.kSolutionStatusFeasible
    if model_status == highspy.HighsModelStatus.kModelEmpty:
        has_point = True
    values: dict[str, np.ndarray] = {}
    objective = bound = float("nan")
    if has_point and status in (SolveStatus.OPTIMAL, SolveStatus.TIME_LIMIT):
        x = np.asarray(h.getSolution().col_value, dtype=float) if sf.num_vars else np.zeros(0)
        if sf.is_mip and not relax:
            x[sf.integrality] = np.round(x[sf.integrality])
        values = model.unpack(x)
        objective = float(sf.c @ x + sf.offset)
        mip = sf.is_mip and not relax
        bound = float(info.mip_dual_bound) if mip else objective
        if status is SolveStatus.TIME_LIMIT and not mip:
            bound = float("nan")
    elif sf.is_mip and not relax and np.isfinite(info.mip_dual_bound):
        bound = float(info.mip_dual_bound)
    gap = 0.0 if status is SolveStatus.OPTIMAL and not (sf.is_mip and not relax) else relative_gap(objective, bound)
    return Solution(
        status, objective, bound, gap, values, build_time, solve_time, "highs", h.modelStatusToString(model_status)
    )
