"""Fit :class:`ThroughputParams` to observed steps.

Least squares on the log error of the step time (and, if weighted, of the sync time) plus a
mild ridge prior that pulls each free parameter towards a data-derived guess (or a given
``prior``, e.g. a projection from another GPU type); the prior matters only where the data
cannot tell parameters apart (e.g. one local batch size). The bounds of the model (times
>= 0, gamma >= 1) are built into the parameterization -- alpha, beta as logs and
``gamma = 1 + softplus(z)`` -- so the unconstrained Levenberg-Marquardt solver of
``scipy.optimize.least_squares(method="lm")`` (MINPACK) applies, with an analytic Jacobian.
It matches the bounded trust-region solver's hold-out accuracy at about twice its speed.

Parameters without supporting data are held, not fitted:

* no multi-GPU data: sync parameters and gamma come from ``fallback`` (default: no sync);
* multi-GPU data on one node only: inter-node = intra-node parameters;
* multi-node data only: intra-node = inter-node parameters.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

import numpy as np
from scipy.special import expit

from heteroplan.errors import InputError
from heteroplan.inputs import enum_choice, finite_number
from heteroplan.lru import LRUCache
from heteroplan.perf.measurements import Measurements
from heteroplan.perf.throughput import ThroughputParams

__all__ = ["fit_throughput_params", "fit_compute", "clear_fit_cache", "MissingSync"]


class MissingSync(StrEnum):
    """The sync parameters of the side of the node boundary without multi-GPU data: ``TIE`` them
    to the fitted side's, or hold them at the ``fallback`` (``FALLBACK``, when one is given)."""

    TIE = "tie"
    FALLBACK = "fallback"

# Fits are deterministic functions of their inputs, and the simulator repeats many of them
# exactly: jobs of one application start from the same profiles and see the same step times on
# the same placements (960-job newTrace: 70% of Sia's refits, 56% of Pollux's). The result of a
# fit is kept per exact input (the observations' bytes, warm start, prior and options).
FIT_CACHE_SIZE = 8192  # fits kept (least recently used dropped first)
FITS: LRUCache[bytes, ThroughputParams] = LRUCache(FIT_CACHE_SIZE)


# The model's values at the last point are kept for the Jacobian at that same point (about half
# of a fit's evaluations; the same arithmetic, so the same fit, 20% faster).
REUSE_LAST_POINT = True


def clear_fit_cache() -> None:
    """Forget every kept fit (the next fits run the solver again)."""
    FITS.clear()


def _gamma_to_z(gamma: np.ndarray) -> np.ndarray:
    """Inverse of ``gamma = 1 + softplus(z)`` (gamma > 1)."""
    return np.log(np.expm1(np.maximum(np.asarray(gamma, dtype=float) - 1.0, 1e-6)))


def fit_compute(local_bsz: np.ndarray, step_time: np.ndarray) -> tuple[float, float]:
    """``(alpha_c, beta_c)`` of ``step = alpha_c + beta_c * m``: least squares kept positive.

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
    prior: ThroughputParams | None = None,
    missing: MissingSync | str = MissingSync.TIE,
) -> ThroughputParams:
    """Fit the throughput model to ``meas``.

    Args:
        meas: observed steps (at least one).
        init: warm start (e.g. the previous fit when new observations arrive).
        fallback: values of parameters the data cannot support (see module doc);
            defaults to zero sync cost and gamma = 1.
        prior_weight: weight of the ridge prior on log-parameters (relative to one residual).
        sync_weight: weight of the measured sync times' log error (0: used only for the
            starting guess; see ``docs/goodput.md`` for why).
        prior: centre of the ridge prior (default: a guess derived from the data); e.g. a
            projection from another GPU type.
        missing: :class:`MissingSync` or its value: with multi-GPU data on one side of the node
            boundary only, ``"tie"`` the other side's sync parameters to the fitted ones or hold
            them at ``fallback`` (``"fallback"``, when a fallback is given).

    Returns:
        The fitted parameters (kept per exact input: a repeated fit returns the same object).
    """
    if not isinstance(meas, Measurements):
        raise InputError("meas", type(meas).__name__, "must be a Measurements")
    if len(meas) == 0:
        raise InputError("meas", 0, "need at least one observation to fit")
    finite_number("prior_weight", prior_weight, low=0.0)  # inf: the prior alone, the data ignored
    finite_number("sync_weight", sync_weight, low=0.0)
    for name, params in (("init", init), ("fallback", fallback), ("prior", prior)):
        if params is not None and not isinstance(params, ThroughputParams):
            raise InputError(name, type(params).__name__, "must be a ThroughputParams or None")
    missing = enum_choice(MissingSync, "missing", missing)
    key = _fit_key(meas, init, fallback, prior_weight, sync_weight, prior, missing)
    hit = FITS.get(key)
    if hit is not None:
        return hit
    return FITS.put(key, _fit(meas, init, fallback, prior_weight, sync_weight, prior, missing))


def _fit_key(meas: Measurements, *options: object) -> bytes:
    """The exact input of a fit as bytes (unambiguous: every part carries its length): the five
    observation columns and every option."""
    parts = [len(meas).to_bytes(8, "little")]
    parts += [np.ascontiguousarray(getattr(meas, c), dtype=np.float64).tobytes()
              for c in ("num_nodes", "num_gpus", "local_bsz", "step_time", "sync_time")]
    for opt in options:
        data = opt.as_array().tobytes() if isinstance(opt, ThroughputParams) else repr(opt).encode()
        parts += [b"P" if isinstance(opt, ThroughputParams) else b"R", len(data).to_bytes(4, "little"), data]
    return b"".join(parts)


def _fit(
    meas: Measurements,
    init: ThroughputParams | None,
    fallback: ThroughputParams | None,
    prior_weight: float,
    sync_weight: float,
    prior: ThroughputParams | None,
    missing: MissingSync,
) -> ThroughputParams:
    """:func:`fit_throughput_params` without the cache (arguments checked by the caller): which
    parameters are free, where the fit starts and what the prior pulls towards, the measurements
    collapsed into rows, then Levenberg-Marquardt on them."""
    guess = _initial_guess(meas)
    free, tie, fixed = _parameter_roles(meas, guess, fallback, missing)
    is_gamma, x0, center = _start_and_center(guess, init, prior, free)
    rows = _collapsed_rows(meas, sync_weight)
    return _solve(rows, free, tie, fixed, is_gamma, x0, center, prior_weight)


def _parameter_roles(meas: Measurements, guess: np.ndarray, fallback: ThroughputParams | None,
                     missing: MissingSync) -> tuple[list[int], dict[int, int], dict[int, float]]:
    """Which of the 7 parameters are free (indices); the others are tied to another index or
    fixed (to the fallback's value) where the measurements cannot tell them."""
    n_nodes, k = meas.num_nodes, meas.num_gpus
    multi = k > 1
    intra = multi & (n_nodes == 1)
    inter = multi & (n_nodes > 1)
    fb = (fallback or ThroughputParams(guess[0], guess[1])).as_array()
    free = [0, 1]
    tie: dict[int, int] = {}
    fixed: dict[int, float] = {}
    if intra.any():
        free += [2, 3]
    if inter.any():
        free += [4, 5]
    one_side = multi.any() and not (intra.any() and inter.any())
    if one_side and missing is MissingSync.FALLBACK and fallback is not None:
        fixed.update({i: fb[i] for i in ((4, 5) if intra.any() else (2, 3))})
    elif intra.any() and not inter.any():
        tie.update({4: 2, 5: 3})
    elif inter.any() and not intra.any():
        tie.update({2: 4, 3: 5})
    if multi.any():
        free.append(6)
    else:
        fixed.update({i: fb[i] for i in (2, 3, 4, 5, 6)})
    return free, tie, fixed


def _start_and_center(guess: np.ndarray, init: ThroughputParams | None, prior: ThroughputParams | None,
                      free: list[int]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Which free column is gamma, the free columns' starting point (log-parameters; gamma as
    its softplus argument z) and the prior's centre (log-parameters, and gamma itself, not z, so
    its pull is uniform)."""
    start = guess.copy()
    if init is not None:
        start = np.where(init.as_array() > 0, init.as_array(), guess)
        start[:6] = np.maximum(start[:6], 1e-9)
    is_gamma = np.array([i == 6 for i in free])
    x0 = np.where(is_gamma, _gamma_to_z(start[free]), np.log(np.maximum(start[free], 1e-9)))
    if prior is not None:
        guess_c = np.where(prior.as_array() > 0, prior.as_array(), guess)
    else:
        guess_c = guess.copy()
        guess_c[6] = 1.0
    # Prior centre: log-parameters, and gamma itself (not z) so its pull is uniform.
    center = np.where(is_gamma, guess_c[free], np.log(np.maximum(guess_c[free], 1e-9)))
    return is_gamma, x0, center


@dataclass(frozen=True)
class _Rows:
    """The measurements collapsed by (nodes, GPUs, local batch): per unique row its local batch
    ``u_m``, ``weight`` (sqrt of its count) and mean log step time; the rows with a measured
    sync time (``sync_rows``), their mean log sync time and weights; ``basis`` with
    ``t_grad = basis[:, :2] . p[0:2]`` and ``t_sync = basis[:, 2:6] . p[2:6]``."""

    u_m: np.ndarray
    weight: np.ndarray
    log_step: np.ndarray
    sync_rows: np.ndarray
    log_sync: np.ndarray
    sync_w: np.ndarray
    basis: np.ndarray


def _collapsed_rows(meas: Measurements, sync_weight: float) -> _Rows:
    """Rows with equal (nodes, GPUs, local batch) collapsed into one residual weighted by
    sqrt(count) on their mean log time: the same objective, fewer rows."""
    n_nodes, k, m = meas.num_nodes, meas.num_gpus, meas.local_bsz
    multi = k > 1
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
    extra = np.maximum(u_k - 2.0, 0.0)
    intra_u = (u_multi & (u_nodes <= 1)).astype(float)
    inter_u = (u_multi & (u_nodes > 1)).astype(float)
    # Basis: t_grad = [1, m] . p[0:2] and t_sync = basis[:, 2:6] . p[2:6] for every row.
    basis = np.stack([np.ones_like(u_m), u_m, intra_u, intra_u * extra, inter_u,
                      inter_u * extra], axis=1)
    return _Rows(u_m, weight, log_step, sync_rows, log_sync, sync_w, basis)


def _column_map(free: list[int], tie: dict[int, int]) -> np.ndarray:
    """``cmap[i, j] = 1`` when full parameter ``i`` takes its value (and gradient) from free column ``j``."""
    cmap = np.zeros((7, len(free)))
    cmap[np.array(free), np.arange(len(free))] = 1.0
    for i, j in tie.items():
        cmap[i] = cmap[j]
    return cmap


def _solve(rows: _Rows, free: list[int], tie: dict[int, int], fixed: dict[int, float], is_gamma: np.ndarray,
           x0: np.ndarray, center: np.ndarray, prior_weight: float) -> ThroughputParams:
    """Levenberg-Marquardt on ``rows`` over the ``free`` parameters from ``x0``, with the
    analytic Jacobian (gamma through its softplus argument) and the prior's rows."""
    u_m, weight, log_step, basis = rows.u_m, rows.weight, rows.log_step, rows.basis
    sync_rows, log_sync, sync_w = rows.sync_rows, rows.log_sync, rows.sync_w
    sync_basis = basis[sync_rows, 2:6]
    free_idx, cmap = np.array(free), _column_map(free, tie)
    prior_rows = prior_weight * np.eye(len(free))

    def unpack(x: np.ndarray) -> np.ndarray:
        p = np.empty(7)
        p[free_idx] = np.where(is_gamma, 1.0 + np.logaddexp(0.0, x), np.exp(np.minimum(x, 30.0)))
        for i, v in fixed.items():
            p[i] = v
        for i, j in tie.items():
            p[i] = p[j]
        return p

    last: list = [None, None]  # MINPACK often asks for the Jacobian at the point it just evaluated

    def model(x: np.ndarray):
        if REUSE_LAST_POINT and last[0] is not None and np.array_equal(last[0], x):
            return last[1]
        out = _model(x)
        last[0], last[1] = x.copy(), out
        return out

    def _model(x: np.ndarray):
        p = unpack(x)
        t_grad = p[0] + p[1] * u_m
        t_sync = basis[:, 2:6] @ p[2:6]
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
            prior_weight * (np.where(is_gamma, 1.0 + np.logaddexp(0.0, x), x) - center),
        ])

    def jacobian(x: np.ndarray) -> np.ndarray:
        p, t_grad, t_sync, u, v, ug, vg, s, log_t = model(x)
        g = p[6]
        inv_t = np.exp(-log_t)
        # d log T / d log p_i = p_i * basis_i * (dT/dt_part) / T, dT/dt = (t / T)**(g - 1).
        d_grad = (t_grad * inv_t) ** (g - 1) * inv_t * weight
        d_sync = (t_sync * inv_t) ** (g - 1) * inv_t * weight
        full = np.empty((len(u_m), 7))
        full[:, :2] = d_grad[:, None] * (basis[:, :2] * p[:2])
        full[:, 2:6] = d_sync[:, None] * (basis[:, 2:6] * p[2:6])
        log_u = np.log(u)
        log_v = np.log(np.maximum(v, 1e-300))
        full[:, 6] = weight * (-np.log(s) / g**2 + (ug * log_u + vg * log_v) / (g * s))
        sync_full = np.zeros((len(sync_basis), 7))
        sync_full[:, 2:6] = (sync_w / t_sync[sync_rows])[:, None] * (sync_basis * p[2:6])
        return np.concatenate([full @ cmap, sync_full @ cmap, prior_rows])

    gamma_col = np.flatnonzero(is_gamma)

    def jacobian_z(x: np.ndarray) -> np.ndarray:
        jac = jacobian(x)
        # gamma = 1 + softplus(z): d gamma / d z = sigmoid(z), prior row included.
        jac[:, gamma_col] *= expit(x[gamma_col])
        return jac

    p = unpack(_levenberg_marquardt(residuals, jacobian_z, x0))
    return ThroughputParams(*(float(v) for v in p))


# ``least_squares(method="lm")`` hands the problem to MINPACK's lmder through scipy's wrappers
# (argument checks, a function object that copies every value and Jacobian): about 1 ms of a
# 2-3 ms fit of a few parameters. Calling lmder as ``least_squares`` does, with the same
# tolerances, gives the same iterates and so the same fit; ``least_squares`` is used where
# scipy's private entry point is missing or refuses the call.
DIRECT_MINPACK = True
_FTOL = _XTOL = 1e-6
_GTOL = 1e-8  # least_squares's default
_MAX_NFEV = 200


def _levenberg_marquardt(residuals, jacobian, x0: np.ndarray) -> np.ndarray:
    """The least-squares solution from ``x0`` (MINPACK's Levenberg-Marquardt, analytic Jacobian)."""
    if DIRECT_MINPACK and np.all(np.isfinite(residuals(x0))):  # else least_squares's own error
        try:
            from scipy.optimize._minpack import _lmder
        except ImportError:
            pass
        else:
            try:
                # least_squares's call_minpack: (fun, jac, x0, args, full_output, col_deriv, ftol,
                # xtol, gtol, max_nfev, factor, diag) with diag None for its default x_scale="jac".
                x, _, _ = _lmder(residuals, jacobian, np.array(x0, dtype=float), (), True, False,
                                 _FTOL, _XTOL, _GTOL, _MAX_NFEV, 100.0, None)
                return np.asarray(x, dtype=float)
            except (TypeError, ValueError, SystemError):
                pass
    from scipy.optimize import least_squares  # imported on first fit: scipy.optimize costs ~0.4 s

    return least_squares(residuals, x0, jac=jacobian, method="lm", xtol=_XTOL, ftol=_FTOL, gtol=_GTOL,
                         max_nfev=_MAX_NFEV).x
