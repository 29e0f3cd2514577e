"""The summary of one simulation: the papers' metrics, typed, printed in a few lines.

:class:`SimSummary` is what :meth:`SimResult.summary` returns. It is also a read-only mapping
(``summary["avg_jct_h"]``, ``dict(summary)``, ``summary.items()``) from the metric names, units
in the names, to their values, so tables and JSON take it as they took the former dict.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, fields
from typing import Any

__all__ = ["SimSummary"]


@dataclass(frozen=True, eq=False)
class SimSummary(Mapping[str, Any]):
    """The papers' metrics of one simulation, over its finished jobs (NaN where none finished).

    Attributes:
        policy: the policy's name.
        jobs, finished, rejected: jobs admitted, finished, refused before the first round.
        avg_jct_h, p99_jct_h: job completion time, mean and 99th percentile (h; the Sia
            artifact's percentile, no interpolation).
        makespan_h: first arrival to last completion (h).
        avg_queueing_delay_h: arrival to first GPUs, mean (h).
        gpu_hours_per_job: GPU-hours used per admitted job.
        restarts_per_job: restarts per admitted job.
        utilization: GPU-seconds used / (GPUs x makespan), in [0, 1].
        worst_ftf: Sia's finish-time fairness, worst job (JCT / (isolated time x mean active jobs)).
        ftf_rho_mean, ftf_rho_max: Hadar's (Themis) rho, JCT / isolated time with a 1/N share.
        policy_ms_median, policy_ms_p95: the policy's time per round (ms).
        policy_time_s: the policy's time in total (s).
        rounds: rounds simulated.
        stop_reason: ``"finished"``, ``"max_time"``, ``"max_rounds"``, ``"stalled"``, ...
        error: what went wrong when the run stopped early, else ``None``.
    """

    policy: str
    jobs: int
    finished: int
    rejected: int
    avg_jct_h: float
    p99_jct_h: float
    makespan_h: float
    avg_queueing_delay_h: float
    gpu_hours_per_job: float
    restarts_per_job: float
    utilization: float
    worst_ftf: float
    ftf_rho_mean: float
    ftf_rho_max: float
    policy_ms_median: float
    policy_ms_p95: float
    policy_time_s: float
    rounds: int
    stop_reason: str
    error: str | None

    # ------------------------------------------------------------ mapping
    def __getitem__(self, key: str) -> Any:
        if key not in _NAMES:
            raise KeyError(key)
        return getattr(self, key)

    def __iter__(self) -> Iterator[str]:
        return iter(_NAMES)

    def __len__(self) -> int:
        return len(_NAMES)

    def __contains__(self, key: object) -> bool:
        return key in _NAMES

    def to_dict(self) -> dict[str, Any]:
        """A plain dict (JSON), the metric names as keys."""
        return {name: getattr(self, name) for name in _NAMES}

    # ------------------------------------------------------------ text
    def __repr__(self) -> str:
        status = self.stop_reason + (f": {self.error}" if self.error else "")
        lines = [
            f"{self.policy}: {self.finished} of {self.jobs} jobs finished, {self.rejected} rejected; "
            f"{self.rounds} rounds ({status})",
            f"  JCT: average {_g(self.avg_jct_h)} h, p99 {_g(self.p99_jct_h)} h; makespan {_g(self.makespan_h)} h; "
            f"queueing delay: average {_g(self.avg_queueing_delay_h)} h",
            f"  GPU-hours per job {_g(self.gpu_hours_per_job)}; restarts per job {_g(self.restarts_per_job)}; "
            f"utilization {_g(self.utilization)}",
            f"  finish-time fairness: worst {_g(self.worst_ftf)}, rho mean {_g(self.ftf_rho_mean)}, "
            f"max {_g(self.ftf_rho_max)}",
            f"  policy time: {_g(self.policy_ms_median)} ms/round median, {_g(self.policy_ms_p95)} ms p95, "
            f"{_g(self.policy_time_s)} s in total",
        ]
        return "\n".join(lines)

    __str__ = __repr__


_NAMES = tuple(f.name for f in fields(SimSummary))


def _g(value: float) -> str:
    return f"{value:.3g}"
