"""Pollux/Sia throughput model of data-parallel training on one GPU type.

For K GPUs on N nodes, local batch m (samples per GPU) and s gradient-accumulation steps:

* compute time per micro-step ``T_grad = alpha_c + beta_c * m``;
* synchronization ``T_sync = 0`` for K = 1, ``alpha_r + beta_r * (K - 2)`` on one node,
  ``alpha_n + beta_n * (K - 2)`` across nodes;
* step time ``T = s * T_grad + (T_grad**gamma + T_sync**gamma) ** (1 / gamma)``
  (gamma = 1: no overlap of compute and sync; gamma -> inf: perfect overlap);
* throughput ``K * m * (s + 1) / T`` samples/s.

All times in seconds. Functions broadcast over numpy arrays.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, fields
from typing import Any

import numpy as np

from heteroplan.errors import InputError

__all__ = ["ThroughputParams", "compute_time", "sync_time", "step_time", "throughput"]


@dataclass(frozen=True)
class ThroughputParams:
    """Fitted parameters of the throughput model for one job on one GPU type.

    Attributes:
        alpha_c: fixed compute time per micro-step (s).
        beta_c: compute time per sample (s/sample).
        alpha_r: sync time of 2 GPUs on one node (s).
        beta_r: extra sync time per extra GPU on one node (s/GPU).
        alpha_n: sync time of 2 GPUs across nodes (s).
        beta_n: extra sync time per extra GPU across nodes (s/GPU).
        gamma: overlap exponent (>= 1).
    """

    alpha_c: float
    beta_c: float
    alpha_r: float = 0.0
    beta_r: float = 0.0
    alpha_n: float = 0.0
    beta_n: float = 0.0
    gamma: float = 1.0

    def __post_init__(self) -> None:
        for name in _FIELDS:  # (asdict would deep-copy: this runs on every refit)
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int | float | np.floating):
                raise InputError(f"ThroughputParams.{name}", value, "must be a number")
            if not math.isfinite(value) or value < 0:
                raise InputError(f"ThroughputParams.{name}", value, "must be finite and >= 0")
            object.__setattr__(self, name, float(value))
        if self.gamma < 1.0:
            raise InputError("ThroughputParams.gamma", self.gamma, "must be >= 1")
        if self.alpha_c + self.beta_c <= 0:
            raise InputError("ThroughputParams.alpha_c", self.alpha_c, "compute time must be > 0")

    def to_dict(self) -> dict[str, float]:
        """Plain dict (for JSON)."""
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ThroughputParams:
        """Inverse of :meth:`to_dict`."""
        return cls(**{k: float(v) for k, v in data.items()})

    def as_array(self) -> np.ndarray:
        """``[alpha_c, beta_c, alpha_r, beta_r, alpha_n, beta_n, gamma]``."""
        return np.array([self.alpha_c, self.beta_c, self.alpha_r, self.beta_r,
                         self.alpha_n, self.beta_n, self.gamma])

    @property
    def has_sync(self) -> bool:
        """True when any synchronization cost is modelled."""
        return (self.alpha_r + self.beta_r + self.alpha_n + self.beta_n) > 0


_FIELDS = tuple(f.name for f in fields(ThroughputParams))


def compute_time(p: ThroughputParams, local_bsz: Any) -> np.ndarray:
    """Compute time of one micro-step of ``local_bsz`` samples per GPU (s)."""
    return p.alpha_c + p.beta_c * np.asarray(local_bsz, dtype=float)


def sync_time(p: ThroughputParams, num_nodes: Any, num_gpus: Any) -> np.ndarray:
    """Gradient synchronization time (s); 0 on one GPU."""
    k = np.asarray(num_gpus, dtype=float)
    n = np.asarray(num_nodes, dtype=float)
    extra = np.maximum(k - 2.0, 0.0)
    t = np.where(n <= 1, p.alpha_r + p.beta_r * extra, p.alpha_n + p.beta_n * extra)
    return np.where(k <= 1, 0.0, t)


def _combine(t_grad: np.ndarray, t_sync: np.ndarray, gamma: float) -> np.ndarray:
    """``(t_grad**g + t_sync**g)**(1/g)`` computed without overflow."""
    if gamma == 1.0:
        return t_grad + t_sync
    top = np.maximum(t_grad, t_sync)
    safe = np.where(top > 0, top, 1.0)
    ratio_g = (t_grad / safe) ** gamma + (t_sync / safe) ** gamma
    return top * ratio_g ** (1.0 / gamma)


def step_time(
    p: ThroughputParams, num_nodes: Any, num_gpus: Any, local_bsz: Any, accum_steps: Any = 0
) -> np.ndarray:
    """Seconds per optimizer step with ``accum_steps`` extra accumulation micro-steps."""
    t_grad = compute_time(p, local_bsz)
    t_sync = sync_time(p, num_nodes, num_gpus)
    s = np.asarray(accum_steps, dtype=float)
    return s * t_grad + _combine(t_grad, t_sync, p.gamma)


def throughput(
    p: ThroughputParams, num_nodes: Any, num_gpus: Any, local_bsz: Any, accum_steps: Any = 0
) -> np.ndarray:
    """Samples per second: ``num_gpus * local_bsz * (accum_steps + 1) / step_time``."""
    k = np.asarray(num_gpus, dtype=float)
    m = np.asarray(local_bsz, dtype=float)
    s = np.asarray(accum_steps, dtype=float)
    return k * m * (s + 1.0) / step_time(p, num_nodes, num_gpus, local_bsz, accum_steps)
