"""Statistical efficiency from the gradient noise scale (Pollux).

With M0 the initial batch size and phi the gradient noise scale (samples), training with
total batch M makes ``E(M) = (phi + M0) / (phi + M)`` as much progress per sample as with M0;
E(M0) = 1 and E decreases in M. phi is ``M0 * grad_var / grad_sqr`` from the gradient
statistics (``grad_var`` normalized to batch M0) and grows as training progresses.

:class:`PhiTable` holds phi against the fraction of training done (0..1) and interpolates
log(phi) linearly; :meth:`PhiTable.from_runs` builds it from the traces' validation runs.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from heteroplan.errors import InputError
from heteroplan.perf.measurements import ValidationRun

__all__ = ["PhiTable", "efficiency"]


def efficiency(phi: Any, init_batch_size: float, batch_size: Any) -> np.ndarray:
    """``(phi + M0) / (phi + M)``: progress per sample at batch M relative to batch M0."""
    phi = np.asarray(phi, dtype=float)
    m = np.asarray(batch_size, dtype=float)
    return (phi + init_batch_size) / (phi + m)


@dataclass(frozen=True)
class PhiTable:
    """Gradient noise scale phi (samples) against training progress (fraction 0..1).

    Attributes:
        progress: increasing fractions of total work in [0, 1].
        phi: noise scale at each progress point (> 0).
    """

    progress: np.ndarray
    phi: np.ndarray

    def __post_init__(self) -> None:
        prog = np.atleast_1d(np.asarray(self.progress, dtype=float))
        phi = np.atleast_1d(np.asarray(self.phi, dtype=float))
        if prog.shape != phi.shape or prog.ndim != 1 or len(prog) == 0:
            raise InputError("PhiTable.phi", phi.shape, f"must match progress shape {prog.shape}")
        if not (np.all(np.isfinite(phi)) and np.all(phi > 0)):
            raise InputError("PhiTable.phi", phi.min(), "must be finite and > 0")
        if not np.all(np.isfinite(prog)) or np.any(np.diff(prog) <= 0):
            raise InputError("PhiTable.progress", prog, "must be finite and strictly increasing")
        object.__setattr__(self, "progress", prog)
        object.__setattr__(self, "phi", phi)
        object.__setattr__(self, "_log_phi", np.log(phi))
        object.__setattr__(self, "_prog_list", prog.tolist())
        object.__setattr__(self, "_log_list", np.log(phi).tolist())

    @classmethod
    def constant(cls, phi: float) -> PhiTable:
        """A noise scale that does not change during training."""
        return cls(np.array([0.0]), np.array([float(phi)]))

    def __call__(self, progress: Any) -> np.ndarray:
        """phi at ``progress`` (fraction of total work; clamped to the table's ends)."""
        p = np.asarray(progress, dtype=float)
        if np.any(np.isnan(p)) or np.any(p < 0):
            raise InputError("progress", progress, "must be >= 0 (fraction of total work)")
        if len(self.progress) == 1:
            return np.full(p.shape, self.phi[0]) if p.ndim else np.float64(self.phi[0])
        return np.exp(np.interp(p, self.progress, self._log_phi))  # type: ignore[attr-defined]

    def at(self, progress: float) -> float:
        """phi at one progress value (fast scalar path of :meth:`__call__`)."""
        prog: list[float] = self._prog_list  # type: ignore[attr-defined]
        lp: list[float] = self._log_list  # type: ignore[attr-defined]
        if len(prog) == 1 or progress <= prog[0]:
            return math.exp(lp[0])
        if progress >= prog[-1]:
            return math.exp(lp[-1])
        i = bisect.bisect_right(prog, progress)
        w = (progress - prog[i - 1]) / (prog[i] - prog[i - 1])
        return math.exp(lp[i - 1] + w * (lp[i] - lp[i - 1]))

    @classmethod
    def from_runs(
        cls, runs: Sequence[ValidationRun], init_batch_size: int, smooth: int = 5
    ) -> PhiTable:
        """phi per epoch row: the median (in log space) over runs at all batch sizes.

        Each run's phi is ``M0 * grad_var / grad_sqr``; rows whose statistics are zero or
        non-finite are ignored. Progress is normalized by the M0 run's final progress (the
        smallest batch size's run if none has exactly M0). ``smooth`` > 1 applies a
        centered running median of that many rows (in log space).
        """
        if not runs:
            raise InputError("runs", runs, "need at least one validation run")
        ref = min(runs, key=lambda r: abs(r.batch_size - init_batch_size))
        total = float(ref.progress[-1])
        rows = min(len(r.progress) for r in runs)
        with np.errstate(divide="ignore", invalid="ignore"):
            logs = np.stack([
                np.log(init_batch_size * r.grad_var[:rows] / r.grad_sqr[:rows]) for r in runs
            ])
        logs = np.where(np.isfinite(logs), logs, np.nan)
        ok = ~np.all(np.isnan(logs), axis=0)
        log_phi = np.nanmedian(logs[:, ok], axis=0)
        if smooth > 1 and len(log_phi) > smooth:
            # Centered running median over `smooth` rows damps epoch-to-epoch noise.
            half = smooth // 2
            padded = np.pad(log_phi, half, mode="edge")
            windows = np.lib.stride_tricks.sliding_window_view(padded, 2 * half + 1)
            log_phi = np.median(windows, axis=1)
        frac = ref.progress[:rows][ok] / total
        keep = np.concatenate([[True], np.diff(frac) > 0])
        return cls(frac[keep], np.exp(log_phi[keep]))

    def to_dict(self) -> dict[str, list[float]]:
        """Plain dict (for JSON)."""
        return {"progress": [float(x) for x in self.progress], "phi": [float(x) for x in self.phi]}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> PhiTable:
        """Inverse of :meth:`to_dict`."""
        return cls(np.asarray(data["progress"], float), np.asarray(data["phi"], float))
