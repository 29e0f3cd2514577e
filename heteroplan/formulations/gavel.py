"""Gavel's heterogeneity-aware max-min fairness as an LP over time fractions.

Variables ``X[j, k]`` in [0, 1]: fraction of time job j spends on GPU type k (all its
``scale_j`` workers on type k). Effective throughput ``sum_k T[j, k] X[j, k]`` (steps/s),
normalized by ``norm_j`` = the job's throughput when it time-shares the types equally
(``mean_k T[j, k]``; Gavel's X^equal up to a factor common to all jobs) and divided by the
job's priority weight. The LP

    maximize  t
    s.t.      t <= sum_k (T[j,k] / (norm_j * w_j)) X[j,k]   for every job j
              sum_k X[j,k] <= 1                             for every job j
              sum_j scale_j X[j,k] <= C_k                   for every type k
              X[j,k] = 0 where T[j,k] = 0 or scale_j > C_k

is Gavel's max-min fairness policy. With ``min_level`` the model instead keeps
``t >= min_level`` and maximizes the sum of normalized throughputs (second stage, so that
capacity the bottleneck job cannot use is not left idle).
"""

from __future__ import annotations

import numpy as np

from heteroplan.errors import InputError
from heteroplan.milp import Model

__all__ = ["max_min_fairness_model", "normalized_throughputs"]


def normalized_throughputs(throughputs: np.ndarray, weights: np.ndarray | None = None) -> np.ndarray:
    """``T[j, k] / (mean_k T[j, k] * w_j)`` — the objective coefficients."""
    tp = np.asarray(throughputs, dtype=float)
    norm = tp.mean(axis=1)
    w = np.ones(len(tp)) if weights is None else np.asarray(weights, dtype=float)
    return tp / (norm * w)[:, None]


def max_min_fairness_model(
    throughputs: np.ndarray,
    scale_factors: np.ndarray,
    capacity: np.ndarray,
    weights: np.ndarray | None = None,
    min_level: float | None = None,
) -> Model:
    """Build Gavel's max-min fairness LP (see module docstring).

    Args:
        throughputs: ``(jobs, types)`` steps/s of each job with its scale factor on each type.
        scale_factors: ``(jobs,)`` GPUs each job uses at a time.
        capacity: ``(types,)`` GPUs of each type.
        weights: ``(jobs,)`` priority weights (default 1).
        min_level: second stage: keep ``t >= min_level`` and maximize total normalized throughput.

    Blocks: ``X`` (jobs, types), ``t`` (scalar).
    """
    tp = np.asarray(throughputs, dtype=float)
    if tp.ndim != 2:
        raise InputError("throughputs.shape", tp.shape, "must be (jobs, types)")
    num_jobs, num_types = tp.shape
    scale = np.asarray(scale_factors, dtype=float).reshape(-1)
    cap = np.asarray(capacity, dtype=float).reshape(-1)
    if scale.shape != (num_jobs,):
        raise InputError("scale_factors.shape", scale.shape, f"must be ({num_jobs},)")
    if cap.shape != (num_types,):
        raise InputError("capacity.shape", cap.shape, f"must be ({num_types},)")
    if not np.isfinite(tp).all() or (tp < 0).any():
        raise InputError("throughputs", tp[~(np.isfinite(tp) & (tp >= 0))][:3], "must be finite and >= 0")
    if (scale < 1).any():
        raise InputError("scale_factors", scale[scale < 1][:3], "must be >= 1")
    if (cap < 0).any():
        raise InputError("capacity", cap, "must be >= 0")
    if weights is not None and (np.asarray(weights) <= 0).any():
        raise InputError("weights", weights, "must be > 0")
    usable = (tp > 0) & (scale[:, None] <= cap[None, :])
    dead = np.flatnonzero(~usable.any(axis=1))
    if dead.size:
        raise InputError(
            f"throughputs[{int(dead[0])}]", tp[dead[0]].tolist(), "job cannot run on any GPU type that fits it"
        )
    coef = normalized_throughputs(np.where(usable, tp, 0.0), weights)
    m = Model("gavel_max_min_fairness")
    x = m.add_variables("X", (num_jobs, num_types), lb=0.0, ub=usable.astype(float))
    t = m.add_variables("t", (1,), lb=0.0)
    level = (x * coef).sum(axis=1)
    m.add_constraints(level - t.broadcast_to((num_jobs,)) >= 0, name="fairness")
    m.add_constraints(x.sum(axis=1) <= 1, name="time")
    m.add_constraints((x * scale[:, None]).sum(axis=0) <= cap, name="capacity")
    if min_level is None:
        m.maximize(t.sum())
    else:
        m.add_constraints(t >= float(min_level), name="keep_level")
        m.maximize(level.sum())
    return m
