"""Other backends behind the same ``solve`` call: scipy (HiGHS inside scipy), CBC via pulp, cvxpy.

They exist so users can switch solvers and so tests can check HiGHS against
independent implementations. Statuses are mapped onto :class:`SolveStatus`.
"""

from __future__ import annotations

import time

import numpy as np

from heteroplan.milp import Model, Solution, SolveStatus, relative_gap
from heteroplan.solvers.exports import to_cvxpy, to_pulp, to_scipy

__all__ = ["solve_scipy", "solve_cbc", "solve_cvxpy"]


def solve_scipy(model: Model, time_limit: float = 60.0, mip_gap: float = 1e-4, relax: bool = False) -> Solution:
    """Solve with :func:`scipy.optimize.milp`."""
    from scipy.optimize import milp

    t0 = time.perf_counter()
    spec = to_scipy(model, relax)
    build = time.perf_counter() - t0
    t1 = time.perf_counter()
    res = milp(**spec["kwargs"], options={"time_limit": time_limit, "mip_rel_gap": mip_gap, "disp": False})
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


def solve_cbc(model: Model, time_limit: float = 60.0, mip_gap: float = 1e-4, relax: bool = False) -> Solution:
    """Solve with CBC (bundled with pulp)."""
    import pulp

    t0 = time.perf_counter()
    prob, xs = to_pulp(model, relax)
    build = time.perf_counter() - t0
    t1 = time.perf_counter()
    prob.solve(pulp.PULP_CBC_CMD(msg=False, timeLimit=time_limit, gapRel=mip_gap))
    solve_time = time.perf_counter() - t1
    text = pulp.LpStatus[prob.status]
    status = {"Optimal": SolveStatus.OPTIMAL, "Infeasible": SolveStatus.INFEASIBLE, "Unbounded": SolveStatus.UNBOUNDED}.get(
        text, SolveStatus.ERROR
    )
    if status is not SolveStatus.OPTIMAL:
        return Solution(status, build_time=build, solve_time=solve_time, backend="cbc", message=text)
    x = np.array([v.value() if v.value() is not None else 0.0 for v in xs], dtype=float)
    objective = float(pulp.value(prob.objective) or 0.0)
    return Solution(status, objective, objective, 0.0, model.unpack(x), build, solve_time, "cbc", text)


def solve_cvxpy(model: Model, time_limit: float = 60.0, mip_gap: float = 1e-4, relax: bool = False, solver: str | None = None) -> Solution:
    """Solve through cvxpy with ``solver`` (cvxpy's default choice when None)."""
    import cvxpy as cp

    t0 = time.perf_counter()
    prob, x = to_cvxpy(model, relax)
    build = time.perf_counter() - t0
    t1 = time.perf_counter()
    try:
        prob.solve(solver=solver)
    except cp.error.SolverError as exc:
        return Solution(SolveStatus.ERROR, backend="cvxpy", message=str(exc), build_time=build)
    solve_time = time.perf_counter() - t1
    status = {
        cp.OPTIMAL: SolveStatus.OPTIMAL,
        cp.OPTIMAL_INACCURATE: SolveStatus.OPTIMAL,
        cp.INFEASIBLE: SolveStatus.INFEASIBLE,
        cp.UNBOUNDED: SolveStatus.UNBOUNDED,
    }.get(prob.status, SolveStatus.ERROR)
    if status is not SolveStatus.OPTIMAL or x.value is None:
        return Solution(status, build_time=build, solve_time=solve_time, backend="cvxpy", message=str(prob.status))
    objective = float(prob.value)
    return Solution(status, objective, objective, 0.0, model.unpack(np.asarray(x.value)), build, solve_time, "cvxpy", str(prob.status))
