"""Gradient statistics per epoch and batch size: the Sia simulator's statistical efficiency.

The Sia artifact's simulator takes a job's statistical efficiency from the validation run
*at the job's batch size*: during epoch ``e`` it reads ``grad_sqr`` and ``grad_var`` of row
``e`` of the two runs whose batch sizes bracket the job's, interpolates each linearly in the
batch size, and uses ``E(M) = (var + sqr) / (var + sqr * M / M0)``, which equals
``(phi + M0) / (phi + M)`` with ``phi = M0 * var / sqr``. An epoch ends when progress crosses
the smallest progress any run reached at the end of that epoch.

Measured noise scales grow with the batch size of the run that measured them (cifar10 at 50%
of training: phi 4,900 at batch 128, 19,000 at batch 4096), so this differs from a single
table of phi against progress (:class:`~heteroplan.perf.efficiency.PhiTable`, the median
over runs).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from heteroplan.errors import InputError
from heteroplan.inputs import work_fraction
from heteroplan.perf.measurements import ValidationRun

__all__ = ["GradStats"]


@dataclass(frozen=True)
class GradStats:
    """``grad_sqr`` / ``grad_var`` of validation runs, per batch size and epoch.

    Attributes:
        init_batch_size: M0 (samples); ``grad_var`` is normalized to it.
        batch_sizes: the runs' total batch sizes (samples), strictly increasing, shape (R,).
        epoch_ends: fraction of the total work done at the end of each epoch, strictly
            increasing, shape (E,).
        grad_sqr: squared gradient norm per run and epoch, shape (R, E), >= 0.
        grad_var: gradient variance per run and epoch, shape (R, E), >= 0.
    """

    init_batch_size: int
    batch_sizes: np.ndarray
    epoch_ends: np.ndarray
    grad_sqr: np.ndarray
    grad_var: np.ndarray

    def __post_init__(self) -> None:
        if isinstance(self.init_batch_size, bool) or not isinstance(self.init_batch_size, int | np.integer) \
                or self.init_batch_size < 1:
            raise InputError("GradStats.init_batch_size", self.init_batch_size, "must be an integer >= 1")
        bsz = np.atleast_1d(np.asarray(self.batch_sizes, dtype=float))
        ends = np.atleast_1d(np.asarray(self.epoch_ends, dtype=float))
        if bsz.ndim != 1 or len(bsz) == 0 or not np.all(np.isfinite(bsz)) or np.any(bsz <= 0) \
                or np.any(np.diff(bsz) <= 0):
            raise InputError("GradStats.batch_sizes", bsz.tolist(), "must be > 0 and strictly increasing")
        if ends.ndim != 1 or len(ends) == 0 or not np.all(np.isfinite(ends)) or np.any(ends <= 0) \
                or np.any(np.diff(ends) <= 0):
            raise InputError("GradStats.epoch_ends", ends.tolist(), "must be > 0 and strictly increasing")
        shape = (len(bsz), len(ends))
        arrays = {}
        for name in ("grad_sqr", "grad_var"):
            arr = np.asarray(getattr(self, name), dtype=float)
            if arr.shape != shape:
                raise InputError(f"GradStats.{name}", arr.shape, f"must have shape (runs, epochs) = {shape}")
            if not np.all(np.isfinite(arr)) or np.any(arr < 0):
                bad = arr[~(np.isfinite(arr) & (arr >= 0))].flat[0]
                raise InputError(f"GradStats.{name}", float(bad), "must be finite and >= 0")
            arrays[name] = arr
        object.__setattr__(self, "batch_sizes", bsz)
        object.__setattr__(self, "epoch_ends", ends)
        object.__setattr__(self, "grad_sqr", arrays["grad_sqr"])
        object.__setattr__(self, "grad_var", arrays["grad_var"])
        object.__setattr__(self, "init_batch_size", int(self.init_batch_size))

    @property
    def epochs(self) -> int:
        """Number of epochs covered."""
        return len(self.epoch_ends)

    def epoch(self, progress: float) -> int:
        """0-based epoch in progress at ``progress`` (fraction of total work; last epoch beyond 1)."""
        p = work_fraction(progress)
        return min(int(np.searchsorted(self.epoch_ends, p, side="right")), self.epochs - 1)

    def stats(self, batch_size: float, progress: float) -> tuple[float, float]:
        """``(grad_sqr, grad_var)`` at ``batch_size`` (samples; clamped to the runs' range)
        during the epoch at ``progress``, each interpolated linearly between the two runs
        whose batch sizes bracket ``batch_size``."""
        try:
            m = float(batch_size)
        except (TypeError, ValueError):
            raise InputError("batch_size", batch_size, "must be a number > 0") from None
        if not (m > 0 and np.isfinite(m)):
            raise InputError("batch_size", batch_size, "must be a number > 0")
        e = self.epoch(progress)
        sqr = float(np.interp(m, self.batch_sizes, self.grad_sqr[:, e]))
        var = float(np.interp(m, self.batch_sizes, self.grad_var[:, e]))
        return sqr, var

    def phi(self, batch_size: float, progress: float) -> float:
        """Gradient noise scale ``M0 * var / sqr`` (samples; inf where ``sqr`` is 0)."""
        sqr, var = self.stats(batch_size, progress)
        if sqr <= 0:
            return float("inf")
        return self.init_batch_size * var / sqr

    def efficiency(self, batch_size: float, progress: float) -> float:
        """Statistical efficiency of total batch ``batch_size`` relative to M0 (1 at M0)."""
        sqr, var = self.stats(batch_size, progress)
        scale = float(batch_size) / self.init_batch_size
        den = var + sqr * scale
        if den <= 0:  # no gradient signal recorded: count samples at face value
            return 1.0
        return (var + sqr) / den

    @classmethod
    def from_runs(cls, runs: Sequence[ValidationRun], init_batch_size: int, epochs: int) -> GradStats:
        """Statistics of the first ``epochs`` rows of each run (one row per epoch).

        Epoch ends are the smallest progress any run reached at the end of each epoch,
        as fractions of the last one. Rows with non-finite statistics take the previous
        finite row's value (the first finite row's for leading gaps).
        """
        if not runs:
            raise InputError("runs", runs, "need at least one validation run")
        if isinstance(epochs, bool) or not isinstance(epochs, int) or epochs < 1:
            raise InputError("epochs", epochs, "must be an integer >= 1")
        short = [r.batch_size for r in runs if len(r.progress) < epochs]
        if short:
            raise InputError("runs", short, f"runs at these batch sizes have fewer than {epochs} rows")
        runs = sorted(runs, key=lambda r: r.batch_size)
        ends = np.min(np.stack([r.progress[:epochs] for r in runs]), axis=0)
        ends = ends / ends[-1]
        sqr = np.stack([_fill(r.grad_sqr[:epochs]) for r in runs])
        var = np.stack([_fill(r.grad_var[:epochs]) for r in runs])
        return cls(init_batch_size, np.array([r.batch_size for r in runs], float), ends, sqr, var)

    def to_dict(self) -> dict[str, Any]:
        """Plain dict (for JSON; statistics rounded to 6 significant digits)."""
        def sig(a: np.ndarray) -> list:
            return [[float(f"{x:.6g}") for x in row] for row in a]

        return {
            "init_batch_size": self.init_batch_size,
            "batch_sizes": [float(x) for x in self.batch_sizes],
            "epoch_ends": [float(f"{x:.8g}") for x in self.epoch_ends],
            "grad_sqr": sig(self.grad_sqr),
            "grad_var": sig(self.grad_var),
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> GradStats:
        """Inverse of :meth:`to_dict`."""
        try:
            return cls(int(data["init_batch_size"]), np.asarray(data["batch_sizes"], float),
                       np.asarray(data["epoch_ends"], float), np.asarray(data["grad_sqr"], float),
                       np.asarray(data["grad_var"], float))
        except KeyError as exc:
            raise InputError("grad_stats", sorted(data), f"missing key {exc}") from None


def _fill(values: np.ndarray) -> np.ndarray:
    """Non-finite or negative entries replaced by the previous valid one (first valid for leading)."""
    v = np.asarray(values, dtype=float).copy()
    ok = np.isfinite(v) & (v >= 0)
    if not ok.any():
        raise InputError("grad stats", v.tolist()[:5], "no finite values in a validation run")
    idx = np.where(ok, np.arange(len(v)), -1)
    np.maximum.accumulate(idx, out=idx)
    first = int(np.argmax(ok))
    idx[idx < 0] = first
    return v[idx]
