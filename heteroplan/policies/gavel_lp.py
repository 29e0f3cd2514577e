"""Gavel's LP family (OSDI'20) solved for time fractions ``X[j, k]``: the share of time job j
spends on GPU type k, from a (jobs, types) throughput matrix (steps/s or iterations/s).

Objectives (:class:`GavelObjective`): heterogeneity-aware max-min fairness (Gavel's default),
the same over time shares (agnostic), total throughput, finish-time fairness (bisection over
the LP's feasibility), makespan, throughput per dollar. The LPs are built in
:mod:`heteroplan.formulations.gavel`; the policies using them are in :mod:`heteroplan.policies.gavel`.
"""

from __future__ import annotations

import math
from enum import StrEnum

import numpy as np

from heteroplan.errors import InputError, SolverError
from heteroplan.formulations.gavel import (
    finish_time_fairness_model,
    max_min_fairness_model,
    max_sum_throughput_model,
    min_makespan_model,
)
from heteroplan.inputs import enum_choice
from heteroplan.milp import Model
from heteroplan.solvers import Solution, solve

__all__ = ["GavelObjective", "solve_finish_time_fairness", "solve_max_min_fairness", "solve_time_fractions"]


class GavelObjective(StrEnum):
    """The LP of Gavel's family a policy solves (its value is the name options and files use)."""

    MAX_MIN_FAIRNESS = "max_min_fairness"  # heterogeneity-aware max-min fairness (Gavel's default)
    MAX_MIN_FAIRNESS_AGNOSTIC = "max_min_fairness_agnostic"  # the same over time shares, every type alike
    MAX_SUM_THROUGHPUT = "max_sum_throughput"  # total raw throughput
    FINISH_TIME_FAIRNESS = "finish_time_fairness"  # smallest worst finish time / isolated finish time
    MIN_MAKESPAN = "min_makespan"  # every job done as early as possible
    MAX_THROUGHPUT_PER_COST = "max_throughput_per_cost"  # total throughput per dollar

    @property
    def reads_progress(self) -> bool:
        """The LP reads the jobs' remaining work, so it changes every round."""
        return self in (GavelObjective.FINISH_TIME_FAIRNESS, GavelObjective.MIN_MAKESPAN)


def _solve_x(model: Model, time_limit: float, algorithm: str, what: str) -> tuple[np.ndarray, Solution]:
    sol = solve(model, time_limit=time_limit, algorithm=algorithm)
    if not sol.has_solution:
        raise SolverError(f"Gavel {what} LP: {sol.status.value} {sol.message}")
    return np.clip(sol["X"], 0.0, 1.0), sol


def solve_max_min_fairness(
    throughputs: np.ndarray,
    scale_factors: np.ndarray,
    capacity: np.ndarray,
    weights: np.ndarray | None = None,
    two_stage: bool = True,
    time_limit: float = 30.0,
    heterogeneity_aware: bool = True,
) -> tuple[np.ndarray, float]:
    """Time fractions ``X`` (jobs, types) and the max-min level ``t`` (HiGHS simplex).

    ``two_stage`` re-solves with ``t`` held at its optimum to hand out capacity the
    bottleneck job cannot use.
    """
    model = max_min_fairness_model(throughputs, scale_factors, capacity, weights,
                                   heterogeneity_aware=heterogeneity_aware)
    x, sol = _solve_x(model, time_limit, "simplex", "max-min fairness")
    level = float(sol["t"][0])
    if two_stage:
        model2 = max_min_fairness_model(throughputs, scale_factors, capacity, weights, level * (1 - 1e-7),
                                        heterogeneity_aware=heterogeneity_aware)
        sol2 = solve(model2, time_limit=time_limit, algorithm="simplex")
        if sol2.has_solution:
            x = np.clip(sol2["X"], 0.0, 1.0)
    return x, level


def solve_finish_time_fairness(
    throughputs: np.ndarray,
    scale_factors: np.ndarray,
    capacity: np.ndarray,
    remaining_steps: np.ndarray,
    isolated_time: np.ndarray,
    elapsed: np.ndarray | None = None,
    rel_tol: float = 1e-4,
    time_limit: float = 30.0,
) -> tuple[np.ndarray, float]:
    """Time fractions ``X`` and the smallest finish-time-fairness level ``rho`` (bisection on the LP).

    ``rho`` is the worst ``(elapsed + remaining / thr) / isolated`` over the jobs at ``X``.
    """
    tp = np.asarray(throughputs, dtype=float)
    spent = np.zeros(len(tp)) if elapsed is None else np.asarray(elapsed, dtype=float)
    iso = np.asarray(isolated_time, dtype=float)
    rem = np.asarray(remaining_steps, dtype=float)

    def attempt(rho: float) -> np.ndarray | None:
        sol = solve(finish_time_fairness_model(tp, scale_factors, capacity, rem, iso, rho, spent),
                    time_limit=time_limit, algorithm="simplex")
        return np.clip(sol["X"], 0.0, 1.0) if sol.has_solution else None

    # Upper bound: any feasible allocation's worst ratio (max-min fairness is one).
    x0, _ = solve_max_min_fairness(tp, scale_factors, capacity, time_limit=time_limit)
    thr = (x0 * tp).sum(axis=1)
    if (thr <= 0).any():
        raise SolverError("Gavel finish-time fairness: a job gets no throughput under max-min fairness")
    hi = float(((spent + rem / thr) / iso).max()) * (1 + 1e-9)
    lo = float((spent / iso).max())
    best = attempt(hi)
    if best is None:  # numerically at the edge: max-min fairness's allocation reaches hi
        best = x0
    while hi - lo > rel_tol * hi:
        mid = 0.5 * (lo + hi)
        x = attempt(mid)
        if x is None:
            lo = mid
        else:
            best, hi = x, mid
    return best, hi


SAFE_THROUGHPUTS = (2.0 ** -10, 2.0 ** 20)
"""Highest throughputs (steps/s) the LPs take as given; beyond them they are rescaled (below
~1e-3 steps/s HiGHS's 1e-7 tolerances swallow the differences between jobs, above ~1e6 the
coefficients grow towards its range)."""


def _in_safe_unit(throughputs: np.ndarray, min_rates: np.ndarray | None,
                  remaining_steps: np.ndarray | None) -> tuple[np.ndarray, np.ndarray | None, np.ndarray | None]:
    """Throughputs, SLO rates and steps left, counted in a unit of ``2**k`` steps that brings the
    highest throughput near 1 when it lies outside :data:`SAFE_THROUGHPUTS` (work in epochs, or in
    FLOPs): the same time fractions, within HiGHS's range. A power of two divides exactly, and
    throughputs within the range are left as they are, so their answers stay the same to the bit.
    Arrays that are not real numbers pass unchanged: the models name what is wrong with them."""
    def numeric(values: object) -> np.ndarray | None:
        arr = np.asarray(values) if values is not None else None
        return arr if arr is not None and arr.dtype.kind in "iuf" else None

    tp = numeric(throughputs)
    top = float(tp.max()) if tp is not None and tp.size and np.isfinite(tp).all() else 0.0
    if not top > 0 or SAFE_THROUGHPUTS[0] <= top <= SAFE_THROUGHPUTS[1]:
        return throughputs, min_rates, remaining_steps
    unit = 2.0 ** round(math.log2(top))
    rates, steps = numeric(min_rates), numeric(remaining_steps)
    return (tp / unit, min_rates if rates is None else rates / unit,
            remaining_steps if steps is None else steps / unit)


def solve_time_fractions(
    objective: GavelObjective | str,
    throughputs: np.ndarray,
    scale_factors: np.ndarray,
    capacity: np.ndarray,
    remaining_steps: np.ndarray | None = None,
    isolated_time: np.ndarray | None = None,
    elapsed: np.ndarray | None = None,
    algorithm: str = "simplex",
    decimals: int | None = None,
    two_stage: bool = True,
    time_limit: float = 30.0,
    costs: np.ndarray | None = None,
    min_rates: np.ndarray | None = None,
) -> np.ndarray:
    """Time fractions ``X`` (jobs, types) of one of Gavel's objectives (:class:`GavelObjective`, or its value).

    ``costs`` ($/h per GPU of each type) is required by ``max_throughput_per_cost``;
    ``min_rates`` (steps/s per job, 0 = none) adds SLOs to it and to ``max_sum_throughput``.

    ``algorithm`` (``"simplex"``: a vertex; ``"ipm-interior"``: an interior optimum, as the
    artifact's ECOS gives) and ``decimals`` (round X) apply to ``max_sum_throughput``.
    """
    goal = enum_choice(GavelObjective, "objective", objective)
    throughputs, min_rates, remaining_steps = _in_safe_unit(throughputs, min_rates, remaining_steps)
    if goal in (GavelObjective.MAX_MIN_FAIRNESS, GavelObjective.MAX_MIN_FAIRNESS_AGNOSTIC):
        return solve_max_min_fairness(throughputs, scale_factors, capacity, two_stage=two_stage,
                                      time_limit=time_limit,
                                      heterogeneity_aware=goal is GavelObjective.MAX_MIN_FAIRNESS)[0]
    if goal in (GavelObjective.MAX_SUM_THROUGHPUT, GavelObjective.MAX_THROUGHPUT_PER_COST):
        if goal is GavelObjective.MAX_THROUGHPUT_PER_COST and costs is None:
            raise InputError("costs", costs, "max_throughput_per_cost needs $/h per GPU of each type")
        model = max_sum_throughput_model(throughputs, scale_factors, capacity, costs=costs, min_rates=min_rates)
        x, _ = _solve_x(model, time_limit, algorithm, goal.value.replace("_", "-"))
    elif goal is GavelObjective.MIN_MAKESPAN:
        x, _ = _solve_x(min_makespan_model(throughputs, scale_factors, capacity, remaining_steps), time_limit,
                        "simplex", "min-makespan")
    else:
        x, _ = solve_finish_time_fairness(throughputs, scale_factors, capacity, remaining_steps, isolated_time,
                                          elapsed, time_limit=time_limit)
    return np.round(x, decimals) if decimals is not None else x
