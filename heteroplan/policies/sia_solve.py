"""Solve Sia's ILP (built by :mod:`heteroplan.formulations.sia`) and decode the answer."""

from __future__ import annotations

import dataclasses

from heteroplan.errors import InputError
from heteroplan.formulations.sia import SiaProblem, SiaResult, SolveMode
from heteroplan.inputs import enum_choice, finite_number
from heteroplan.milp import Solution, SolveStatus
from heteroplan.solvers import solve

__all__ = ["SolveMode", "check_solve_options", "solve_sia"]

# LP relaxations with more columns than this are solved by interior point (with crossover to a
# vertex, which keeps LP-round's few fractional jobs): at 16,384 GPUs / 6,400 jobs (59k columns)
# HiGHS's simplex took 1.4-2.2 s CPU and its interior point 0.55 s (2048 GPUs: 0.049 vs 0.030 s;
# 512 GPUs, 1.7k columns: 0.009 vs 0.007 s); simplex is as fast on small models, and faster
# without presolve (same vertex on 538 sampled rounds of a 64-GPU trace; see highs.ALGORITHMS).
IPM_ABOVE = 2_000


def check_solve_options(mode: object, threads: object, auto_limit: object, mip_gap: object) -> SolveMode:
    """``mode`` as a :class:`SolveMode` (a member or its value); raise
    :class:`~heteroplan.errors.InputError` naming the first of a policy's solve options
    (``mode``, ``threads``, ``auto_limit``, ``mip_gap``) that :func:`solve_sia` cannot take."""
    solve_mode = enum_choice(SolveMode, "mode", mode)
    if threads is not None and (isinstance(threads, bool) or not isinstance(threads, int) or threads < 1):
        raise InputError("threads", threads, "must be a positive integer or None")
    if auto_limit is not None and (isinstance(auto_limit, bool) or not isinstance(auto_limit, int) or auto_limit < 0):
        raise InputError("auto_limit", auto_limit, "must be a number of variables >= 0, or None")
    finite_number("mip_gap", mip_gap, low=0.0)
    return solve_mode


def _tightened(problem: SiaProblem, rounded: SiaResult, lp: Solution) -> SiaResult:
    """LP-round's result with its bound tightened by :meth:`SiaProblem.knapsack_bound` (priced by
    the LP's capacity duals), when that bound is tighter."""
    duals = lp.duals.get("capacity")
    if duals is None:
        return rounded
    bound = problem.knapsack_bound(-duals if problem.minimize else duals)
    tighter = bound > rounded.bound if problem.minimize else bound < rounded.bound
    if not tighter:  # also nan: no bound computed
        return rounded
    gap = abs(rounded.objective - bound) / max(abs(rounded.objective), 1e-9)
    return dataclasses.replace(rounded, bound=bound, gap=gap)


def solve_sia(problem: SiaProblem, mode: SolveMode | str = SolveMode.MILP, time_limit: float = 10.0, mip_gap: float = 1e-3,
              threads: int | None = None, milp_limit: int | None = None) -> SiaResult:
    """Solve a :class:`SiaProblem` with HiGHS.

    Args:
        mode: a :class:`SolveMode` or its value: ``"milp"`` (branch and bound to ``mip_gap``), ``"lp-round"`` (LP relaxation by
            simplex or interior point, then greedy rounding of the few fractional jobs), or ``"auto"``: LP-round,
            kept when its gap to the LP bound (an upper bound on its gap to the optimum) is at
            most ``mip_gap``, or else to the tighter bound of
            :meth:`~heteroplan.formulations.sia.SiaProblem.knapsack_bound` (small models); else
            the MILP (only up to ``milp_limit`` variables, if given).
        time_limit: seconds per solve; at the limit the best incumbent is used.
        mip_gap: relative gap requested.
        threads: HiGHS threads (``None``: see :func:`heteroplan.solvers.highs.default_threads`).

    The result's ``mode`` says which solve produced the choice and ``gap`` its gap (to the LP
    bound for LP-round, or to the knapsack bound where ``auto`` computed it; the MIP gap for
    the MILP); ``build_time``/``solve_time`` cover every
    solve made.
    """
    mode = enum_choice(SolveMode, "mode", mode)
    if problem.model.num_vars == 0:
        return problem.empty_result()
    rounded = None
    if mode in (SolveMode.LP_ROUND, SolveMode.AUTO):
        algorithm = "simplex-no-presolve" if problem.model.num_vars <= IPM_ABOVE else "ipm"
        sol = solve(problem.model, time_limit=time_limit, mip_gap=mip_gap, relax=True, algorithm=algorithm,
                    threads=threads)
        rounded = dataclasses.replace(problem.decode(sol, relaxed=True), mode=SolveMode.LP_ROUND)
        if mode is SolveMode.LP_ROUND or (rounded.status is SolveStatus.OPTIMAL and rounded.gap <= mip_gap):
            return rounded
        if rounded.status is SolveStatus.OPTIMAL:
            rounded = _tightened(problem, rounded, sol)
            if rounded.gap <= mip_gap:
                return rounded
        if milp_limit is not None and problem.model.num_vars > milp_limit:
            return rounded
    sol = solve(problem.model, time_limit=time_limit, mip_gap=mip_gap, algorithm="auto", threads=threads)
    exact = dataclasses.replace(problem.decode(sol), mode=SolveMode.MILP)
    if rounded is None:
        return exact
    exact = dataclasses.replace(exact, build_time=exact.build_time + rounded.build_time,
                                solve_time=exact.solve_time + rounded.solve_time)
    tol = 1e-9 * max(1.0, abs(rounded.objective))
    worse = exact.objective > rounded.objective + tol if problem.minimize else exact.objective < rounded.objective - tol
    if not sol.has_solution or not exact.objective == exact.objective or worse:  # LP-round's is better
        return dataclasses.replace(rounded, build_time=exact.build_time, solve_time=exact.solve_time)
    return exact
