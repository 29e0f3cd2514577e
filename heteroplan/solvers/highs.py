"""HiGHS backend: hands the model to highspy as numpy arrays (``passModel``)."""

from __future__ import annotations

import ctypes
import os
import sys
import threading
import time
import warnings

import highspy
import numpy as np

from heteroplan.errors import InputError, ModelError, ModelWarning, SolverError
from heteroplan.milp import Model, Solution, SolveStatus, StandardForm, relative_gap
from heteroplan.solvers.registry import MAX_THREADS, SolveOptions

__all__ = ["solve_highs", "build_highs", "new_highs"]

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

# "ipm-interior": interior point without presolve or crossover (an interior optimum, not a vertex).
# "simplex-no-presolve": simplex on the model as given; on Sia's LPs of 200-1800 columns presolve
# cost more than it saved (64 GPUs, 217 columns: 0.97 -> 0.77 ms; 512 GPUs, 1826: 8.0 -> 6.2 ms).
ALGORITHMS = {"auto": "choose", "simplex": "simplex", "simplex-no-presolve": "simplex", "ipm": "ipm",
              "ipm-interior": "ipm", "pdlp": "pdlp"}


_banner_lock = threading.Lock()
_banner_done = False


def new_highs(verbose: bool = False) -> highspy.Highs:
    """A ``Highs`` object whose log is on only when ``verbose``.

    HiGHS prints its banner to the process's stdout (file descriptor 1, from C++) when the
    first ``Highs`` of a process is constructed, before any option can be set; unless
    ``verbose``, that first construction runs with descriptor 1 pointed at ``/dev/null``.
    """
    global _banner_done
    with _banner_lock:
        if _banner_done or verbose:
            _banner_done = True
            h = highspy.Highs()
        else:
            sys.stdout.flush()
            saved = os.dup(1)
            devnull = os.open(os.devnull, os.O_WRONLY)
            try:
                os.dup2(devnull, 1)
                h = highspy.Highs()
                _flush_c_stdio()  # on a pipe C stdio buffers the banner: flush it while fd 1 is /dev/null
            finally:
                os.dup2(saved, 1)
                os.close(saved)
                os.close(devnull)
            _banner_done = True
    h.setOptionValue("output_flag", bool(verbose))
    return h


def _flush_c_stdio() -> None:
    try:
        ctypes.CDLL(None).fflush(None)
    except (OSError, AttributeError, TypeError):  # no C library handle (e.g. Windows): stdio unbuffered there
        pass


# HiGHS refuses matrix entries of this size or more (option large_matrix_value) and treats
# costs of this size or more as infinite (infinite_cost).
LARGE_MATRIX_VALUE = 1e15
INFINITE_COST = 1e20


def check_magnitudes(sf: StandardForm) -> None:
    """A :class:`ModelError` naming the first matrix entry or cost HiGHS cannot take
    (non-finite, ``|a| >= 1e15`` or ``|c| >= 1e20``), instead of HiGHS's bare passModel error."""
    A = sf.A
    bad = np.flatnonzero(~(np.abs(A.data) < LARGE_MATRIX_VALUE))
    if bad.size:
        k = int(bad[0])
        col = int(np.searchsorted(A.indptr, k, side="right") - 1)
        raise ModelError(f"constraint coefficient (row {int(A.indices[k])}, column {col})", float(A.data[k]),
                         f"|coefficient| must be finite and < {LARGE_MATRIX_VALUE:g}; rescale the model")
    bad = np.flatnonzero(~(np.abs(sf.c) < INFINITE_COST))
    if bad.size:
        raise ModelError(f"objective coefficient (column {int(bad[0])})", float(sf.c[bad[0]]),
                         f"|coefficient| must be finite and < {INFINITE_COST:g}; rescale the model")


SMALL_MATRIX_VALUE = 1e-9  # HiGHS's small_matrix_value: smaller entries are dropped
INFINITE_BOUND = 1e20  # HiGHS's infinite_bound: larger bounds are taken as infinite


def warn_numerics(sf: StandardForm) -> None:
    """A :class:`ModelWarning` for what HiGHS would silently change: a nonzero constraint
    coefficient below ``1e-9`` (dropped as 0) or a finite bound of ``1e20`` or more (taken as infinite)."""
    data = np.abs(sf.A.data)
    tiny = np.flatnonzero((data > 0) & (data < SMALL_MATRIX_VALUE))
    if tiny.size:
        k = int(tiny[0])
        col = int(np.searchsorted(sf.A.indptr, k, side="right") - 1)
        warnings.warn(f"{tiny.size} constraint coefficient(s) below {SMALL_MATRIX_VALUE:g} (first: row "
                      f"{int(sf.A.indices[k])}, column {col} = {float(sf.A.data[k]):g}): HiGHS treats them as 0; "
                      "rescale the model (units)", ModelWarning, stacklevel=4)
    for what, bounds in (("variable bound", sf.col_lb), ("variable bound", sf.col_ub),
                         ("row bound", sf.row_lb), ("row bound", sf.row_ub)):
        huge = np.flatnonzero(np.isfinite(bounds) & (np.abs(bounds) >= INFINITE_BOUND))
        if huge.size:
            warnings.warn(f"{huge.size} {what}(s) of {INFINITE_BOUND:g} or more (first: index {int(huge[0])} = "
                          f"{float(bounds[huge[0]]):g}): HiGHS treats them as infinite; pass inf, or rescale the model",
                          ModelWarning, stacklevel=4)
            return


def build_highs(sf: StandardForm, relax: bool = False, verbose: bool = False) -> highspy.Highs:
    """A ``Highs`` object holding the model (column-wise arrays, no Python loop); quiet unless ``verbose``."""
    check_magnitudes(sf)
    warn_numerics(sf)
    h = new_highs(verbose)
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


_scheduler_threads: int | None = None  # the size of HiGHS's per-process thread pool, once we set it


# Models up to this many columns solve on one thread when no thread count is given: a Sia round
# on 64 GPUs (~155 binaries) took 8 ms on one thread and 16 ms on HiGHS's default pool, which
# burnt 1.6x the CPU; the pool pays off only for large branch-and-bound trees.
SMALL_MODEL_COLUMNS = 20_000


def default_threads(num_columns: int | None = None) -> int | None:
    """HiGHS threads when a solve names none: ``HETEROPLAN_SOLVER_THREADS`` if set (the sweep's
    worker processes set 1, so N workers use N cores); else 1 for a model of at most
    :data:`SMALL_MODEL_COLUMNS` columns (``num_columns``); else ``None`` (HiGHS's own choice)."""
    text = os.environ.get("HETEROPLAN_SOLVER_THREADS", "").strip()
    if not text:
        return 1 if num_columns is not None and num_columns <= SMALL_MODEL_COLUMNS else None
    try:
        value = int(text)
    except ValueError:
        raise InputError("HETEROPLAN_SOLVER_THREADS", text, "must be a positive integer") from None
    if not 1 <= value <= MAX_THREADS:  # 10**9 made HiGHS allocate tens of GB (killed for memory)
        raise InputError("HETEROPLAN_SOLVER_THREADS", text, f"must be a positive integer, at most {MAX_THREADS}")
    return value


def _size_scheduler(threads: int | None) -> None:
    """HiGHS keeps one thread pool per process, sized by the first solve; a different size fails
    the run ("Not Set") unless the pool is reset first, so reset it when the size changes
    (``None``: HiGHS's default size)."""
    global _scheduler_threads
    if _scheduler_threads != threads:
        highspy.Highs.resetGlobalScheduler(True)
        _scheduler_threads = threads


def solve_highs(model: Model, options: SolveOptions) -> Solution:
    """Solve ``model`` with HiGHS; see :func:`heteroplan.solvers.solve` for the options."""
    relax = options.relax
    t0 = time.perf_counter()
    sf = model.to_standard_form()
    h = build_highs(sf, relax, options.verbose)
    h.setOptionValue("time_limit", float(options.time_limit))
    h.setOptionValue("mip_rel_gap", float(options.mip_gap))
    h.setOptionValue("solver", ALGORITHMS[options.algorithm])
    if options.algorithm == "ipm-interior":  # presolve would fix columns at bounds (a vertex)
        h.setOptionValue("run_crossover", "off")
        h.setOptionValue("presolve", "off")
    elif options.algorithm == "simplex-no-presolve":
        h.setOptionValue("presolve", "off")
    threads = options.threads if options.threads is not None else default_threads(sf.num_vars)
    _size_scheduler(threads)
    if threads is not None:
        h.setOptionValue("threads", int(threads))
    if options.warm_start:
        sol = highspy.HighsSolution()
        sol.col_value = model.pack(options.warm_start).tolist()
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
    duals: dict[str, np.ndarray] = {}
    objective = bound = float("nan")
    if has_point and status in (SolveStatus.OPTIMAL, SolveStatus.TIME_LIMIT):
        solution = h.getSolution()
        x = np.asarray(solution.col_value, dtype=float) if sf.num_vars else np.zeros(0)
        if (relax or not sf.is_mip) and status is SolveStatus.OPTIMAL and solution.dual_valid:
            duals = model.unpack_rows(np.asarray(solution.row_dual, dtype=float))
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
        status, objective, bound, gap, values, build_time, solve_time, "highs", h.modelStatusToString(model_status),
        duals,
    )
