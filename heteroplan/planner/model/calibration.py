"""Refit the simulator's constants to measured runs (the measure-and-refit loop of the planner).

Profiles time each layer alone; a training loop adds what they miss: framework time per
microbatch, the fixed cost of every point-to-point transfer (the send call, waking a receiver
that idled), and data-parallel replicas waiting for the slowest of them. :func:`fit_sim_config` fits
the constants of :class:`SimConfig` that carry those effects (by default ``compute_scale``,
``microbatch_overhead_s``, and ``transfer_latency_s`` and ``straggler_cv`` where the plans
have pipelines and data parallelism: :func:`time_constants_for`) to measured iteration times of a few
plans, minimising the mean absolute relative error with bounded Nelder-Mead (the simulator is
only piecewise smooth in them: maxima over stages), starting from ``base`` and restarted from its
best point until a restart no longer improves. The same function fits
memory constants to measured peak memory (``quantity="peak_memory_gb"``). A measurement that no
constants in their plausible ranges reach (:attr:`Calibration.out_of_reach`) is named and left
out of the fit.

The result is a :class:`Calibration`; ``calibration.config.write(data_dir)`` stores it so that
``simulate`` and ``plan_job`` with that ``data_dir`` use it.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from enum import StrEnum
from typing import Any

import numpy as np
from scipy.optimize import minimize

from heteroplan.errors import InputError
from heteroplan.inputs import enum_choice
from heteroplan.planner.model.sim_config import PROFILED_CONFIG, SimConfig
from heteroplan.planner.model.simulator import PlanEstimate, simulate_plan
from heteroplan.planner.plan import Plan

__all__ = [
    "Calibration", "CalibratedQuantity", "BOUNDS", "TIME_CONSTANTS", "MEMORY_CONSTANTS", "fit_sim_config", "relative_errors", "time_constants_for",
]

TIME_CONSTANTS = ("compute_scale", "microbatch_overhead_s", "transfer_latency_s", "allreduce_latency_s", "straggler_cv")
MEMORY_CONSTANTS = ("overhead_gb", "working_layers")


class CalibratedQuantity(StrEnum):
    """What a calibration fits the simulator to: iteration time (s) or peak memory (GB)."""

    ITERATION_TIME = "iteration_time"
    PEAK_MEMORY_GB = "peak_memory_gb"

    @property
    def unit(self) -> str:
        return "s" if self is CalibratedQuantity.ITERATION_TIME else "GB"

    def of(self, estimate: PlanEstimate) -> float:
        """This quantity of a plan's estimate (s or GB)."""
        return estimate.iteration_time_s if self is CalibratedQuantity.ITERATION_TIME else estimate.peak_memory_gb
_log = logging.getLogger(__name__)
_RESTARTS = 5

# Plausible range of each constant (its physical meaning bounds it); a fit that stops at a bound
# is reported (Calibration.at_bound): the model misses something the constant is bending to absorb.
BOUNDS = {
    "compute_scale": (0.25, 4.0),  # training loop vs profiler speed
    "microbatch_overhead_s": (-0.01, 0.1),  # framework seconds per microbatch and stage (ms; < 0: profiler sync)
    "transfer_latency_s": (0.0, 1.0),  # seconds per point-to-point transfer
    "allreduce_latency_s": (0.0, 1.0),  # seconds per ring step
    "straggler_cv": (0.0, 0.5),  # rank speed noise, fraction
    "overhead_gb": (0.0, 16.0),  # CUDA context, NCCL buffers, allocator cache, GB per GPU
    "working_layers": (0.0, 8.0),  # backward's transient buffers, in layers' activations
    "logits_factor": (0.0, 8.0),  # transient copies of the logits
    "act_bytes_per_float": (0.5, 8.0),  # bytes kept per activation float (fp16/fp32, recompute)
}
_BOUNDS = BOUNDS


def time_constants_for(plans: Sequence[Plan] | Mapping[str, Plan]) -> tuple[str, ...]:
    """The time constants that ``plans`` can tell apart: ``compute_scale`` and
    ``microbatch_overhead_s`` always, ``transfer_latency_s`` when a plan has a pipeline and
    ``straggler_cv`` when one has data parallelism. A
    constant no plan exercises would be left to chance by the fit, then applied to every plan
    the planner tries.

    ``allreduce_latency_s`` is not among them: on measured runs the wait at the all-reduce is
    the slower rank's (it grows with the compute of balanced replicas and vanishes when one
    replica has slack), which ``straggler_cv`` carries and a fixed latency cannot; the two are
    nearly collinear on data-parallel plans. Fit it explicitly with ``constants=``.
    """
    plan_list = list(plans.values()) if isinstance(plans, Mapping) else list(plans)
    out = ["compute_scale", "microbatch_overhead_s"]
    if any(p.pp > 1 for p in plan_list):
        out.append("transfer_latency_s")
    if any(p.dp > 1 for p in plan_list):
        out.append("straggler_cv")
    return tuple(out)


@dataclass(frozen=True, repr=False)
class Calibration:
    """A fitted :class:`SimConfig` and how well it explains the measurements.

    Attributes:
        config: the fitted constants (the others as in the base config).
        base: the config the fit started from.
        constants: names of the fitted constants.
        names: one label per measured plan.
        quantity: :class:`CalibratedQuantity`: ``"iteration_time"`` (seconds) or ``"peak_memory_gb"`` (GB).
        measured: the measurements, one per plan.
        predicted_before: simulated with ``base``.
        predicted_after: simulated with ``config``.
        converged: whether Nelder-Mead met its tolerances.
        at_bound: fitted constants that stopped at an end of their plausible range (:data:`BOUNDS`).
        reach: ``(plans, 2)`` the least and the most the model predicts for each plan with the
            fitted constants anywhere in their plausible ranges (every constant of
            :data:`BOUNDS` raises time or memory, so these are the predictions at the ranges'
            two ends).
        out_of_reach: plans whose measurement lies outside ``reach``: no constants in their
            plausible ranges fit them (a memory reading below what the plan's weights, optimizer
            state and in-flight activations take, say). They are left out of the fit (they could
            only pull every constant to the end of its range) and named; ``predicted_after`` and
            the errors still cover them.
        fitted_out_of_reach: True when too few plans were in reach to fit the constants without
            them, so the fit kept them.
    """

    config: SimConfig
    base: SimConfig
    constants: tuple[str, ...]
    names: tuple[str, ...]
    quantity: CalibratedQuantity
    measured: np.ndarray
    predicted_before: np.ndarray
    predicted_after: np.ndarray
    converged: bool
    at_bound: tuple[str, ...] = ()
    reach: np.ndarray | None = None
    out_of_reach: tuple[str, ...] = ()
    fitted_out_of_reach: bool = False

    @property
    def errors_before(self) -> np.ndarray:
        """Relative errors (predicted / measured - 1) with the base config."""
        return self.predicted_before / self.measured - 1

    @property
    def errors_after(self) -> np.ndarray:
        """Relative errors (predicted / measured - 1) with the fitted config."""
        return self.predicted_after / self.measured - 1

    def __repr__(self) -> str:
        return self.describe()

    def describe(self) -> str:
        """A table of measured vs predicted values, before and after the fit, and the constants."""
        unit = self.quantity.unit
        width = max([len("plan"), *map(len, self.names)])
        lines = [f"{'plan':<{width}}  measured {unit:>2}  before {unit:>2}  error   after {unit:>2}  error"]
        for name, m, b, a in zip(self.names, self.measured, self.predicted_before, self.predicted_after, strict=True):
            lines.append(f"{name:<{width}}  {m:11.4g}  {b:9.4g}  {100 * (b / m - 1):+5.1f}%  {a:8.4g}  {100 * (a / m - 1):+5.1f}%")
        before, after = np.abs(self.errors_before).mean(), np.abs(self.errors_after).mean()
        lines.append(f"mean |error|: {100 * before:.1f}% before, {100 * after:.1f}% after"
                     + ("" if self.converged else " (fit stopped at its iteration limit)")
                     + (f" (at the end of its plausible range: {', '.join(self.at_bound)})" if self.at_bound else ""))
        lines += [f"{c} = {getattr(self.base, c):.6g} -> {getattr(self.config, c):.6g}" for c in self.constants]
        if self.out_of_reach:
            kept = "kept in the fit: too few plans in reach" if self.fitted_out_of_reach else "left out of the fit"
            lines.append(f"out of reach (no constants in their plausible ranges fit them; {kept}): "
                         f"{', '.join(self.reach_notes())}")
        return "\n".join(lines)

    def reach_notes(self) -> list[str]:
        """One line per plan out of reach: what was measured and the nearest end of the reach."""
        unit = self.quantity.unit
        notes = []
        for name, m, (lo, hi) in zip(self.names, self.measured, self.reach, strict=True):
            if name in self.out_of_reach:
                side = f"below the least predicted, {lo:.4g}" if m < lo else f"above the most predicted, {hi:.4g}"
                notes.append(f"{name} measured {m:.4g} {unit}, {side} {unit}")
        return notes

    def to_dict(self) -> dict[str, Any]:
        return {
            "constants": {c: getattr(self.config, c) for c in self.constants},
            "quantity": self.quantity,
            "plans": list(self.names),
            "measured": self.measured.tolist(),
            "predicted_before": self.predicted_before.tolist(),
            "predicted_after": self.predicted_after.tolist(),
            "converged": self.converged,
            "at_bound": list(self.at_bound),
            "out_of_reach": list(self.out_of_reach),
            "fitted_out_of_reach": self.fitted_out_of_reach,
        }


def relative_errors(
    plans: Sequence[Plan], measured: Sequence[float], config: SimConfig,
    quantity: CalibratedQuantity | str = CalibratedQuantity.ITERATION_TIME, **simulate_kwargs: Any,
) -> np.ndarray:
    """``predicted / measured - 1`` of each plan under ``config`` (``simulate_kwargs`` go to ``simulate_plan``)."""
    predicted = _predict(plans, config, enum_choice(CalibratedQuantity, "quantity", quantity), simulate_kwargs)
    return predicted / np.asarray(measured, dtype=float) - 1


def _predict(plans: Sequence[Plan], config: SimConfig, quantity: CalibratedQuantity,
             simulate_kwargs: Mapping[str, Any]) -> np.ndarray:
    return np.array([quantity.of(simulate_plan(p, config=config, **simulate_kwargs)) for p in plans])


def _fit_inputs(plans: Sequence[Plan] | Mapping[str, Plan], measured: Sequence[float], constants: Sequence[str] | None,
                quantity: CalibratedQuantity) -> tuple[tuple[str, ...], list[Plan], tuple[str, ...], np.ndarray]:
    """``(labels, plans, constants, measurements)`` of :func:`fit_sim_config`'s arguments, checked
    (:class:`InputError` naming the argument), the constants defaulted for the quantity."""
    names = tuple(plans) if isinstance(plans, Mapping) else tuple(f"plan {i}" for i in range(len(plans)))
    plan_list = list(plans.values()) if isinstance(plans, Mapping) else list(plans)
    if constants is None:
        constants = time_constants_for(plan_list) if quantity is CalibratedQuantity.ITERATION_TIME else MEMORY_CONSTANTS
    constants = tuple(constants)
    for c in constants:
        if c not in _BOUNDS:
            raise InputError("constants", c, f"cannot be fitted; choose from {sorted(_BOUNDS)}")
    if not constants or len(set(constants)) != len(constants):
        raise InputError("constants", constants, "must be distinct names, at least one")
    y = np.asarray(measured, dtype=float) if _is_number_list(measured) else None
    if y is None or y.shape != (len(plan_list),) or not np.all(np.isfinite(y)) or not np.all(y > 0):
        raise InputError("measured", measured, f"must be {len(plan_list)} positive numbers, one per plan")
    if len(plan_list) < len(constants):
        raise InputError("plans", len(plan_list), f"need at least as many measured plans as constants ({len(constants)})")
    return names, plan_list, constants, y


def _descend_off_bounds(descend: Callable[[np.ndarray], tuple[np.ndarray, float, bool]], x0: np.ndarray,
                        lows: np.ndarray, highs: np.ndarray) -> tuple[np.ndarray, bool]:
    """``descend`` from ``x0``, then again from 1% inside the range for the constants it left on (or
    near) a bound (a collapsed simplex there can hide an interior optimum); the better end point and
    whether its descent converged."""
    best, best_value, converged = descend(x0)
    stuck = _at_bound(best, lows, highs, 1e-3)
    if stuck.any():
        inside = np.where(best - lows <= highs - best, lows + 0.01 * (highs - lows), highs - 0.01 * (highs - lows))
        retry = descend(np.where(stuck, inside, best))
        if retry[1] < best_value - 1e-12:
            best, best_value, converged = retry
    return best, converged


def fit_sim_config(
    plans: Sequence[Plan] | Mapping[str, Plan],
    measured: Sequence[float],
    *,
    constants: Sequence[str] | None = None,
    quantity: CalibratedQuantity | str = CalibratedQuantity.ITERATION_TIME,
    base: SimConfig = PROFILED_CONFIG,
    max_iterations: int = 2000,
    **simulate_kwargs: Any,
) -> Calibration:
    """Fit ``constants`` of ``base`` so that simulated ``quantity`` matches ``measured`` (one per plan).

    Args:
        plans: the measured plans, or ``{label: plan}``.
        measured: measured seconds per iteration (or peak GB per GPU), one per plan.
        constants: names of :class:`SimConfig` constants to fit; at most as many as plans
            (default: :func:`time_constants_for` the plans for time, :data:`MEMORY_CONSTANTS`
            for memory).
        quantity: :class:`CalibratedQuantity` or its value: ``"iteration_time"`` or ``"peak_memory_gb"``.
        base: starting point; the constants not fitted keep its values.
        max_iterations: Nelder-Mead iteration limit (``converged`` says whether it was enough).
        simulate_kwargs: passed to :func:`simulate_plan` (``data_dir``, ``profile``, ``gpu_types``, ...).

    Raises:
        InputError: unknown constant or quantity, a measurement that is not a positive number,
            fewer plans than constants.
    """
    quantity = enum_choice(CalibratedQuantity, "quantity", quantity)
    names, plan_list, constants, y = _fit_inputs(plans, measured, constants, quantity)

    def config_at(x: np.ndarray) -> SimConfig:
        return replace(base, **{c: float(v) for c, v in zip(constants, x, strict=True)})

    before = _predict(plan_list, base, quantity, simulate_kwargs)
    x0 = np.array([getattr(base, c) for c in constants], dtype=float)
    bounds = [_BOUNDS[c] for c in constants]
    lows, highs = np.array([b[0] for b in bounds]), np.array([b[1] for b in bounds])
    x0 = np.clip(x0, lows, highs)
    reach = np.stack([_predict(plan_list, config_at(lows), quantity, simulate_kwargs),
                      _predict(plan_list, config_at(highs), quantity, simulate_kwargs)], axis=1)
    out = (y < reach[:, 0] * (1 - 1e-9)) | (y > reach[:, 1] * (1 + 1e-9))
    # a measurement no constants reach would only pull them to the end of a range: fit the others
    fitted = ~out if (~out).sum() >= len(constants) else np.ones(len(plan_list), dtype=bool)
    fit_plans, fit_y = [p for p, f in zip(plan_list, fitted, strict=True) if f], y[fitted]

    def objective(x: np.ndarray) -> float:
        return float(np.abs(_predict(fit_plans, config_at(x), quantity, simulate_kwargs) / fit_y - 1).mean())

    def descend(start: np.ndarray) -> tuple[np.ndarray, float, bool]:
        best, best_value, converged = start, objective(start), False
        for _ in range(_RESTARTS):  # a fresh simplex around the best point: Nelder-Mead stalls on the L1 kinks
            result = minimize(objective, best, method="Nelder-Mead", bounds=bounds,
                              options={"maxiter": max_iterations, "xatol": 1e-9, "fatol": 1e-10})
            converged = bool(result.success)
            if result.fun >= best_value - 1e-12:
                break
            best, best_value = result.x, float(result.fun)
        return best, best_value, converged

    best, converged = _descend_off_bounds(descend, x0, lows, highs)
    config = config_at(best)
    after = _predict(plan_list, config, quantity, simulate_kwargs)
    at_bound = tuple(c for c, stop in zip(constants, _at_bound(best, lows, highs), strict=True) if stop)
    if at_bound:
        _log.warning("calibration stopped at the end of the plausible range of %s: the measurements ask for more "
                     "than that range; check them before using the fit (noisy: more `--rounds`; a drifting "
                     "machine: more `--sweeps`)", ", ".join(at_bound))
    out_of_reach = tuple(n for n, o in zip(names, out, strict=True) if o)
    calibration = Calibration(config, base, constants, names, quantity, y, before, after, converged, at_bound,
                              reach, out_of_reach, bool(fitted.all() and out.any()))
    if out_of_reach:
        _log.warning("no constants in their plausible ranges fit %s (%s the fit): %s", ", ".join(out_of_reach),
                     "kept in" if calibration.fitted_out_of_reach else "left out of",
                     "; ".join(calibration.reach_notes()))
    return calibration


def _at_bound(x: np.ndarray, lows: np.ndarray, highs: np.ndarray, tol: float = 1e-6) -> np.ndarray:
    """Which entries of ``x`` sit at an end of their range (within ``tol`` of the range, or of 1)."""
    return np.minimum(x - lows, highs - x) <= tol * np.maximum(1.0, highs - lows)


def _is_number_list(values: object) -> bool:
    try:
        return all(isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v) for v in values)  # type: ignore[union-attr]
    except TypeError:
        return False
