"""Other backends behind the same ``solve`` call: scipy (HiGHS inside scipy), CBC via pulp, cvxpy.

They exist so users can switch solvers and so tests can check HiGHS against
independent implementations. Statuses are mapped onto :class:`SolveStatus`.
"""

from __future__ import annotations

import time
import warnings

import numpy as np

from heteroplan.milp import Model, Solution, SolveStatus, relative_gap
from heteroplan.solvers.exports import to_cvxpy, to_pulp, to_scipy
from heteroplan.solvers.registry import SolveOptions

__all__ = ["solve_scipy", "solve_cbc", "solve_cvxpy"]


def solve_scipy(model: Model, options: SolveOptions) -> Solution:
    """Solve with :func:`scipy.optimize.milp` (time limit, gap, log; no threads, warm start or algorithm)."""
    from scipy.optimize import milp

    t0 = time.perf_counter()
    spec = to_scipy(model, options.relax)
    build = time.perf_counter() - t0
    t1 = time.perf_counter()
    opts = {"time_limit": options.time_limit, "mip_rel_gap": options.mip_gap, "disp": options.verbose}
    res = milp(**spec["kwargs"], options=opts)
    solve_time = time.perf_counter() - t1
    status = {0: SolveStatus.OPTIMAL, 1: SolveStatus.TIME_LIMIT, 2: SolveStatus.INFEASIBLE, 3: SolveStatus.UNBOUNDED}.get(
        res.status, SolveStatus.ERROR
    )
    if res.x is None:
        return Solution(status, build_time=build, solve_time=solve_time, backend="scipy", message=res.message)
    objective = spec["sign"] * res.fun + spec["offset"]
    bound = objective
    if getattr(res, "mip_dual_bound", None) is not None and np.isfinite(res.mip_dual_bound):
        bound = spec["sign"] * res.mip_dual_bound + spec["offset"]
    return Solution(
        status, objective, bound, relative_gap(objective, bound), model.unpack(np.asarray(res.x)), build, solve_time, "scipy", res.message
    )


def solve_cbc(model: Model, options: SolveOptions) -> Solution:
    """Solve with CBC (bundled with pulp): time limit, gap, threads, warm start, log; no algorithm.

    pulp reports ``Optimal`` for a solve CBC stopped at its time limit; its solution
    status (``sol_status``) tells the two apart, so such a solve is ``TIME_LIMIT`` here,
    with CBC's incumbent when it has one. CBC's bound is not exposed by pulp (``nan``).
    CBC runs without its preprocessing, which can lose optimality on small mixed models
    (and with it again when CBC fails without it, as on some infeasible models).
    """
    import pulp

    t0 = time.perf_counter()
    prob, xs = to_pulp(model, options.relax)
    if options.warm_start:
        for var, value in zip(xs, model.pack(options.warm_start), strict=True):
            var.setInitialValue(float(value), check=False)
    build = time.perf_counter() - t0
    t1 = time.perf_counter()

    def run(cbc_options: list[str]) -> None:
        prob.solve(
            pulp.PULP_CBC_CMD(
                msg=options.verbose,
                timeLimit=options.time_limit,
                gapRel=options.mip_gap,
                threads=options.threads,
                warmStart=bool(options.warm_start),
                options=cbc_options,
            )
        )

    # CBC's preprocessing can return a worse point and call it optimal ("possible tolerance
    # issue"; tests/test_solvers.py holds such a model), so it runs without; but without it CBC
    # exits with an error on some infeasible models, which are then solved again with it.
    try:
        run(["preprocess off"])
    except pulp.PulpSolverError:
        try:
            run([])
        except pulp.PulpSolverError as exc:
            return Solution(SolveStatus.ERROR, build_time=build, backend="cbc", message=str(exc))
    solve_time = time.perf_counter() - t1
    text = f"{pulp.LpStatus[prob.status]} ({pulp.LpSolution[prob.sol_status]})"
    if prob.status == pulp.LpStatusInfeasible:
        status = SolveStatus.INFEASIBLE
    elif prob.status == pulp.LpStatusUnbounded:
        status = SolveStatus.UNBOUNDED
    elif prob.sol_status == pulp.LpSolutionOptimal:
        status = SolveStatus.OPTIMAL
    elif prob.sol_status == pulp.LpSolutionIntegerFeasible or prob.status == pulp.LpStatusNotSolved:
        status = SolveStatus.TIME_LIMIT  # stopped at the limit, with or without an incumbent
    else:
        status = SolveStatus.ERROR
    if status is SolveStatus.TIME_LIMIT and prob.sol_status == pulp.LpSolutionNoSolutionFound:
        return Solution(status, build_time=build, solve_time=solve_time, backend="cbc", message=text)
    if status not in (SolveStatus.OPTIMAL, SolveStatus.TIME_LIMIT):
        return Solution(status, build_time=build, solve_time=solve_time, backend="cbc", message=text)
    x = np.array([v.value() if v.value() is not None else 0.0 for v in xs], dtype=float)
    objective = float(pulp.value(prob.objective) or 0.0)
    bound = objective if status is SolveStatus.OPTIMAL else float("nan")
    return Solution(status, objective, bound, relative_gap(objective, bound), model.unpack(x), build, solve_time, "cbc", text)


def solve_cvxpy(model: Model, options: SolveOptions) -> Solution:
    """Solve through cvxpy's HiGHS interface (time limit, gap, log; no threads, warm start or algorithm).

    The model goes through cvxpy's own canonicalization, which is what makes it an
    independent check of :mod:`heteroplan.milp`'s standard form.
    """
    import cvxpy as cp

    from heteroplan.solvers.highs import new_highs

    new_highs()  # the process's first Highs prints a banner; let it be a quiet one
    t0 = time.perf_counter()
    prob, x = to_cvxpy(model, options.relax)
    build = time.perf_counter() - t0
    t1 = time.perf_counter()
    try:
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message="Solution may be inaccurate")
            prob.solve(solver="HIGHS", verbose=options.verbose, time_limit=float(options.time_limit), mip_rel_gap=float(options.mip_gap))
    except cp.error.SolverError as exc:
        return Solution(SolveStatus.ERROR, backend="cvxpy", message=str(exc), build_time=build)
    solve_time = time.perf_counter() - t1
    status = {
        cp.OPTIMAL: SolveStatus.OPTIMAL,
        cp.OPTIMAL_INACCURATE: SolveStatus.OPTIMAL,
        cp.USER_LIMIT: SolveStatus.TIME_LIMIT,
        cp.INFEASIBLE: SolveStatus.INFEASIBLE,
        cp.UNBOUNDED: SolveStatus.UNBOUNDED,
    }.get(prob.status, SolveStatus.ERROR)
    if status not in (SolveStatus.OPTIMAL, SolveStatus.TIME_LIMIT) or x.value is None:
        return Solution(status, build_time=build, solve_time=solve_time, backend="cvxpy", message=str(prob.status))
    objective = float(prob.value)
    bound = objective if status is SolveStatus.OPTIMAL else float("nan")
    values = model.unpack(np.asarray(x.value))
    return Solution(status, objective, bound, relative_gap(objective, bound), values, build, solve_time, "cvxpy", str(prob.status))
