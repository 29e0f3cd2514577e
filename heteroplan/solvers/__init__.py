"""Model -> Solution.

``solve(model)`` uses HiGHS (arrays handed to highspy); ``backend="scipy" | "cbc" | "cvxpy"``
use the oracles in :mod:`heteroplan.solvers.oracles`. Every backend sits in one registry
(:mod:`heteroplan.solvers.registry`) with the options it can honour; asking a backend for
one it cannot honour raises :class:`~heteroplan.errors.InputError`. Exports to other
front-ends and files live in :mod:`heteroplan.solvers.exports`.
"""

from __future__ import annotations

import numpy as np

from heteroplan.milp import Model, Solution, SolveStatus, as_model
from heteroplan.solvers import oracles
from heteroplan.solvers.exports import to_cvxpy, to_pulp, to_scipy, write_lp, write_model, write_mps
from heteroplan.solvers.highs import ALGORITHMS, solve_highs
from heteroplan.solvers.registry import (
    Backend,
    Capabilities,
    SolveOptions,
    backend_names,
    get_backend,
    register_backend,
)

__all__ = [
    "solve",
    "Solution",
    "SolveStatus",
    "SolveOptions",
    "Backend",
    "Capabilities",
    "register_backend",
    "get_backend",
    "backend_names",
    "to_pulp",
    "to_cvxpy",
    "to_scipy",
    "write_lp",
    "write_mps",
    "write_model",
    "BACKENDS",
]

register_backend(Backend(
    "highs",
    Capabilities(threads=True, warm_start=True, algorithms=frozenset(ALGORITHMS)),
    solve_highs,
    "HiGHS through highspy, arrays handed over in one call (the default)",
))
register_backend(Backend("scipy", Capabilities(), oracles.solve_scipy, "scipy.optimize.milp (HiGHS inside scipy)"))
register_backend(Backend("cbc", Capabilities(threads=True, warm_start=True), oracles.solve_cbc, "CBC through pulp"))
register_backend(Backend("cvxpy", Capabilities(), oracles.solve_cvxpy, "cvxpy's canonicalization, solved by its HiGHS interface"))

#: The built-in backends (see :func:`backend_names` for all registered ones).
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
        backend: a registered backend: ``"highs"`` (default), ``"scipy"``, ``"cbc"``, ``"cvxpy"``.
        time_limit: wall-clock limit (seconds). At the limit the best incumbent is returned
            with status ``TIME_LIMIT`` (``solution.has_solution`` says whether there is one).
        mip_gap: relative MIP gap at which to stop.
        threads: solver threads (HiGHS, CBC; ``None``: the backend's choice).
        relax: drop integrality (solve the LP relaxation).
        warm_start: starting values per block (HiGHS, CBC).
        algorithm: ``"auto"``; HiGHS also takes ``"simplex"``, ``"simplex-no-presolve"``,
            ``"ipm"``, ``"ipm-interior"`` (no presolve, no crossover) or ``"pdlp"``.
        verbose: show the solver log (the library is silent otherwise).

    Raises:
        InputError: ``model`` not a :class:`Model`, a warm start that is not finite values per
            block name, an unknown backend, a bad value, or an option the backend cannot honour
            (the message names the option and the backend).
    """
    model = as_model(model)
    chosen = get_backend(backend)
    options = SolveOptions(time_limit, mip_gap, threads, relax, warm_start, algorithm, verbose)
    chosen.check(model, options)
    if warm_start:
        model.pack(warm_start, field="warm_start")  # known blocks, finite values of their shapes
    solution = chosen.solve(model, options)
    if not relax:
        solution.values = integral_values(model, solution.values)
    return solution


def integral_values(model: Model, values: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """``values`` with every integer block's values as integers (``int64``, rounded to the
    nearest: a solver's ``0.9999999`` or ``-0.`` of a binary comes back as ``1`` or ``0``);
    continuous blocks, and integer blocks with values beyond 2**53, as they are."""
    out = dict(values)
    for name, block in model.variables.items():
        v = out.get(name)
        if block.integer and v is not None and v.size and np.all(np.abs(v) < 2.0**53):
            out[name] = np.rint(v).astype(np.int64)
    return out
