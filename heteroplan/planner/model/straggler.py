"""Expected iteration time of data-parallel replicas whose speed varies (stragglers).

Each rank's compute over one iteration is slowed or sped up by a factor ``1 + e``, ``e`` normal
with standard deviation ``cv`` (:attr:`SimConfig.straggler_cv`), independently per rank. Data-
parallel replicas meet once per iteration, in the gradient all-reduce, so an iteration ends
with the slowest replica: its expected time is the expected maximum of the replicas' normal
times, by Clark's (1961) moment matching (exact for two; a maximum over more is taken two at a
time, each intermediate maximum treated as normal again). A replica's spread is that of its
bottleneck stage over the steady state plus its fill and drain. Two balanced replicas lose
``cv / sqrt(pi)`` (0.564 ``cv``) of their compute; a replica with slack costs nothing.

Pipeline stages are not maximised over: they hand over a microbatch at every step with some
in flight (1F1B), and on measured runs (docs/runtime.md) two-stage pipelines ran as their
transfers predict while two data-parallel replicas lost 10-30%.

Units: any (seconds in the simulator); arrays are reduced along axis 0.
"""

from __future__ import annotations

import numpy as np
from scipy.special import ndtr

from heteroplan.planner.model.terms import one_f_one_b_s

__all__ = ["clark_max", "pipeline_times"]

_INV_SQRT_2PI = 1.0 / np.sqrt(2.0 * np.pi)


def clark_max(means: np.ndarray, sds: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Mean and standard deviation of the maximum, along axis 0, of independent normals.

    Exact for two variables (Clark 1961); for more, the running maximum is treated as normal.
    With all ``sds`` 0 it is the plain maximum. Shapes: ``(n, ...)`` in, ``(...)`` out.
    """
    means = np.asarray(means, dtype=float)
    sds = np.asarray(sds, dtype=float)
    mu, sd = means[0], sds[0]
    for mu2, sd2 in zip(means[1:], sds[1:], strict=True):
        theta = np.hypot(sd, sd2)
        safe = np.where(theta > 0, theta, 1.0)
        with np.errstate(over="ignore"):  # a tiny spread: +-inf, clipped; beyond 40 one is surely the larger
            alpha = np.clip((mu - mu2) / safe, -40.0, 40.0)
        p, q = ndtr(alpha), ndtr(-alpha)
        pdf = np.exp(-0.5 * alpha**2) * _INV_SQRT_2PI
        mean = mu * p + mu2 * q + theta * pdf
        second = (mu**2 + sd**2) * p + (mu2**2 + sd2**2) * q + (mu + mu2) * theta * pdf
        var = np.maximum(second - mean**2, 0.0)
        deterministic = theta == 0
        mu = np.where(deterministic, np.maximum(mu, mu2), mean)
        sd = np.where(deterministic, np.where(mu2 > mu, sd2, sd), np.sqrt(var))
    return mu, sd


def pipeline_times(
    compute: np.ndarray, step: np.ndarray, fixed: np.ndarray, microbatches: np.ndarray, cv: float,
) -> tuple[np.ndarray, np.ndarray]:
    """Mean and standard deviation of each pipeline replica's seconds under 1F1B.

    Args:
        compute: ``(S, D)`` forward + backward seconds per microbatch of stage ``s`` in replica ``d``.
        step: ``(S, D)`` steady-state seconds per microbatch of each stage (compute + transfers).
        fixed: ``(D,)`` seconds of fill and drain: ``sum_s compute + 2 sum_s transfers``.
        microbatches: ``(D,)`` microbatches per replica.
        cv: coefficient of variation of a rank's compute time over an iteration (0: none).

    Returns ``(mean, sd)``, ``(D,)`` each: the mean is ``(M - 1) max_s step_s + fixed``; the
    spread is ``cv`` times the bottleneck stage's compute over the steady state plus the fill
    and drain's compute (taken as moving together: exact for one stage). Feed them to
    :func:`clark_max` for the slowest replica.
    """
    micro = np.asarray(microbatches, dtype=float)
    bottleneck = step.argmax(axis=0)
    mean = one_f_one_b_s(micro, step.max(axis=0), fixed)
    busy = compute[bottleneck, np.arange(step.shape[1])]
    sd = cv * ((micro - 1) * busy + np.sqrt((compute**2).sum(axis=0)))
    return mean, sd
