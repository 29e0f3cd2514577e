"""Solve Sia's ILP (built by :mod:`heteroplan.formulations.sia`) and decode the answer."""

from __future__ import annotations

from heteroplan.errors import InputError
from heteroplan.formulations.sia import SiaProblem, SiaResult
from heteroplan.solvers import solve

__all__ = ["solve_sia"]


def solve_sia(problem: SiaProblem, mode: str = "milp", time_limit: float = 10.0, mip_gap: float = 1e-3) -> SiaResult:
    """Solve a :class:`SiaProblem` with HiGHS.

    Args:
        mode: ``"milp"`` (branch and bound to ``mip_gap``) or ``"lp-round"`` (LP relaxation by
            simplex, then greedy rounding of the few fractional jobs).
        time_limit: seconds; at the limit the best incumbent is used.
        mip_gap: relative MIP gap at which to stop.
    """
    if mode not in ("milp", "lp-round"):
        raise InputError("mode", mode, "choose 'milp' or 'lp-round'")
    if problem.model.num_vars == 0:
        return problem.empty_result()
    relax = mode == "lp-round"
    sol = solve(problem.model, time_limit=time_limit, mip_gap=mip_gap, relax=relax, algorithm="simplex" if relax else "auto")
    return problem.decode(sol, relaxed=relax)
