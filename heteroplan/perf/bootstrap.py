"""Sia's bootstrapped goodput model: 1-GPU profiles per type, refined as steps are observed.

A new job is profiled on one GPU of each type. Types with multi-GPU observations get a full
fit (:func:`~heteroplan.perf.fit.fit_throughput_params`). A type without them keeps its own
compute model (from its 1-GPU profile) and borrows the synchronization model of the fitted
type with the most multi-GPU observations, scaled by the ratio of the two types' 1-GPU step
times (``scale_sync=True``, Sia's projection by the 1-GPU throughput ratio) or unscaled
(``scale_sync=False``: the network does not get faster with the GPU). When no type has
multi-GPU data the sync cost is zero (optimistic; Sia's scale-up rule -- at most double the
GPUs per round -- bounds the damage).

Types with multi-GPU data other than the reference use the projection from the reference as
the centre of their (mild) prior, which steadies fits from the first few configurations:
median error over the 18 (app, type) pairs after 1 / 2 / 4 / 8 observed configurations
drops from 14.2% / 12.2% / 8.1% / 7.1% to 11.9% / 9.4% / 7.6% / 6.4% (``docs/goodput.md``).

Refits are lazy: :meth:`BootstrappedModel.observe` records and marks the type stale; the next
query refits stale types only, warm-started from their previous fits.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from heteroplan.errors import InputError
from heteroplan.perf.applications import AppSpec
from heteroplan.perf.efficiency import PhiTable
from heteroplan.perf.fit import fit_compute, fit_throughput_params
from heteroplan.perf.goodput import GoodputModel
from heteroplan.perf.measurements import Measurements, parse_placement
from heteroplan.perf.throughput import ThroughputParams

__all__ = ["BootstrappedModel", "project_params"]


def project_params(
    target_compute: tuple[float, float],
    reference: ThroughputParams,
    at_local_bsz: float,
    scale_sync: bool = True,
) -> ThroughputParams:
    """Throughput parameters of a type known only from its 1-GPU compute model.

    Args:
        target_compute: ``(alpha_c, beta_c)`` of the target type.
        reference: fitted parameters of another type (with sync data).
        at_local_bsz: local batch at which the 1-GPU step-time ratio is taken.
        scale_sync: scale the reference's sync times by that ratio.
    """
    a, b = target_compute
    ratio = (a + b * at_local_bsz) / (reference.alpha_c + reference.beta_c * at_local_bsz)
    f = ratio if scale_sync else 1.0
    return ThroughputParams(
        a, b, reference.alpha_r * f, reference.beta_r * f, reference.alpha_n * f,
        reference.beta_n * f, reference.gamma,
    )


class BootstrappedModel(GoodputModel):
    """A :class:`GoodputModel` that learns from observed steps.

    Args:
        app: the application.
        profiles: per GPU type, the initial observations (usually 1-GPU steps at a few
            local batch sizes).
        phi: gradient noise scale table.
        scale_sync: how unfitted types borrow sync costs (see module doc).

    Parameters are owned by the fitting: :meth:`set_params` values last only until the
    next observation (of any type) triggers a refit.
    """

    def __init__(
        self,
        app: AppSpec,
        profiles: Mapping[str, Measurements],
        phi: PhiTable | float,
        scale_sync: bool = True,
        batch_grid: int = 32,
    ) -> None:
        super().__init__(app, {}, phi, batch_grid=batch_grid)
        self.scale_sync = scale_sync
        self._obs: dict[str, Measurements] = {}
        self._fits: dict[str, ThroughputParams] = {}
        self._stale: set[str] = set()
        self._source: dict[str, str] = {}
        self._compute_cache: dict[str, tuple[int, tuple[float, float, float] | None]] = {}
        for gpu_type, meas in profiles.items():
            if not isinstance(meas, Measurements) or len(meas) == 0:
                raise InputError(f"profiles[{gpu_type}]", meas, "must be non-empty Measurements")
            self._obs[gpu_type] = meas
            self._stale.add(gpu_type)
        self._refresh()

    # -- observations ------------------------------------------------------------------
    def observe(
        self,
        gpu_type: str,
        placement: str | Sequence[int],
        local_bsz: float,
        step_time: float,
        sync_time: float,
    ) -> None:
        """Record one measured step (placement as digits or per-node GPU counts; seconds)."""
        num_nodes, num_gpus = parse_placement(placement)
        self.observe_many(gpu_type, Measurements(
            np.array([num_nodes]), np.array([num_gpus]), np.array([local_bsz]),
            np.array([step_time]), np.array([sync_time]),
        ))

    def observe_many(self, gpu_type: str, meas: Measurements) -> None:
        """Record several measured steps of one GPU type."""
        if not isinstance(gpu_type, str) or not gpu_type:
            raise InputError("gpu_type", gpu_type, "must be a non-empty string")
        if not isinstance(meas, Measurements):
            raise InputError("meas", type(meas).__name__, "must be a Measurements")
        old = self._obs.get(gpu_type)
        self._obs[gpu_type] = meas if old is None else old.concat(meas)
        self._stale.add(gpu_type)
        self._changed()

    def observations(self, gpu_type: str) -> Measurements:
        """All observations of ``gpu_type`` so far."""
        return self._obs.get(gpu_type, Measurements.empty())

    def source(self, gpu_type: str) -> str:
        """How ``gpu_type``'s parameters were obtained: ``fit``, ``projected`` or ``profile``."""
        self._refresh()
        return self._source.get(gpu_type, "unknown")

    # -- state (a scheduling session saves and restores it) -------------------------------
    def state(self) -> dict[str, Any]:
        """The learned state as plain JSON-able data: observations per type, fits, the types
        awaiting a refit, and the measured noise scale (see :meth:`restore_state`)."""
        cols = ("num_nodes", "num_gpus", "local_bsz", "step_time", "sync_time")
        return {
            "observations": {t: {c: getattr(m, c).tolist() for c in cols} for t, m in self._obs.items()},
            "fits": {t: p.to_dict() for t, p in self._fits.items()},
            "stale": sorted(self._stale),
            "measured_phi": self._measured_phi,
        }

    def restore_state(self, state: Mapping[str, Any]) -> None:
        """Take back a :meth:`state`: the model then answers exactly as the one that saved it."""
        try:
            self._obs = {t: Measurements(**{c: np.asarray(v, dtype=float) for c, v in m.items()})
                         for t, m in state["observations"].items()}
            self._fits = {t: ThroughputParams.from_dict(p) for t, p in state["fits"].items()}
            stale = set(state["stale"])
            phi = state["measured_phi"]
        except (KeyError, TypeError, AttributeError) as exc:
            raise InputError("model_state", type(state).__name__, f"is not a BootstrappedModel state ({exc})") from None
        self._compute_cache.clear()
        self._measured_phi = None if phi is None else float(phi)
        if stale:  # saved before its refit: refit now, as the saving model would at its next query
            self._stale = stale
            self._refresh()
            return
        self._stale = set()
        counts = {t: int(np.count_nonzero(m.num_gpus > 1)) for t, m in self._obs.items()}
        reference = max((t for t in counts if counts[t] > 0), key=lambda t: counts[t], default=None)
        self._assemble(reference, set())

    # -- fitting -----------------------------------------------------------------------
    def _refresh(self) -> None:
        if not self._stale:
            return
        counts = {t: int(np.count_nonzero(m.num_gpus > 1)) for t, m in self._obs.items()}
        reference = max((t for t in counts if counts[t] > 0), key=lambda t: counts[t],
                        default=None)
        refit = {t for t in self._stale if counts[t] > 0}
        if reference is not None and (reference in refit or reference not in self._fits):
            # The reference is fitted on its own data; the others use its projection as the
            # centre of their prior when they are refitted.
            self._fits[reference] = fit_throughput_params(
                self._obs[reference], init=self._fits.get(reference))
            refit.discard(reference)
        for gpu_type in self._stale:
            if counts[gpu_type] == 0:
                self._fits.pop(gpu_type, None)
        self._stale.clear()
        self._assemble(reference, refit)

    def _assemble(self, reference: str | None, refit: set[str]) -> None:
        """Every type's parameters from the fits (fitting only the types in ``refit`` or unfitted)."""
        counts = {t: int(np.count_nonzero(m.num_gpus > 1)) for t, m in self._obs.items()}
        params: dict[str, ThroughputParams] = {}
        for gpu_type, meas in self._obs.items():
            projected = None
            if reference is not None and gpu_type != reference:
                compute = self._one_gpu_compute(gpu_type)
                if compute is not None:
                    a, b, at = compute
                    projected = project_params((a, b), self._fits[reference], at,
                                               scale_sync=self.scale_sync)
            if counts[gpu_type] > 0:
                if gpu_type in refit or gpu_type not in self._fits:
                    self._fits[gpu_type] = fit_throughput_params(
                        meas, init=self._fits.get(gpu_type), prior=projected)
                params[gpu_type] = self._fits[gpu_type]
                self._source[gpu_type] = "fit"
            elif projected is not None:
                params[gpu_type] = projected
                self._source[gpu_type] = "projected"
            else:  # only 1-GPU rows: the (cached) compute fit of exactly those rows
                compute = self._one_gpu_compute(gpu_type)
                a, b = compute[:2] if compute is not None else fit_compute(meas.local_bsz, meas.step_time)
                params[gpu_type] = ThroughputParams(a, b)
                self._source[gpu_type] = "profile"
        self._params = params
        self._changed()

    def _one_gpu_compute(self, gpu_type: str) -> tuple[float, float, float] | None:
        """``(alpha_c, beta_c, geometric-mean local batch)`` of the type's 1-GPU rows, cached
        until the type gets new observations; None without 1-GPU rows."""
        meas = self._obs[gpu_type]
        hit = self._compute_cache.get(gpu_type)
        if hit is not None and hit[0] == len(meas):
            return hit[1]
        one = meas.num_gpus == 1
        value = None
        if one.any():
            a, b = fit_compute(meas.local_bsz[one], meas.step_time[one])
            value = (a, b, float(np.exp(np.mean(np.log(meas.local_bsz[one])))))
        self._compute_cache[gpu_type] = (len(meas), value)
        return value

    # Every public query sees up-to-date parameters.
    def _get_params(self, gpu_type: str) -> ThroughputParams:
        self._refresh()
        return super()._get_params(gpu_type)

    def _evaluate(self, gpu_type: str, num_nodes: Any, num_gpus: Any, progress: float):
        self._refresh()
        return super()._evaluate(gpu_type, num_nodes, num_gpus, progress)

    @property
    def gpu_types(self) -> tuple[str, ...]:
        self._refresh()
        return tuple(self._params)

    @property
    def version(self) -> int:
        self._refresh()
        return self._version

    @property
    def params(self) -> Mapping[str, ThroughputParams]:
        self._refresh()
        return dict(self._params)
