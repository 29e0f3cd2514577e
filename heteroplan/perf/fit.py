"""Fit :class:`ThroughputParams` to observed steps.

Bounded least squares (``scipy.optimize.least_squares``) on the log error of the step time
(every observation) and of the sync time (multi-GPU observations), plus a mild ridge prior
that pulls each free parameter (in log space) towards a data-derived guess; it matters only
where the data cannot tell parameters apart (e.g. one local batch size).

Parameters without supporting data are held, not fitted:

* no multi-GPU data: sync parameters and gamma come from ``fallback`` (default: no sync);
* multi-GPU data on one node only: inter-node = intra-node parameters;
* multi-node data only: intra-node = inter-node parameters.
"""

from __future__ import annotations

import numpy as np
from scipy.optimize import least_squares

from heteroplan.errors import InputError
from heteroplan.perf.measurements import Measurements
from heteroplan.perf.throughput import ThroughputParams

__all__ = ["fit_throughput_params", "fit_compute"]

_LOG_LO, _LOG_HI = np.log(1e-9), np.log(1e4)
_GAMMA_LO, _GAMMA_HI = 1.0, 10.0
_NAMES = ("alpha_c", "beta_c", "alpha_r", "beta_r", "alpha_n", "beta_n", "gamma")


def fit_compute(local_bsz: np.ndarray, step_time: np.ndarray) -> tuple[float, float]:
    """``(alpha_c, beta_c)`` of ``step = alpha_c + beta_c * m`` by non-negative least squares.

    Used for 1-GPU profiles and as the starting point of the full fit.
    """
    m = np.asarray(local_bsz, dtype=float)
    t = np.asarray(step_time, dtype=float)
    if len(np.unique(m)) < 2:
        # One batch size cannot separate the fixed from the per-sample cost: split evenly.
        mean_t = float(np.mean(t))
        return mean_t / 2, mean_t / (2 * float(np.mean(m)))
    b, a = np.polyfit(m, t, 1)
    if a <= 0 or b <= 0:
        # Clip to the feasible region and re-solve the remaining one-parameter problem.
        if b <= 0:
            return float(max(np.mean(t), 1e-9)), 1e-9
        b = float(np.sum(m * t) / np.sum(m * m))
        return 1e-9, max(b, 1e-9)
    return float(a), float(b)


def _initial_guess(meas: Measurements) -> np.ndarray:
    one = meas.num_gpus == 1
    sel = one if np.count_nonzero(one) >= 2 else np.ones(len(meas), bool)
    t_comp = meas.step_time[sel] - np.where(meas.num_gpus[sel] > 1, meas.sync_time[sel], 0.0)
    a, b = fit_compute(meas.local_bsz[sel], np.maximum(t_comp, 1e-6))
    multi = meas.num_gpus > 1
    intra = multi & (meas.num_nodes == 1)
    inter = multi & (meas.num_nodes > 1)
    guess = [a, b]
    for mask in (intra, inter):
        src = mask if mask.any() else multi
        if src.any():
            sync = np.maximum(meas.sync_time[src], 1e-6)
            ar = float(np.median(sync[meas.num_gpus[src] <= 2])) if np.any(
                meas.num_gpus[src] <= 2) else float(np.min(sync))
            br = max(float(np.median(sync)) - ar, 0.0) / max(
                float(np.median(np.maximum(meas.num_gpus[src] - 2, 1))), 1.0)
            guess += [max(ar, 1e-6), max(br, 1e-6)]
        else:
            guess += [0.0, 0.0]
    guess.append(1.5)
    return np.array(guess)


def fit_throughput_params(
    meas: Measurements,
    init: ThroughputParams | None = None,
    fallback: ThroughputParams | None = None,
    prior_weight: float = 0.05,
    sync_weight: float = 0.0,
) -> ThroughputParams:
    """Fit the throughput model to ``meas``.

    Args:
        meas: observed steps (at least one).
        init: warm start (e.g. the previous fit when new observations arrive).
        fallback: values of parameters the data cannot support (see module doc);
            defaults to zero sync cost and gamma = 1.
        prior_weight: weight of the ridge prior on log-parameters (relative to one residual).

    Returns:
        The fitted parameters.
    """
    if not isinstance(meas, Measurements):
        raise InputError("meas", type(meas).__name__, "must be a Measurements")
    if len(meas) == 0:
        raise InputError("meas", 0, "need at least one observation to fit")
    if not prior_weight >= 0:
        raise InputError("prior_weight", prior_weight, "must be >= 0")
    n_nodes, k, m = meas.num_nodes, meas.num_gpus, meas.local_bsz
    multi = k > 1
    intra = multi & (n_nodes == 1)
    inter = multi & (n_nodes > 1)
    guess = _initial_guess(meas)
    fb = (fallback or ThroughputParams(guess[0], guess[1])).as_array()

    # Which of the 7 parameters are free; others are fixed or tied to another index.
    free = [0, 1]
    tie: dict[int, int] = {}
    fixed: dict[int, float] = {}
    if intra.any():
        free += [2, 3]
    if inter.any():
        free += [4, 5]
    if intra.any() and not inter.any():
        tie.update({4: 2, 5: 3})
    elif inter.any() and not intra.any():
        tie.update({2: 4, 3: 5})
    if multi.any():
        free.append(6)
    else:
        fixed.update({i: fb[i] for i in (2, 3, 4, 5, 6)})

    start = guess.copy()
    if init is not None:
        start = np.where(init.as_array() > 0, init.as_array(), guess)
        start[:6] = np.maximum(start[:6], 1e-9)
    is_gamma = np.array([i == 6 for i in free])
    x0 = np.where(is_gamma, start[free], np.log(np.maximum(start[free], 1e-9)))
    center = np.where(is_gamma, 1.0, np.log(np.maximum(guess[free], 1e-9)))
    lo = np.where(is_gamma, _GAMMA_LO, _LOG_LO)
    hi = np.where(is_gamma, _GAMMA_HI, _LOG_HI)
    x0 = np.clip(x0, lo + 1e-9, hi - 1e-9)

    # Rows with equal (nodes, GPUs, local batch) collapse into one residual weighted by
    # sqrt(count) on their mean log time: the same objective, fewer rows.
    keys = np.stack([n_nodes, k, m], axis=1)
    uniq, inverse, counts = np.unique(keys, axis=0, return_inverse=True, return_counts=True)
    inverse = inverse.ravel()
    u_nodes, u_k, u_m = uniq[:, 0], uniq[:, 1], uniq[:, 2]
    weight = np.sqrt(counts)
    log_step = np.bincount(inverse, np.log(meas.step_time)) / counts
    has_sync = multi & (meas.sync_time > 0)
    sync_counts = np.bincount(inverse, has_sync.astype(float), minlength=len(uniq))
    sync_rows = sync_counts > 0
    log_sync = (np.bincount(inverse, np.where(has_sync, np.log(np.maximum(meas.sync_time, 1e-12)),
                                               0.0), minlength=len(uniq))[sync_rows]
                / sync_counts[sync_rows])
    sync_w = sync_weight * np.sqrt(sync_counts[sync_rows])
    u_multi = u_k > 1
    u_one_node = u_nodes <= 1
    extra = np.maximum(u_k - 2.0, 0.0)
    free_idx = np.array(free)
    # Column map: full parameter i takes its value (and gradient) from free column col[i].
    col = np.full(7, -1)
    col[free_idx] = np.arange(len(free))
    for i, j in tie.items():
        col[i] = col[j]

    def unpack(x: np.ndarray) -> np.ndarray:
        p = np.empty(7)
        p[free_idx] = np.where(is_gamma, x, np.exp(x))
        for i, v in fixed.items():
            p[i] = v
        for i, j in tie.items():
            p[i] = p[j]
        return p

    def model(x: np.ndarray):
        p = unpack(x)
        t_grad = p[0] + p[1] * u_m
        t_sync = np.where(u_one_node, p[2] + p[3] * extra, p[4] + p[5] * extra)
        t_sync = np.where(u_multi, t_sync, 0.0)
        g = p[6]
        top = np.maximum(t_grad, t_sync)
        u = t_grad / top
        v = t_sync / top
        ug, vg = u**g, v**g
        s = ug + vg
        log_t = np.log(top) + np.log(s) / g
        return p, t_grad, t_sync, u, v, ug, vg, s, log_t

    def residuals(x: np.ndarray) -> np.ndarray:
        p, t_grad, t_sync, *_, log_t = model(x)
        return np.concatenate([
            weight * (log_t - log_step),
            sync_w * (np.log(t_sync[sync_rows]) - log_sync),
            prior_weight * (x - center),
        ])

    def jacobian(x: np.ndarray) -> np.ndarray:
        p, t_grad, t_sync, u, v, ug, vg, s, log_t = model(x)
        g = p[6]
        t_step = np.exp(log_t)
        d_grad = (t_grad / t_step) ** (g - 1) / t_step
        d_sync = np.where(u_multi, (t_sync / t_step) ** (g - 1) / t_step, 0.0)
        full = np.zeros((len(uniq), 7))
        full[:, 0] = d_grad * p[0]
        full[:, 1] = d_grad * p[1] * u_m
        full[:, 2] = np.where(u_one_node, d_sync * p[2], 0.0)
        full[:, 3] = np.where(u_one_node, d_sync * p[3] * extra, 0.0)
        full[:, 4] = np.where(u_one_node, 0.0, d_sync * p[4])
        full[:, 5] = np.where(u_one_node, 0.0, d_sync * p[5] * extra)
        with np.errstate(divide="ignore", invalid="ignore"):
            ulog = np.where(u > 0, ug * np.log(np.where(u > 0, u, 1.0)), 0.0)
            vlog = np.where(v > 0, vg * np.log(np.where(v > 0, v, 1.0)), 0.0)
        full[:, 6] = -np.log(s) / g**2 + (ulog + vlog) / (g * s)
        sync_full = np.zeros((int(sync_rows.sum()), 7))
        ts = t_sync[sync_rows]
        one = u_one_node[sync_rows]
        ex = extra[sync_rows]
        sync_full[:, 2] = np.where(one, p[2] / ts, 0.0)
        sync_full[:, 3] = np.where(one, p[3] * ex / ts, 0.0)
        sync_full[:, 4] = np.where(one, 0.0, p[4] / ts)
        sync_full[:, 5] = np.where(one, 0.0, p[5] * ex / ts)
        jac = np.zeros((len(uniq) + len(ts) + len(free), len(free)))
        top_rows = np.concatenate([weight[:, None] * full, sync_w[:, None] * sync_full])
        for i in range(7):
            if col[i] >= 0:
                jac[: len(top_rows), col[i]] += top_rows[:, i]
        jac[len(top_rows):, :] = prior_weight * np.eye(len(free))
        return jac

    result = least_squares(residuals, x0, jac=jacobian, bounds=(lo, hi), method="trf",
                           x_scale=1.0, xtol=1e-6, ftol=1e-6, max_nfev=200)
    p = unpack(result.x)
    p[6] = max(p[6], 1.0)
    return ThroughputParams(*(float(v) for v in p))
