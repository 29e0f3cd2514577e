"""Simulation results and the metrics the Sia paper reports.

Times in seconds internally; summaries in hours where the paper uses hours.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from heteroplan._html import table, title
from heteroplan.atomic_json import write_json_atomic
from heteroplan.errors import InputError
from heteroplan.inputs import enum_choice
from heteroplan.names import printable
from heteroplan.policies.base import Allocation
from heteroplan.scheduling.decisions import RoundDecisions
from heteroplan.scheduling.records import JobRecord
from heteroplan.sim.events import SimEvent
from heteroplan.sim.summary import SimSummary
from heteroplan.sim.tables import FrameKind, gpus_frame, jobs_frame, summary_frame

if TYPE_CHECKING:  # pragma: no cover
    import pandas as pd

__all__ = ["Comparison", "JobRecord", "SimResult", "SimSummary", "compare_table"]



def artifact_p99(values: np.ndarray) -> float:
    """The 99th percentile as the Sia artifact reports it: ``sorted(values)[int(0.99 N)]`` (no interpolation)."""
    v = np.sort(np.asarray(values, dtype=float).reshape(-1))
    return float(v[min(len(v) - 1, int(0.99 * len(v)))])

@dataclass(frozen=True, repr=False)
class SimResult:
    """Everything a simulation produced: per-job records and per-round logs (plain data).

    Attributes:
        policy, cluster: names.
        round_length: seconds per round.
        capacity: GPUs per type.
        jobs: one record per admitted job (rejected jobs are in ``rejected``).
        timeline: per round ``(time s, GPUs in use per type, active jobs)``.
        policy_times: seconds the policy took each round.
        solve_gaps: each round's relative gap of the policy's solve to its bound (``None`` in
            rounds where the policy reports none; see ``RoundDecisions.solve_gap``).
        events: every start, restart, preemption and finish, in time order within a round
            (:class:`~heteroplan.sim.events.SimEvent`).
        end_time: simulated time the run stopped (s).
        rounds: rounds simulated.
        rejected: ``{job: reason}`` for jobs refused before the first round (they can never fit).
        stop_reason: ``"finished"``, ``"max_time"``, ``"max_rounds"``, ``"stalled"``; on a result
            attached to an exception, ``"error"`` or ``"interrupted"``.
        error: what went wrong when the run stalled (``None`` otherwise).
        decisions: every round's decisions as the scheduling session made them
            (:class:`~heteroplan.scheduling.decisions.RoundDecisions`) when recorded
            (``simulate(..., record=True)``), but for ``WAIT`` (a job without GPUs that had
            none: the timeline counts them); :attr:`schedule` is their allocations.
    """

    policy: str
    cluster: str
    round_length: float
    capacity: Mapping[str, int]
    jobs: tuple[JobRecord, ...] = ()
    timeline: tuple[tuple[float, Mapping[str, int], int], ...] = ()
    policy_times: tuple[float, ...] = ()
    solve_gaps: tuple[float | None, ...] = ()
    events: tuple[SimEvent, ...] = ()
    end_time: float = 0.0
    rounds: int = 0
    rejected: Mapping[str, str] = field(default_factory=dict)
    stop_reason: str = "finished"
    error: str | None = None
    decisions: tuple[RoundDecisions, ...] = ()

    @property
    def schedule(self) -> tuple[tuple[float, dict[str, Allocation]], ...]:
        """Every recorded round's allocations: ``(time s, {job: Allocation})`` (jobs holding GPUs)."""
        return tuple((d.time, dict(d.allocations)) for d in self.decisions)

    # ------------------------------------------------------------ per job
    def finished(self) -> list[JobRecord]:
        return [j for j in self.jobs if j.finish_time is not None]

    @property
    def completion(self) -> dict[str, float]:
        """Finish time (s) of every finished job."""
        return {j.job_id: j.finish_time for j in self.jobs if j.finish_time is not None}

    @property
    def first_start(self) -> dict[str, float]:
        """First time (s) each started job got GPUs."""
        return {j.job_id: j.start_time for j in self.jobs if j.start_time is not None}

    @property
    def unfinished(self) -> list[str]:
        """Admitted jobs that did not finish (sorted)."""
        return sorted(j.job_id for j in self.jobs if j.finish_time is None)

    # ------------------------------------------------------------ metrics
    def summary(self) -> SimSummary:
        """The papers' metrics over finished jobs, as a :class:`~heteroplan.sim.summary.SimSummary`
        (typed attributes; also a read-only mapping from metric name to value; prints in a few lines).

        JCT, makespan (first arrival to last completion) and queueing delay in hours; GPU-hours
        per job; restarts per job; utilization (GPU-seconds used / (GPUs x the span from the first arrival to
        the last finish, or to ``end_time`` while jobs are unfinished));
        finish-time fairness two ways: ``worst_ftf`` (Sia: JCT over the isolated time times
        the mean number of active jobs) and ``ftf_rho_mean`` / ``ftf_rho_max`` (Hadar, Themis
        rho: JCT over the isolated time with a 1/N share of the cluster's GPUs); policy time
        per round (ms) and in total (s).
        """
        done = self.finished()
        jct = np.array([j.jct_s for j in done]) if done else np.zeros(0)
        first = min((j.arrival_time for j in done), default=0.0)
        makespan = max((j.finish_time for j in done), default=first) - first
        total_gpus = sum(self.capacity.values())
        used = sum(j.gpu_seconds for j in self.jobs)
        # utilisation over the window every job's GPU-seconds lie in: from the first admitted arrival
        # to the last finish, or to the end of the run while jobs are unfinished (the makespan of the
        # finished jobs alone left out the time unfinished jobs held GPUs: 1.23 was reported)
        unfinished = len(done) < len(self.jobs)
        window = (max(max((j.finish_time for j in done), default=0.0), self.end_time if unfinished else 0.0)
                  - min((j.arrival_time for j in self.jobs), default=0.0))
        finite = [j for j in done if np.isfinite(j.isolated_time) and j.isolated_time > 0]
        ftf = np.array([j.jct_s / (j.isolated_time * max(1.0, j.avg_active)) for j in finite])
        rho = np.array([j.jct_s / (j.isolated_time * max(1.0, j.avg_active * j.requested_gpus / max(total_gpus, 1)))
                        for j in finite])
        queue = np.array([j.queueing_delay_s for j in done])
        pt = np.array(self.policy_times) if self.policy_times else np.zeros(1)
        nan = float("nan")
        return SimSummary(
            policy=self.policy,
            jobs=len(self.jobs),
            finished=len(done),
            rejected=len(self.rejected),
            avg_jct_h=float(jct.mean() / 3600) if jct.size else nan,
            p99_jct_h=artifact_p99(jct) / 3600 if jct.size else nan,
            makespan_h=float(makespan / 3600),
            avg_queueing_delay_h=float(queue.mean() / 3600) if queue.size else nan,
            gpu_hours_per_job=float(used / 3600 / max(len(self.jobs), 1)),
            restarts_per_job=float(np.mean([j.restarts for j in self.jobs])) if self.jobs else 0.0,
            utilization=float(used / (total_gpus * window)) if total_gpus and window > 0 else 0.0,
            worst_ftf=float(ftf.max()) if ftf.size else nan,
            ftf_rho_mean=float(rho.mean()) if rho.size else nan,
            ftf_rho_max=float(rho.max()) if rho.size else nan,
            policy_ms_median=float(np.median(pt) * 1e3),
            policy_ms_p95=float(np.percentile(pt, 95) * 1e3),
            policy_time_s=float(sum(self.policy_times)),
            rounds=self.rounds,
            stop_reason=self.stop_reason,
            error=self.error,
        )

    def gpus_over_time(self) -> tuple[np.ndarray, dict[str, np.ndarray]]:
        """Times (s) and GPUs in use per type at each round."""
        times = np.array([t for t, _, _ in self.timeline])
        per_type = {k: np.array([u.get(k, 0) for _, u, _ in self.timeline]) for k in self.capacity}
        return times, per_type

    # ------------------------------------------------------------ output
    def to_dict(self) -> dict[str, Any]:
        return {
            "summary": self.summary().to_dict(),
            # the record's fields (seconds), its derived times with their unit
            "jobs": [asdict(j) | {"jct_s": j.jct_s, "queueing_delay_s": j.queueing_delay_s}
                     for j in self.jobs],
            "rejected": dict(self.rejected),
            "timeline": [{"time": t, "in_use": dict(u), "active": n} for t, u, n in self.timeline],
            "policy_times": list(self.policy_times),
            "solve_gaps": list(self.solve_gaps),
            "events": [e.to_list() for e in self.events],
        }

    def to_json(self, path: str | Path) -> Path:
        """Write :meth:`to_dict` as JSON to ``path`` (atomically) and return the path."""
        path = Path(path)
        write_json_atomic(path, self.to_dict(), default=float)
        return path

    def to_dataframe(self, what: FrameKind | str = FrameKind.JOBS) -> Any:
        """A pandas DataFrame (:class:`~heteroplan.sim.tables.FrameKind` or its value): ``"jobs"``
        (one row per job), ``"gpus"`` (GPUs in use per type over time) or ``"summary"`` (one row);
        see :mod:`heteroplan.sim.tables`."""
        frames = {FrameKind.JOBS: jobs_frame, FrameKind.GPUS: gpus_frame,
                  FrameKind.SUMMARY: lambda r: summary_frame([r])}
        return frames[enum_choice(FrameKind, "what", what)](self)

    def __repr__(self) -> str:
        """A few lines: what ran, where, how far, and the summary (the records stay out of it)."""
        head = (f"SimResult({self.policy} on {self.cluster}: {len(self.jobs)} jobs, {self.rounds} rounds of "
                f"{self.round_length:g} s to {self.end_time / 3600:.3g} h)")
        return head + "\n" + repr(self.summary())

    def _repr_html_(self) -> str:
        return title(f"Simulation: {self.policy} on {self.cluster}") + table(("metric", "value"), self.summary().items())


COLUMNS = ("policy", "finished", "avg_jct_h", "p99_jct_h", "makespan_h", "gpu_hours_per_job", "restarts_per_job",
           "utilization", "worst_ftf", "ftf_rho_mean", "policy_ms_median", "policy_ms_p95")


def compare_table(results: list[SimResult], columns: tuple[str, ...] = COLUMNS) -> str:
    """A text table of the summaries side by side: a row per result, ``columns`` (metric names,
    units in them) right-aligned, 3 significant digits; the errors of runs that stopped early below.
    No results: the header alone."""
    results = list(results) if isinstance(results, Iterable) and not isinstance(results, SimResult | str) else [results]
    bad = next((r for r in results if not isinstance(r, SimResult)), None)
    if bad is not None:  # was a TypeError ('int' object is not iterable) or an AttributeError (summary)
        raise InputError("results", bad, "must be a list of SimResult (compare_policies(...) returns one)")
    rows = [r.summary() for r in results]
    widths = {c: max([len(c), *(len(_fmt(r[c])) for r in rows)]) for c in columns}
    lines = [*table_header(columns, widths), *(table_row(r, columns, widths) for r in rows)]
    for r in rows:
        if r["error"]:
            lines.append(f"! {printable(r['policy'])}: {printable(r['error'])}")
    return "\n".join(lines)


def table_widths(columns: tuple[str, ...], policies: list[str]) -> dict[str, int]:
    """Column widths that fit any 3-significant-digit number (and these policy names): for a
    table printed a row at a time, as each result arrives, in :func:`compare_table`'s format."""
    widths = {c: max(len(c), 9) for c in columns}
    if "policy" in widths:
        widths["policy"] = max(len("policy"), *(len(printable(p)) for p in policies))
    return widths


def table_header(columns: tuple[str, ...], widths: dict[str, int]) -> list[str]:
    """The header line (column names) and the rule of dashes under it."""
    return ["  ".join(c.rjust(widths[c]) for c in columns), "  ".join("-" * widths[c] for c in columns)]


def table_row(summary: Mapping[str, Any], columns: tuple[str, ...], widths: dict[str, int]) -> str:
    """One result's line of the table."""
    return "  ".join(_fmt(summary[c]).rjust(widths[c]) for c in columns)


def _fmt(v: Any) -> str:
    return f"{v:.3g}" if isinstance(v, float) else printable(v)


class Comparison(list[SimResult]):
    """The results of :func:`~heteroplan.sim.compare.compare_policies` (a list, in policy order)
    that also shows itself as a table in notebooks."""

    def to_dataframe(self, what: FrameKind | str = FrameKind.SUMMARY) -> pd.DataFrame:
        """:class:`FrameKind` or its value: ``"summary"``: one row per policy; ``"jobs"``: every job
        of every policy (MultiIndex ``(policy, name)``)."""
        what = enum_choice(FrameKind, "what", what)
        if what is FrameKind.SUMMARY:
            return summary_frame(self)
        if what is FrameKind.JOBS:
            import pandas as pd

            return pd.concat([jobs_frame(r) for r in self]).set_index("policy", append=True).swaplevel()
        raise InputError("what", what, "a comparison's tables: choose 'summary' or 'jobs'")

    def __repr__(self) -> str:
        """The summaries side by side (a row per policy), not every job record."""
        if not self:
            return "Comparison([])"
        first = self[0]
        return (f"Comparison of {len(self)} policies on {first.cluster} ({len(first.jobs)} jobs):\n"
                + compare_table(list(self)))

    def _repr_html_(self) -> str:
        return summary_frame(self).to_html(float_format=lambda v: f"{v:.3g}", na_rep="-")
