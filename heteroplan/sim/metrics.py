"""Simulation results and the metrics the Sia paper reports.

Times in seconds internally; summaries in hours where the paper uses hours.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from heteroplan._html import table, title

__all__ = ["JobRecord", "SimResult", "compare_table"]


@dataclass
class JobRecord:
    """Outcome of one job (seconds, GPU-seconds)."""

    name: str
    application: str
    arrival_time: float
    start_time: float | None
    finish_time: float | None
    restarts: int
    gpu_seconds: float
    fraction_done: float
    isolated_time: float

    @property
    def jct(self) -> float | None:
        """Job completion time: finish - arrival (s); None if unfinished."""
        return None if self.finish_time is None else self.finish_time - self.arrival_time

    @property
    def queueing_delay(self) -> float | None:
        return None if self.start_time is None else self.start_time - self.arrival_time


@dataclass
class SimResult:
    """Everything a simulation produced.

    Attributes:
        jobs: one record per job.
        timeline: per round ``(time s, GPUs in use per type, active jobs)``.
        policy_times: seconds the policy took each round.
        events: ``(time s, job, event, detail)``.
        error: set when the run stopped early (the metrics cover what ran).
    """

    policy: str
    cluster: str
    round_length: float
    capacity: dict[str, int]
    jobs: list[JobRecord] = field(default_factory=list)
    timeline: list[tuple[float, dict[str, int], int]] = field(default_factory=list)
    policy_times: list[float] = field(default_factory=list)
    events: list[tuple[float, str, str, str]] = field(default_factory=list)
    end_time: float = 0.0
    error: str | None = None

    # ------------------------------------------------------------ metrics
    def finished(self) -> list[JobRecord]:
        return [j for j in self.jobs if j.finish_time is not None]

    def summary(self) -> dict[str, Any]:
        """The paper's metrics: JCT (h), makespan (h), GPU-hours per job, restarts, FTF, policy time (ms)."""
        done = self.finished()
        jct = np.array([j.jct for j in done]) if done else np.zeros(0)
        first = min((j.arrival_time for j in self.jobs), default=0.0)
        last = max((j.finish_time for j in done), default=first)
        makespan = last - first
        gpu_s = sum(j.gpu_seconds for j in self.jobs)
        total_gpus = sum(self.capacity.values())
        busy = sum(sum(u.values()) for _, u, _ in self.timeline) * self.round_length
        ftf = [j.jct / (j.isolated_time * max(1.0, self._avg_active(j))) for j in done if np.isfinite(j.isolated_time)]
        pt = np.array(self.policy_times) if self.policy_times else np.zeros(1)
        return {
            "policy": self.policy,
            "jobs": len(self.jobs),
            "finished": len(done),
            "avg_jct_h": float(jct.mean() / 3600) if jct.size else float("nan"),
            "p99_jct_h": float(np.percentile(jct, 99) / 3600) if jct.size else float("nan"),
            "makespan_h": makespan / 3600,
            "gpu_hours_per_job": gpu_s / 3600 / max(len(self.jobs), 1),
            "restarts_per_job": float(np.mean([j.restarts for j in self.jobs])) if self.jobs else 0.0,
            "utilization": busy / (total_gpus * max(self.end_time - first, self.round_length)) if total_gpus else 0.0,
            "avg_queueing_h": float(np.mean([j.queueing_delay for j in self.jobs if j.queueing_delay is not None] or [0]) / 3600),
            "worst_ftf": float(max(ftf)) if ftf else float("nan"),
            "policy_ms_median": float(np.median(pt) * 1e3),
            "policy_ms_p95": float(np.percentile(pt, 95) * 1e3),
            "error": self.error,
        }

    def _avg_active(self, job: JobRecord) -> float:
        """Mean number of active jobs over the rounds of ``job``'s life (the contention it saw)."""
        if job.finish_time is None:
            return 1.0
        counts = [n for t, _, n in self.timeline if job.arrival_time <= t < job.finish_time]
        return float(np.mean(counts)) if counts else 1.0

    def gpus_over_time(self) -> tuple[np.ndarray, dict[str, np.ndarray]]:
        """Times (s) and GPUs in use per type at each round."""
        times = np.array([t for t, _, _ in self.timeline])
        per_type = {k: np.array([u.get(k, 0) for _, u, _ in self.timeline]) for k in self.capacity}
        return times, per_type

    # ------------------------------------------------------------ output
    def to_dict(self) -> dict[str, Any]:
        return {
            "summary": self.summary(),
            "jobs": [asdict(j) | {"jct": j.jct} for j in self.jobs],
            "timeline": [{"time": t, "in_use": u, "active": n} for t, u, n in self.timeline],
            "policy_times": self.policy_times,
            "events": self.events,
        }

    def to_json(self, path: str | Path) -> Path:
        path = Path(path)
        path.write_text(json.dumps(self.to_dict(), indent=1, default=float))
        return path

    def to_dataframe(self, what: str = "jobs") -> Any:
        """A pandas DataFrame: ``"jobs"`` (one row per job), ``"gpus"`` (GPUs in use per type
        over time) or ``"summary"`` (one row); see :mod:`heteroplan.sim.tables`."""
        from heteroplan.sim import tables

        frames = {"jobs": tables.jobs_frame, "gpus": tables.gpus_frame, "summary": lambda r: tables.summary_frame([r])}
        if what not in frames:
            from heteroplan.errors import InputError

            raise InputError("what", what, f"choose one of {sorted(frames)}")
        return frames[what](self)

    def _repr_html_(self) -> str:
        return title(f"Simulation: {self.policy} on {self.cluster}") + table(("metric", "value"), self.summary().items())


COLUMNS = ("policy", "finished", "avg_jct_h", "p99_jct_h", "makespan_h", "gpu_hours_per_job", "restarts_per_job",
           "utilization", "worst_ftf", "policy_ms_median", "policy_ms_p95")


def compare_table(results: list[SimResult]) -> str:
    """A text table of the summaries side by side."""
    rows = [r.summary() for r in results]
    widths = {c: max(len(c), *(len(_fmt(r[c])) for r in rows)) for c in COLUMNS}
    lines = ["  ".join(c.rjust(widths[c]) for c in COLUMNS), "  ".join("-" * widths[c] for c in COLUMNS)]
    for r in rows:
        lines.append("  ".join(_fmt(r[c]).rjust(widths[c]) for c in COLUMNS))
    for r in rows:
        if r["error"]:
            lines.append(f"! {r['policy']}: {r['error']}")
    return "\n".join(lines)


def _fmt(v: Any) -> str:
    return f"{v:.3g}" if isinstance(v, float) else str(v)
