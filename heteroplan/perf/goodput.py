"""Goodput of one job: throughput x statistical efficiency, optimized over the batch size.

``goodput = throughput(K, N, m, s) * E(M)`` with total batch ``M = K * m * (s + 1)``
(samples/s at M0-equivalent statistical progress). For each configuration (GPU type,
nodes N, GPUs K) :meth:`GoodputModel.optimize` picks the total batch M in
``[max(M0, K), max_batch]`` (a geometric grid plus the largest batch reachable with 0-3
accumulation steps) and, for each M, the fewest accumulation
steps s that keep the local batch m within the type's memory limit -- fewer steps are
always at least as fast for a given M, because accumulation repeats the fixed cost and
overlaps only the last micro-step with synchronization.

Evaluation is vectorized over configurations; the per-configuration throughput grid does not
depend on training progress and is cached, so a policy re-evaluating the same candidate
configurations every round pays only for the efficiency term.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from heteroplan.errors import InputError
from heteroplan.inputs import finite_number, work_fraction
from heteroplan.lru import LRUCache
from heteroplan.perf.applications import AppSpec
from heteroplan.perf.efficiency import PhiTable, efficiency
from heteroplan.perf.fit import fit_throughput_params
from heteroplan.perf.measurements import Measurements
from heteroplan.perf.throughput import ThroughputParams, step_time, throughput

__all__ = ["GoodputModel", "ThroughputParams", "ThroughputTable", "clear_grid_cache"]

_CACHE_LIMIT = 256
_EDGE_STEPS = np.array([1.0, 2.0, 3.0, 4.0])

# Throughput grids are pure functions of the application's batch limits, the grid size, the
# types' parameters and the configurations, and the simulator asks for the same ones over and
# over: a model's own cache is dropped at every refit, and jobs of one application share fits
# (the fit cache). Grids are kept across models per exact input, up to GRID_CACHE_BYTES.
GRID_CACHE_BYTES = 64 * 2**20


def _grid_bytes(entry: tuple) -> float:
    """Bytes of a grid's arrays (``entry[0]`` is its shape)."""
    return sum(arr.nbytes for arr in entry[1:])


GRIDS: LRUCache[tuple, tuple] = LRUCache(GRID_CACHE_BYTES, _grid_bytes)


def clear_grid_cache() -> None:
    """Forget every kept throughput grid."""
    GRIDS.clear()


def _as_counts(name: str, value: Any) -> np.ndarray:
    """Integer-valued, non-negative float array, or a clear error."""
    try:
        arr = np.asarray(value, dtype=float)
    except (TypeError, ValueError):
        raise InputError(name, value, "must be numeric") from None
    if not np.all(np.isfinite(arr)):
        raise InputError(name, value, "must be finite")
    if np.any(arr < 0):
        raise InputError(name, arr[arr < 0].flat[0] if arr.ndim else float(arr), "must be >= 0")
    if np.any(arr != np.round(arr)):
        raise InputError(name, value, "must be whole numbers")
    return arr


class GoodputModel:
    """Goodput of one job on each GPU type it has a throughput model for.

    Args:
        app: the application (M0, max batch, per-type max local batch).
        params: per GPU type, the throughput parameters.
        phi: gradient noise scale table (or a constant noise scale in samples).
        batch_grid: candidate total batch sizes per configuration.
    """

    def __init__(
        self,
        app: AppSpec,
        params: Mapping[str, ThroughputParams],
        phi: PhiTable | float,
        batch_grid: int = 32,
    ) -> None:
        if not isinstance(app, AppSpec):
            raise InputError("app", app, "must be an AppSpec")
        for gpu_type, p in params.items():
            if not isinstance(p, ThroughputParams):
                raise InputError(f"params[{gpu_type}]", p, "must be a ThroughputParams")
        if not isinstance(phi, PhiTable):
            if not (isinstance(phi, int | float) and phi > 0):
                raise InputError("phi", phi, "must be a PhiTable or a number > 0")
            phi = PhiTable.constant(float(phi))
        if not isinstance(batch_grid, int) or batch_grid < 2:
            raise InputError("batch_grid", batch_grid, "must be an integer >= 2")
        self.app = app
        self.phi = phi
        self.batch_grid = batch_grid
        self._params: dict[str, ThroughputParams] = dict(params)
        self._cache: dict[tuple, tuple[np.ndarray, ...]] = {}
        self._frac = np.linspace(0.0, 1.0, batch_grid)[None, :]
        self._measured_phi: float | None = None
        self._version = 0

    @classmethod
    def fit(
        cls,
        app: AppSpec,
        measurements: Mapping[str, Measurements],
        phi: PhiTable | float,
        batch_grid: int = 32,
    ) -> GoodputModel:
        """A model whose per-type parameters are fitted to ``measurements`` (one per type)."""
        params = {t: fit_throughput_params(m) for t, m in measurements.items()}
        return cls(app, params, phi, batch_grid=batch_grid)

    # -- parameters --------------------------------------------------------------------
    @property
    def version(self) -> int:
        """A counter that changes whenever the model's throughput parameters change (a refit,
        :meth:`set_params`): callers may reuse what they computed from the model while it stays
        the same. Goodput also depends on the noise scale (:meth:`noise_scale`)."""
        return self._version

    def _changed(self) -> None:
        """The parameters changed: drop cached grids and advance :attr:`version`."""
        self._cache.clear()
        self._version += 1

    @property
    def gpu_types(self) -> tuple[str, ...]:
        """GPU types this model can evaluate."""
        return tuple(self._params)

    @property
    def params(self) -> Mapping[str, ThroughputParams]:
        """Per-type throughput parameters (read-only view)."""
        return dict(self._params)

    def set_params(self, gpu_type: str, params: ThroughputParams) -> None:
        """Replace one type's parameters (drops cached evaluations)."""
        if not isinstance(params, ThroughputParams):
            raise InputError(f"params[{gpu_type}]", params, "must be a ThroughputParams")
        self._params[gpu_type] = params
        self._changed()

    @property
    def measured_phi(self) -> float | None:
        """The measured noise scale in use (samples), or None when ``phi`` is looked up by progress."""
        return self._measured_phi

    def set_measured_phi(self, phi: float | None) -> None:
        """Use a measured gradient noise scale (samples) instead of the ``phi`` table.

        Pollux and Sia estimate phi from the gradient statistics of the job's latest steps;
        the simulator feeds that value here. ``inf`` (no gradient signal) counts as 1e15;
        None goes back to the table.
        """
        if phi is None:
            self._measured_phi = None
            return
        try:
            value = float(phi)
        except (TypeError, ValueError):
            raise InputError("phi", phi, "must be a number > 0 or None") from None
        if not value > 0:
            raise InputError("phi", phi, "must be a number > 0 or None")
        self._measured_phi = min(value, 1e15)

    def _phi_at(self, progress: Any) -> float:
        p = min(work_fraction(progress), 1.0)  # the table ends at the job's end
        if self._measured_phi is not None:
            return self._measured_phi
        return self.phi.at(p)

    def noise_scale(self, progress: float = 0.0) -> float:
        """The gradient noise scale phi (samples) in use at ``progress``: the measured one when
        set, else the table's. With :attr:`version` it determines :meth:`goodput`."""
        return self._phi_at(progress)

    def max_local_bsz(self, gpu_type: str) -> int:
        """Largest local batch on one GPU of ``gpu_type`` (samples; max batch if unlisted)."""
        return int(self.app.max_local_bsz.get(gpu_type, self.app.max_batch_size))

    def _get_params(self, gpu_type: str) -> ThroughputParams:
        try:
            return self._params[gpu_type]
        except KeyError:
            raise InputError(
                "gpu_type", gpu_type, f"no throughput model; known: {list(self._params)}"
            ) from None

    # -- direct evaluation -------------------------------------------------------------
    def _check_run(self, num_nodes: Any, num_gpus: Any, local_bsz: Any, accum_steps: Any):
        n = _as_counts("num_nodes", num_nodes)
        k = _as_counts("num_gpus", num_gpus)
        if np.any(k < 1):
            raise InputError("num_gpus", num_gpus, "must be >= 1")
        if np.any(n < 1):
            raise InputError("num_nodes", num_nodes, "must be >= 1")
        if np.any(np.broadcast_to(k, np.broadcast_shapes(k.shape, n.shape)) < n):
            raise InputError("num_gpus", num_gpus, "must be >= num_nodes")
        m = np.asarray(local_bsz, dtype=float)
        if not np.all(np.isfinite(m)) or np.any(m <= 0):
            raise InputError("local_bsz", local_bsz, "must be > 0")
        s = _as_counts("accum_steps", accum_steps)
        return n, k, m, s

    def step_time(self, gpu_type: str, num_nodes: Any, num_gpus: Any, local_bsz: Any,
                  accum_steps: Any = 0) -> np.ndarray:
        """Seconds per optimizer step."""
        p = self._get_params(gpu_type)
        n, k, m, s = self._check_run(num_nodes, num_gpus, local_bsz, accum_steps)
        return step_time(p, n, k, m, s)

    def throughput(self, gpu_type: str, num_nodes: Any, num_gpus: Any, local_bsz: Any,
                   accum_steps: Any = 0) -> np.ndarray:
        """Samples per second with the given local batch and accumulation steps."""
        p = self._get_params(gpu_type)
        n, k, m, s = self._check_run(num_nodes, num_gpus, local_bsz, accum_steps)
        return throughput(p, n, k, m, s)

    def efficiency(self, batch_size: Any, progress: float = 0.0) -> np.ndarray:
        """Statistical efficiency of total batch ``batch_size`` at ``progress`` (0..1)."""
        m = np.asarray(batch_size, dtype=float)
        if not np.all(np.isfinite(m)) or np.any(m <= 0):
            raise InputError("batch_size", batch_size, "must be > 0")
        return efficiency(self._phi_at(progress), self.app.init_batch_size, m)

    # -- optimized goodput -------------------------------------------------------------
    def _rows_grid(self, par: np.ndarray, max_local: np.ndarray, n: np.ndarray,
                   k: np.ndarray) -> tuple[np.ndarray, ...]:
        """Flat configurations x batch grid: total batch, throughput, local batch m, accum s.

        ``par`` holds each row's 7 throughput parameters (NaN for an unknown type) and
        ``max_local`` its memory limit.
        """
        m0 = float(self.app.init_batch_size)
        hi = float(self.app.max_batch_size)
        grid = self.batch_grid
        n_col, k_col, ml = n[:, None], k[:, None], max_local[:, None]
        lo = np.maximum(m0, k_col)
        known = ~np.isnan(par[:, :1])
        valid = known & (k_col >= 1) & (n_col >= 1) & (k_col >= n_col) & (lo <= hi)
        lo_safe = np.where(valid, lo, 1.0)
        k_safe = np.where(valid, k_col, 1.0)
        cap = k_safe * ml  # largest batch without accumulation
        # Geometric grid on [lo, hi] plus the largest batches with 0..3 accumulation steps
        # (goodput often peaks just before one more accumulation step is needed).
        total = np.empty((len(n), grid + len(_EDGE_STEPS)))
        frac = self._frac
        np.multiply(lo_safe, np.exp(np.log(hi / lo_safe) * frac), out=total[:, :grid])
        np.clip(cap * _EDGE_STEPS[None, :], lo_safe, hi, out=total[:, grid:])
        # Fewest accumulation steps that fit memory; nearest local batch with M0 <= M <= hi.
        s1 = np.ceil(total / cap - 1e-9)
        ks = k_safe * s1
        m = np.rint(total / ks)
        np.maximum(m, np.ceil(m0 / ks - 1e-9), out=m)
        np.minimum(m, np.minimum(np.floor(hi / ks + 1e-9), ml), out=m)
        np.maximum(m, 1.0, out=m)
        batch = ks * m
        ok = valid & (batch <= hi) & (batch >= m0)
        p = np.where(known, par, 1.0)
        extra = np.maximum(k_safe - 2.0, 0.0)
        t_sync = np.where(n_col <= 1, p[:, 2:3] + p[:, 3:4] * extra, p[:, 4:5] + p[:, 5:6] * extra)
        t_sync = np.where(k_safe <= 1, 0.0, t_sync)
        t_grad = p[:, 0:1] + p[:, 1:2] * m
        # (t_grad^g + t_sync^g)^(1/g) = top * (1 + w^g)^(1/g), w = smaller / larger <= 1.
        g = p[:, 6:7]
        top = np.maximum(t_grad, t_sync)
        w = np.minimum(t_grad, t_sync) / top
        overlap = top * np.exp(np.log1p(np.exp(g * np.log(np.maximum(w, 1e-300)))) / g)
        thr = np.where(ok, batch / ((s1 - 1.0) * t_grad + overlap), 0.0)
        return batch, thr, m, s1 - 1.0

    def _evaluate(self, gpu_type: Any, num_nodes: Any, num_gpus: Any, progress: float):
        """Cached ``(shape, batch, throughput, m, s)`` grids and phi at ``progress``."""
        try:
            n = np.asarray(num_nodes, dtype=float)
            k = np.asarray(num_gpus, dtype=float)
        except (TypeError, ValueError):
            raise InputError("num_nodes/num_gpus", (num_nodes, num_gpus), "must be numeric") from None
        if isinstance(gpu_type, str):
            type_key: Any = gpu_type
        else:
            arr = gpu_type if isinstance(gpu_type, np.ndarray) else np.asarray(gpu_type, object)
            type_key = (arr.shape, tuple(arr.ravel().tolist()))  # cheap for object arrays too
        key = (type_key, n.shape, k.shape, n.tobytes(), k.tobytes())
        entry = self._cache.get(key)
        if entry is None:
            shared = (self._signature(), key)
            entry = GRIDS.get(shared)
            if entry is None:
                types = gpu_type if isinstance(gpu_type, str) else np.asarray(arr, dtype=str)
                entry = GRIDS.put(shared, self._build_grid(types, n, k))
            if len(self._cache) >= _CACHE_LIMIT:
                self._cache.clear()
            self._cache[key] = entry
        return entry, self._phi_at(progress)

    def _signature(self) -> tuple:
        """Everything a throughput grid depends on besides the configurations: the application's
        batch limits, the grid size and every type's parameters (recomputed when they change)."""
        sig = self.__dict__.get("_sig")
        if sig is None or sig[0] != self._version:
            app = self.app
            value = (app.init_batch_size, app.max_batch_size, tuple(sorted(app.max_local_bsz.items())),
                     self.batch_grid, tuple((t, p.as_array().tobytes()) for t, p in self._params.items()))
            sig = self._sig = (self._version, value)
        return sig[1]

    def _build_grid(self, types: str | np.ndarray, n: np.ndarray, k: np.ndarray):
        n = _as_counts("num_nodes", n)
        k = _as_counts("num_gpus", k)
        if isinstance(types, str):
            shape = np.broadcast_shapes(n.shape, k.shape)
        else:
            shape = np.broadcast_shapes(n.shape, k.shape, types.shape)
        n_flat = np.broadcast_to(n, shape).ravel()
        k_flat = np.broadcast_to(k, shape).ravel()
        if isinstance(types, str):
            p = self._params.get(types)
            row = p.as_array() if p is not None else np.full(7, np.nan)
            par = np.broadcast_to(row, (len(n_flat), 7))
            max_local = np.full(len(n_flat), float(self.max_local_bsz(types)))
        else:
            t_flat = np.broadcast_to(types, shape).ravel()
            par = np.full((len(t_flat), 7), np.nan)
            max_local = np.ones(len(t_flat))
            for name, params in self._params.items():  # a handful of types
                rows = t_flat == name
                par[rows] = params.as_array()
                max_local[rows] = self.max_local_bsz(name)
        batch, thr, m, s = self._rows_grid(par, max_local, n_flat, k_flat)
        for arr in (batch, thr, m, s):
            arr.setflags(write=False)
        return shape, batch, thr, m, s

    def goodput(self, gpu_type: str | Any, num_nodes: Any, num_gpus: Any,
                progress: float = 0.0) -> np.ndarray:
        """Best goodput (samples/s, M0-equivalent) per configuration; 0 where impossible.

        Impossible: unknown GPU type, zero GPUs or nodes, fewer GPUs than nodes, or more
        GPUs than the maximum batch size. ``num_nodes`` and ``num_gpus`` broadcast;
        ``gpu_type`` may also be an array of type names broadcast with them, so one call
        covers every candidate configuration of a job. ``progress`` is the fraction of
        ``app.total_work`` done (values above 1 count as 1); it selects phi.
        """
        (shape, batch, thr, _, _), phi = self._evaluate(gpu_type, num_nodes, num_gpus, progress)
        # max_i thr_i * (phi + M0) / (phi + M_i): the positive factor (phi + M0) comes out.
        best = (thr / (phi + batch)).max(axis=1, initial=0.0)
        return (best * (phi + self.app.init_batch_size)).reshape(shape)

    def optimize(self, gpu_type: str | Any, num_nodes: Any, num_gpus: Any,
                 progress: float = 0.0) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``(goodput, local_bsz, accum_steps)`` of the best batch per configuration.

        Impossible configurations get goodput 0, local batch 0 and 0 accumulation steps.
        """
        (shape, batch, thr, m, s), phi = self._evaluate(gpu_type, num_nodes, num_gpus, progress)
        gp = thr * ((phi + self.app.init_batch_size) / (phi + batch))
        best = np.argmax(gp, axis=1) if gp.shape[1] else np.zeros(len(gp), int)
        rows = np.arange(len(gp))
        good = gp[rows, best]
        feasible = good > 0
        local = np.where(feasible, m[rows, best], 0.0).astype(int)
        accum = np.where(feasible, s[rows, best], 0.0).astype(int)
        return good.reshape(shape), local.reshape(shape), accum.reshape(shape)


class ThroughputTable:
    """Rigid jobs with a known per-GPU throughput per type (the Gavel setting).

    ``goodput = num_gpus * rate[gpu_type]`` (units of ``rate``, e.g. samples/s or steps/s);
    0 for a type without a rate.
    """

    def __init__(self, rates: Mapping[str, float]) -> None:
        self.rates: dict[str, float] = {t: finite_number(f"rates[{t}]", rate, low=0.0) for t, rate in rates.items()}

    @property
    def gpu_types(self) -> tuple[str, ...]:
        """GPU types with a known rate."""
        return tuple(self.rates)

    def goodput(self, gpu_type: str | Any, num_nodes: Any, num_gpus: Any,
                progress: float = 0.0) -> np.ndarray:
        """``num_gpus * rate[gpu_type]`` broadcast with ``num_nodes`` (and ``gpu_type`` when it is
        an array of type names, as for :class:`GoodputModel`); 0 if the type is unknown."""
        n = _as_counts("num_nodes", num_nodes)
        k = _as_counts("num_gpus", num_gpus)
        if isinstance(gpu_type, str):
            rate = self.rates.get(gpu_type, 0.0)
        else:
            rate = np.array([self.rates.get(str(t), 0.0) for t in np.asarray(gpu_type).ravel()]).reshape(np.shape(gpu_type))
        k, n, rate = np.broadcast_arrays(k, n, rate)
        return np.where((n >= 1) & (k >= n), k * rate, 0.0)

    def throughput(self, gpu_type: str, num_nodes: Any, num_gpus: Any, *_: Any) -> np.ndarray:
        """Same as :meth:`goodput` (rigid jobs have no statistical-efficiency term)."""
        return self.goodput(gpu_type, num_nodes, num_gpus)
