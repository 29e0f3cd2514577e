"""Model -> Solution.

``solve(model)`` uses HiGHS (arrays handed to highspy); ``backend="scipy" | "cbc" | "cvxpy"``
use the oracles in :mod:`heteroplan.solvers.oracles`. Exports to other front-ends and
files live in :mod:`heteroplan.solvers.exports`.
"""

from __future__ import annotations

import math

import numpy as np

from heteroplan.errors import ModelError
from heteroplan.milp import Model, Solution, SolveStatus
from heteroplan.solvers.exports import to_cvxpy, to_pulp, to_scipy, write_lp, write_model, write_mps

__all__ = [
    "solve",
    "Solution",
    "SolveStatus",
    "to_pulp",
    "to_cvxpy",
    "to_scipy",
    "write_lp",
    "write_mps",
    "write_model",
    "BACKENDS",
]

BACKENDS = ("highs", "scipy", "cbc", "cvxpy")


def solve(
    model: Model,
    backend: str = "highs",
    time_limit: float = 60.0,
    mip_gap: float = 1e-4,
    threads: int | None = None,
    relax: bool = False,
    warm_start: dict[str, np.ndarray] | None = None,
    algorithm: str = "auto",
    verbose: bool = False,
) -> Solution:
    """Solve ``model``; every solve is bounded in time.

    Args:
        model: the model.
        backend: ``"highs"`` (default), ``"scipy"``, ``"cbc"`` or ``"cvxpy"``.
        time_limit: wall-clock limit (seconds). At the limit the best incumbent is returned
            with status ``TIME_LIMIT`` (``solution.has_solution`` says whether there is one).
        mip_gap: relative MIP gap at which to stop.
        threads: solver threads (HiGHS only; default: HiGHS's choice).
        relax: drop integrality (solve the LP relaxation).
        warm_start: starting values per block (HiGHS only).
        algorithm: HiGHS algorithm: ``"auto"``, ``"simplex"``, ``"ipm"`` or ``"pdlp"``.
        verbose: show the solver log.
    """
    if backend not in BACKENDS:
        raise ModelError("backend", backend, f"unknown backend; choose from {BACKENDS}")
    if not (isinstance(time_limit, int | float) and time_limit > 0 and not math.isnan(time_limit)):
        raise ModelError("time_limit", time_limit, "must be a positive number of seconds")
    if not (isinstance(mip_gap, int | float) and mip_gap >= 0):
        raise ModelError("mip_gap", mip_gap, "must be >= 0")
    if backend == "highs":
        from heteroplan.solvers.highs import ALGORITHMS, solve_highs

        if algorithm not in ALGORITHMS:
            raise ModelError("algorithm", algorithm, f"choose from {sorted(ALGORITHMS)}")
        return solve_highs(model, time_limit, mip_gap, threads, relax, warm_start, algorithm, verbose)
    from heteroplan.solvers import oracles

    if backend == "scipy":
        return oracles.solve_scipy(model, time_limit, mip_gap, relax)
    if backend == "cbc":
        return oracles.solve_cbc(model, time_limit, mip_gap, relax)
    return oracles.solve_cvxpy(model, time_limit, mip_gap, relax)
