"""What each simulation metric is: a human label, its unit and its physical range.

One table for every place a metric is shown: sweep summaries (intervals are clipped to the
range), plot axes and titles (the label with its unit), never the raw column name.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

__all__ = ["Quantity", "METRICS", "quantity"]


@dataclass(frozen=True)
class Quantity:
    """A metric's name (the column / key), label, unit and the range its values can take.

    Attributes:
        name: the column name, units in it (``avg_jct_h``).
        label: what a reader sees (``"average JCT"``).
        unit: ``"h"``, ``"ms"``, ``"fraction"``, ... (``""`` for counts and ratios without one).
        lower, upper: the physical range (utilisation in ``[0, 1]``, times ``>= 0``).
    """

    name: str
    label: str
    unit: str = ""
    lower: float = -math.inf
    upper: float = math.inf

    @property
    def axis_label(self) -> str:
        """``"average JCT (h)"``: the label with its unit."""
        return f"{self.label} ({self.unit})" if self.unit else self.label

    def clip(self, value: float) -> float:
        """``value`` moved into ``[lower, upper]`` (NaN stays NaN)."""
        return value if math.isnan(value) else min(max(value, self.lower), self.upper)


_NONNEG = 0.0
METRICS: dict[str, Quantity] = {q.name: q for q in (
    Quantity("jobs", "jobs admitted", "", _NONNEG),
    Quantity("finished", "jobs finished", "", _NONNEG),
    Quantity("rejected", "jobs rejected", "", _NONNEG),
    Quantity("avg_jct_h", "average JCT", "h", _NONNEG),
    Quantity("p99_jct_h", "99th-percentile JCT", "h", _NONNEG),
    Quantity("makespan_h", "makespan", "h", _NONNEG),
    Quantity("avg_queueing_delay_h", "average queueing delay", "h", _NONNEG),
    Quantity("gpu_hours_per_job", "GPU-hours per job", "GPU-h", _NONNEG),
    Quantity("restarts_per_job", "restarts per job", "", _NONNEG),
    Quantity("utilization", "GPU utilisation", "fraction of GPU-time", _NONNEG, 1.0),
    Quantity("worst_ftf", "worst finish-time fairness", "ratio", _NONNEG),
    Quantity("ftf_rho_mean", "mean finish-time fairness rho", "ratio", _NONNEG),
    Quantity("ftf_rho_max", "worst finish-time fairness rho", "ratio", _NONNEG),
    Quantity("policy_ms_median", "policy time per round, median", "ms", _NONNEG),
    Quantity("policy_ms_p95", "policy time per round, 95th percentile", "ms", _NONNEG),
    Quantity("policy_time_s", "policy time in total", "s", _NONNEG),
    Quantity("rounds", "rounds simulated", "", _NONNEG),
    Quantity("wall_s", "wall time", "s", _NONNEG),
)}


def quantity(name: str) -> Quantity:
    """The :class:`Quantity` of a metric column; an unknown one gets its name as label, no unit
    and an unbounded range."""
    return METRICS.get(name) or Quantity(name, name.replace("_", " "))
