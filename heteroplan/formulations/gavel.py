"""Gavel's (OSDI'20) policy family as LPs over one throughput matrix of time fractions.

Variables ``X[j, k]`` in [0, 1]: fraction of time job j spends on GPU type k (all its
``scale_j`` workers on type k). Effective throughput ``sum_k T[j, k] X[j, k]`` (steps/s).
Every model shares the constraints

    sum_k X[j,k] <= 1                   for every job j   (time)
    sum_j scale_j X[j,k] <= C_k         for every type k  (capacity, GPUs)
    X[j,k] = 0 where T[j,k] = 0 or scale_j > C_k

and differs in its objective:

* :func:`max_min_fairness_model` -- maximize ``t`` with ``t <= sum_k T[j,k] X[j,k] / (norm_j w_j)``,
  ``norm_j = mean_k T[j,k]`` (Gavel's X^equal up to a common factor). Heterogeneity-agnostic
  (``heterogeneity_aware=False``): every usable type counts alike, ``t <= sum_k X[j,k] / w_j``.
  With ``min_level``: keep ``t >= min_level`` and maximize the sum of the levels (second stage).
* :func:`max_sum_throughput_model` -- maximize ``sum_j w_j sum_k T[j,k] X[j,k]`` (raw
  throughput, no normalisation: the Sia artifact's "gavel"); with ``costs`` throughput per
  dollar, with ``min_rates`` SLO rows ``sum_k T[j,k] X[j,k] >= r_j`` (Gavel's cost with SLOs).
* :func:`min_makespan_model` -- maximize ``z`` with ``sum_k T[j,k] X[j,k] >= R_j z`` (``R_j``
  steps left): every job finishes by ``1 / z`` seconds at these rates, the makespan.
* :func:`finish_time_fairness_model` -- feasibility at a finish-time-fairness level ``rho``:
  ``elapsed_j + R_j / thr_j <= rho * isolated_j``, i.e. ``thr_j >= R_j / (rho isolated_j -
  elapsed_j)``; the smallest feasible ``rho`` (found by bisection by the caller) is Gavel's
  finish-time fairness optimum. Among the allocations at ``rho`` it maximizes total throughput.
"""

from __future__ import annotations

import math

import numpy as np

from heteroplan.errors import InputError
from heteroplan.inputs import real_value
from heteroplan.milp import Model
from heteroplan.milp.args import numbers_array

__all__ = [
    "max_min_fairness_model",
    "max_sum_throughput_model",
    "min_makespan_model",
    "finish_time_fairness_model",
    "normalized_throughputs",
]


def normalized_throughputs(throughputs: np.ndarray, weights: np.ndarray | None = None) -> np.ndarray:
    """``T[j, k] / (mean_k T[j, k] * w_j)`` — the objective coefficients."""
    tp = np.asarray(throughputs, dtype=float)
    norm = tp.mean(axis=1)
    w = np.ones(len(tp)) if weights is None else np.asarray(weights, dtype=float)
    return tp / (norm * w)[:, None]


def _time_fractions(
    name: str, throughputs: np.ndarray, scale_factors: np.ndarray, capacity: np.ndarray,
    weights: np.ndarray | None = None,
) -> tuple[Model, object, np.ndarray, np.ndarray, np.ndarray]:
    """Validate the inputs; a model with ``X`` and its time and capacity constraints.

    Returns ``(model, X, throughputs with unusable entries zeroed, usable mask, weights)``.
    """
    tp = numbers_array("throughputs", throughputs)  # strings and complex numbers refused, not cast
    if tp.ndim != 2:
        raise InputError("throughputs.shape", tp.shape, "must be (jobs, types)")
    num_jobs, num_types = tp.shape
    scale = numbers_array("scale_factors", scale_factors).reshape(-1)
    cap = numbers_array("capacity", capacity).reshape(-1)
    if scale.shape != (num_jobs,):
        raise InputError("scale_factors.shape", scale.shape, f"must be ({num_jobs},)")
    if cap.shape != (num_types,):
        raise InputError("capacity.shape", cap.shape, f"must be ({num_types},)")
    if not np.isfinite(tp).all() or (tp < 0).any():
        raise InputError("throughputs", tp[~(np.isfinite(tp) & (tp >= 0))][:3], "must be finite and >= 0")
    if not (scale >= 1).all():  # NaN too (it was named as a job that cannot run)
        raise InputError("scale_factors", scale[~(scale >= 1)][:3], "must be >= 1")
    if not (np.isfinite(cap) & (cap >= 0)).all():
        raise InputError("capacity", cap, "must be finite and >= 0")
    w = np.ones(num_jobs) if weights is None else numbers_array("weights", weights).reshape(-1)
    if w.shape != (num_jobs,) or not (w > 0).all():
        raise InputError("weights", weights, f"must be ({num_jobs},) numbers > 0")
    usable = (tp > 0) & (scale[:, None] <= cap[None, :])
    dead = np.flatnonzero(~usable.any(axis=1))
    if dead.size:
        raise InputError(
            f"throughputs[{int(dead[0])}]", tp[dead[0]].tolist(), "job cannot run on any GPU type that fits it"
        )
    m = Model(name)
    x = m.add_variables("X", (num_jobs, num_types), lb=0.0, ub=usable.astype(float))
    m.add_constraints(x.sum(axis=1) <= 1, name="time")
    m.add_constraints((x * scale[:, None]).sum(axis=0) <= cap, name="capacity")
    return m, x, np.where(usable, tp, 0.0), usable, w


def _per_job(values: np.ndarray | None, num_jobs: int, field: str, default: float | None = None) -> np.ndarray:
    if values is None:
        if default is None:
            raise InputError(field, values, f"must be given for the {num_jobs} jobs")
        return np.full(num_jobs, default)
    arr = numbers_array(field, values).reshape(-1)
    if arr.shape != (num_jobs,) or not np.isfinite(arr).all() or (arr < 0).any():
        raise InputError(field, values, f"must be ({num_jobs},) finite numbers >= 0")
    return arr


def max_min_fairness_model(
    throughputs: np.ndarray,
    scale_factors: np.ndarray,
    capacity: np.ndarray,
    weights: np.ndarray | None = None,
    min_level: float | None = None,
    heterogeneity_aware: bool = True,
) -> Model:
    """Gavel's max-min fairness LP (see module docstring).

    Args:
        throughputs: ``(jobs, types)`` steps/s of each job with its scale factor on each type.
        scale_factors: ``(jobs,)`` GPUs each job uses at a time.
        capacity: ``(types,)`` GPUs of each type.
        weights: ``(jobs,)`` priority weights (default 1).
        min_level: second stage: keep ``t >= min_level`` and maximize total normalized throughput.
        heterogeneity_aware: ``False``: every usable type is worth the same to a job (Gavel's
            heterogeneity-agnostic max-min fairness over time shares).

    Blocks: ``X`` (jobs, types), ``t`` (scalar).
    """
    if not isinstance(heterogeneity_aware, bool):  # "no" was taken as True
        raise InputError("heterogeneity_aware", heterogeneity_aware, "must be True or False")
    if min_level is not None and not math.isfinite(real_value(min_level)):  # "x" was a ValueError from float()
        raise InputError("min_level", min_level, "must be a finite number or None")
    m, x, tp, usable, w = _time_fractions("gavel_max_min_fairness", throughputs, scale_factors, capacity, weights)
    coef = normalized_throughputs(tp, w) if heterogeneity_aware else usable / w[:, None]
    t = m.add_variables("t", (1,), lb=0.0)
    level = (x * coef).sum(axis=1)
    m.add_constraints(level - t.broadcast_to((len(tp),)) >= 0, name="fairness")
    if min_level is None:
        m.maximize(t.sum())
    else:
        m.add_constraints(t >= float(min_level), name="keep_level")
        m.maximize(level.sum())
    return m


def max_sum_throughput_model(
    throughputs: np.ndarray, scale_factors: np.ndarray, capacity: np.ndarray, weights: np.ndarray | None = None,
    costs: np.ndarray | None = None, min_rates: np.ndarray | None = None,
) -> Model:
    """Maximize total raw throughput ``sum_j w_j sum_k T[j,k] X[j,k] / cost_k``; block ``X``.

    Args:
        costs: ``(types,)`` $/h per GPU of each type (> 0): throughput per dollar (Gavel's
            cost policy); default 1 (raw throughput, the Sia artifact's "gavel").
        min_rates: ``(jobs,)`` steps/s each job must get (its SLO: steps left / seconds to its
            deadline; 0 = none). An unreachable SLO makes the model infeasible.
    """
    m, x, tp, _, w = _time_fractions("gavel_max_sum_throughput", throughputs, scale_factors, capacity, weights)
    price = np.ones(tp.shape[1]) if costs is None else numbers_array("costs", costs).reshape(-1)
    if price.shape != (tp.shape[1],) or not (np.isfinite(price) & (price > 0)).all():
        raise InputError("costs", costs, f"must be ({tp.shape[1]},) prices > 0 ($/h per GPU)")
    if min_rates is not None:
        need = _per_job(min_rates, len(tp), "min_rates")
        slo = need > 0
        if slo.any():
            m.add_constraints((x * tp).sum(axis=1)[np.flatnonzero(slo)] >= need[slo], name="slo")
    m.maximize((x * (tp * w[:, None] / price[None, :])).sum())
    return m


def min_makespan_model(
    throughputs: np.ndarray, scale_factors: np.ndarray, capacity: np.ndarray, remaining_steps: np.ndarray,
) -> Model:
    """Minimize the makespan ``1 / z`` (seconds): maximize ``z`` with ``thr_j >= R_j z``; blocks ``X``, ``z``.

    ``remaining_steps``: ``(jobs,)`` steps each job has left (> 0).
    """
    m, x, tp, _, _ = _time_fractions("gavel_min_makespan", throughputs, scale_factors, capacity)
    rem = _per_job(remaining_steps, len(tp), "remaining_steps")
    if (rem <= 0).any():
        raise InputError("remaining_steps", rem[rem <= 0][:3].tolist(), "must be > 0 steps")
    z = m.add_variables("z", (1,), lb=0.0)
    m.add_constraints((x * tp).sum(axis=1) - z.broadcast_to((len(tp),)) * rem >= 0, name="finish")
    m.maximize(z.sum())
    return m


def finish_time_fairness_model(
    throughputs: np.ndarray,
    scale_factors: np.ndarray,
    capacity: np.ndarray,
    remaining_steps: np.ndarray,
    isolated_time: np.ndarray,
    rho: float,
    elapsed: np.ndarray | None = None,
) -> Model:
    """Allocations whose finish-time fairness is at most ``rho``; maximizes total throughput. Block ``X``.

    Args:
        remaining_steps: ``(jobs,)`` steps left.
        isolated_time: ``(jobs,)`` seconds the job would take in isolation (its fair share) from arrival.
        rho: the fairness level (finish time / isolated finish time), > 0.
        elapsed: ``(jobs,)`` seconds since each job arrived (default 0).

    A job that cannot finish in ``rho * isolated - elapsed`` seconds makes the model infeasible.
    """
    m, x, tp, _, _ = _time_fractions("gavel_finish_time_fairness", throughputs, scale_factors, capacity)
    n = len(tp)
    rem = _per_job(remaining_steps, n, "remaining_steps")
    iso = _per_job(isolated_time, n, "isolated_time")
    if (iso <= 0).any():
        raise InputError("isolated_time", iso[iso <= 0][:3].tolist(), "must be > 0 seconds")
    spent = _per_job(elapsed, n, "elapsed", default=0.0)
    if not (math.isfinite(real_value(rho)) and real_value(rho) > 0):  # "x" was a TypeError from np.isfinite
        raise InputError("rho", rho, "must be a number > 0")
    slack = rho * iso - spent  # seconds left to finish within the level
    need = np.where(slack > 0, rem / np.where(slack > 0, slack, 1.0), np.inf)  # steps/s
    if not np.isfinite(need).all():
        need = np.where(np.isfinite(need), need, tp.sum(axis=1) + 1.0)  # unreachable: infeasible
    m.add_constraints((x * tp).sum(axis=1) >= need, name="fairness")
    m.maximize((x * tp).sum())
    return m
