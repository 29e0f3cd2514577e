"""The order in which Hadar plans the active jobs each round (earlier ones get the cheaper GPUs).

Units: slots (of ``slot`` seconds), estimator work units, GPUs.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from enum import Enum

import numpy as np

from heteroplan.formulations.hadar import density_bounds, makespan_bound_lp, pace_slots
from heteroplan.policies.base import JobState
from heteroplan.policies.hadar_state import ClusterIndex
from heteroplan.solvers import solve

__all__ = ["Order", "critical_slots", "plan_order"]

RatesOf = Callable[[JobState], np.ndarray]  # a job's rate per GPU type (estimator units/s)


class Order(Enum):
    """The order in which REPLAN plans the active jobs each round (earlier ones get the cheaper GPUs)."""

    SHORTEST_FIRST = "shortest"  # least remaining time on the fastest type (SRPT: avg JCT)
    DENSEST_FIRST = "densest"  # highest utility per GPU-slot at the best pace (the primal-dual greedy)
    # jobs that set the makespan first (longest first), the others shortest first: see critical_slots
    CRITICAL_FIRST = "critical"


def plan_order(order: Order, jobs: Sequence[JobState], index: ClusterIndex, rates_of: RatesOf,
               slot: float) -> list[JobState]:
    """``jobs`` in the order ``order`` plans them (ties: arrival, then job id)."""
    critical = critical_slots(index, jobs, rates_of, slot) if order is Order.CRITICAL_FIRST else {}

    def priority(job: JobState) -> float:  # smaller plans first
        rates, remaining = rates_of(job), float(job.remaining_work)
        if order in (Order.SHORTEST_FIRST, Order.CRITICAL_FIRST):  # remaining slots on the fastest type
            best = float(rates.max())
            return remaining / (slot * best) if best > 0 else math.inf
        if remaining <= 0 or not (rates > 0).any():
            return math.inf
        n = pace_slots(np.array([remaining]), rates[None, :], slot)
        return -density_bounds(n, np.array([job.requested_gpus]))[1]

    return sorted(jobs, key=lambda j: (-critical.get(j.job_id, -math.inf), priority(j), j.arrival_time, j.job_id))


def critical_slots(index: ClusterIndex, jobs: Sequence[JobState], rates_of: RatesOf, slot: float) -> dict[str, float]:
    """Remaining solo slots of the jobs that set the makespan (``Order.CRITICAL_FIRST``).

    No schedule ends before ``now + max(T, max_j s_j)``: ``s_j`` is job j's remaining time
    alone on its fastest type, ``T`` the time the GPUs need for all the remaining work
    (:func:`~heteroplan.formulations.hadar.makespan_bound_lp`). A job with ``s_j >= T``
    can set the makespan: each slot it waits adds a slot to that bound, while the other
    jobs can wait without extending it. Such jobs are planned first, longest first (LPT).
    """
    cap = index.cluster.capacity()
    capacity = np.array([cap[k] for k in index.types], dtype=float)
    live = [j for j in jobs if float(j.remaining_work) > 0]
    if not live:
        return {}
    rates = np.stack([rates_of(j) for j in live])
    w = np.array([j.requested_gpus for j in live], dtype=float)
    rates = np.where(capacity[None, :] >= w[:, None], rates, 0.0)
    work = np.array([float(j.remaining_work) for j in live])
    best = rates.max(axis=1)
    ok = best > 0
    if not ok.any():
        return {}
    solo = np.where(ok, work / np.where(ok, best, 1.0), 0.0)  # s
    volume = float((w * solo).sum() / capacity.sum())  # GPU-seconds over all GPUs: below T
    if solo.max() < volume:
        return {}
    # The same LP, scaled: each job's row divided by its best rate (coefficients in [0, 1]) and time
    # counted in units of the longest solo time (right-hand sides in (0, 1]), so that a model's
    # goodput in any unit (1e-30 or 1e30 work/s) stays within HiGHS's range.
    unit = float(solo.max())  # s
    sol = solve(makespan_bound_lp(solo[ok] / unit, rates[ok] / best[ok, None], w[ok], capacity), time_limit=10.0)
    scaled = sol.objective
    bound = float(scaled) * unit if scaled is not None and math.isfinite(scaled) else volume
    return {j.job_id: float(solo[i]) / slot for i, j in enumerate(live) if ok[i] and solo[i] >= bound * (1 - 1e-9)}
