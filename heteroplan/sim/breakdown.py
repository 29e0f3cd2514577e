"""Where jobs spend their time under load: queueing vs restoring vs running, per job and per round.

:func:`load_breakdown` reads a :class:`~heteroplan.sim.metrics.SimResult` simulated with
``record=True`` (it reads every round's decisions, as the scheduling session made them) and splits each job's time from arrival to
completion (or to the end of the run) into

- ``queued``: seconds it was waiting without GPUs (before its first start and after preemptions,
  including the wait for the first round boundary after its arrival);
- ``restoring``: seconds it held GPUs while restoring from a checkpoint ((re)start delays);
- ``running``: seconds it held GPUs and trained;

and counts its restarts, preemptions (the session's ``PREEMPT`` decisions) and allocation changes
(rounds whose allocation differs from what the job held the round before: a start, a resumption,
a preemption, a new GPU count, type or node).
Per round it gives the GPUs held and the jobs waiting. Times in seconds, summaries in hours.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np

from heteroplan.errors import InputError
from heteroplan.policies.base import Allocation
from heteroplan.scheduling.decisions import Decision, DecisionKind
from heteroplan.sim.metrics import SimResult, artifact_p99

__all__ = ["JobBreakdown", "LoadBreakdown", "LoadSummary", "load_breakdown"]


@dataclass(frozen=True)
class JobBreakdown:
    """One job's time (seconds) and allocation history.

    Attributes:
        jct: completion time (s); None if it did not finish (times then run to the end of the run).
        queued, restoring, running: seconds without GPUs, holding GPUs while restoring, training.
        restarts: (re)starts after the first (the simulator's count).
        preemptions: rounds in which it lost all its GPUs before finishing (``PREEMPT`` decisions).
        allocation_changes: rounds whose allocation differs from what it held the round before.
        gpu_seconds: GPU-seconds it held.
        mean_gpus: GPUs it held on average while it held any.
    """

    name: str
    application: str
    arrival_time: float
    jct: float | None
    queued: float
    restoring: float
    running: float
    restarts: int
    preemptions: int
    allocation_changes: int
    gpu_seconds: float
    mean_gpus: float


@dataclass(frozen=True)
class LoadSummary:
    """Means over a group of jobs (hours; counts per job)."""

    label: str
    jobs: int
    jct_h: float
    queued_h: float
    restoring_h: float
    running_h: float
    restarts: float
    preemptions: float
    allocation_changes: float
    mean_gpus: float

    def row(self) -> str:
        return (f"{self.label:<14} {self.jobs:>5} {self.jct_h:>7.3f} {self.queued_h:>7.3f} {self.restoring_h:>7.3f} "
                f"{self.running_h:>7.3f} {self.restarts:>6.2f} {self.preemptions:>6.2f} "
                f"{self.allocation_changes:>6.2f} {self.mean_gpus:>5.2f}")


HEADER = (f"{'jobs':<14} {'n':>5} {'jct h':>7} {'queue h':>7} {'restore':>7} {'run h':>7} {'restrt':>6} "
          f"{'preemp':>6} {'allocΔ':>6} {'GPUs':>5}")


@dataclass(frozen=True)
class LoadBreakdown:
    """Per-job breakdowns and per-round cluster state of one simulation.

    Attributes:
        times: start of every round (s).
        gpus_held: GPUs allocated in each round (all types).
        jobs_waiting: active jobs without GPUs in each round.
        capacity: GPUs in the cluster.
    """

    policy: str
    jobs: tuple[JobBreakdown, ...]
    times: tuple[float, ...]
    gpus_held: tuple[int, ...]
    jobs_waiting: tuple[int, ...]
    capacity: int

    def summarize(self, label: str, jobs: Iterable[JobBreakdown]) -> LoadSummary:
        group = list(jobs)
        if not group:
            nan = float("nan")
            return LoadSummary(label, 0, nan, nan, nan, nan, nan, nan, nan, nan)

        def mean(values: Iterable[float]) -> float:
            return float(np.mean(list(values)))

        return LoadSummary(
            label, len(group),
            mean(j.jct for j in group if j.jct is not None) / 3600 if any(j.jct is not None for j in group)
            else float("nan"),
            mean(j.queued for j in group) / 3600, mean(j.restoring for j in group) / 3600,
            mean(j.running for j in group) / 3600, mean(j.restarts for j in group),
            mean(j.preemptions for j in group), mean(j.allocation_changes for j in group),
            mean(j.mean_gpus for j in group),
        )

    def summaries(self) -> tuple[LoadSummary, ...]:
        """All jobs, the tail (JCT at or above the p99 JCT as the Sia artifact takes it), and each
        application."""
        done = [j for j in self.jobs if j.jct is not None]
        out = [self.summarize("all", self.jobs)]
        if done:
            cut = artifact_p99(np.array([j.jct for j in done]))
            out.append(self.summarize("p99 tail", (j for j in done if j.jct >= cut)))
        for app in sorted({j.application for j in self.jobs}):
            out.append(self.summarize(app, (j for j in self.jobs if j.application == app)))
        return tuple(out)

    @property
    def utilization(self) -> float:
        """Mean share of the cluster's GPUs held per round."""
        return float(np.mean(self.gpus_held)) / self.capacity if self.gpus_held and self.capacity else 0.0

    def table(self) -> str:
        """A text table of :meth:`summaries`, plus GPUs held and jobs waiting over the rounds."""
        lines = [f"{self.policy}: GPUs held {self.utilization:.0%} of {self.capacity} on average; jobs waiting per "
                 f"round mean {np.mean(self.jobs_waiting) if self.jobs_waiting else 0:.1f}, "
                 f"max {max(self.jobs_waiting, default=0)}", HEADER]
        lines += [s.row() for s in self.summaries()]
        return "\n".join(lines)


def load_breakdown(result: SimResult) -> LoadBreakdown:
    """Split every job's time of ``result`` (simulated with ``record=True``) into queued,
    restoring and running seconds, and count its allocation changes (see the module docstring)."""
    if result.rounds and not result.decisions:
        raise InputError("result.decisions", "empty", "simulate with record=True to break the time down")
    L = result.round_length
    held = {j.job_id: 0.0 for j in result.jobs}
    gpu_s = {j.job_id: 0.0 for j in result.jobs}
    changes = {j.job_id: 0 for j in result.jobs}
    preempt = {j.job_id: 0 for j in result.jobs}
    end = {j.job_id: (j.finish_time if j.finish_time is not None else result.end_time) for j in result.jobs}
    arrival = {j.job_id: j.arrival_time for j in result.jobs}
    for decisions in result.decisions:
        t = decisions.time
        for d in decisions:
            name = d.job_id
            if name not in held:
                continue
            if d.allocation is not None:
                span = max(0.0, min(L, end[name] - t))
                held[name] += span
                gpu_s[name] += d.allocation.num_gpus * span
            changes[name] += _changed(d)
            preempt[name] += d.kind is DecisionKind.PREEMPT
    jobs = []
    for j in result.jobs:
        restoring = min(j.restore_seconds, held[j.job_id])
        jobs.append(JobBreakdown(
            name=j.job_id, application=j.application, arrival_time=j.arrival_time, jct=j.jct_s,
            queued=max(0.0, end[j.job_id] - arrival[j.job_id] - held[j.job_id]), restoring=restoring,
            running=held[j.job_id] - restoring, restarts=j.restarts, preemptions=preempt[j.job_id],
            allocation_changes=changes[j.job_id], gpu_seconds=gpu_s[j.job_id],
            mean_gpus=gpu_s[j.job_id] / held[j.job_id] if held[j.job_id] > 0 else 0.0,
        ))
    times = tuple(t for t, _, _ in result.timeline)
    gpus = tuple(int(sum(u.values())) for _, u, _ in result.timeline)
    allocated = {d.time: len(d.allocations) for d in result.decisions}
    waiting = tuple(max(0, n - allocated.get(t, 0)) for t, _, n in result.timeline)
    return LoadBreakdown(result.policy, tuple(jobs), times, gpus, waiting, int(sum(result.capacity.values())))


def _changed(d: Decision) -> bool:
    """Whether the job's allocation this round differs from what it held the round before (GPU
    type and nodes; a preemption is a change, a move that keeps both is not)."""
    if d.allocation is None:
        return d.kind is DecisionKind.PREEMPT
    return d.previous is None or _where(d.previous) != _where(d.allocation)


def _where(a: Allocation) -> tuple[str, list[tuple[str, int]]]:
    return a.gpu_type, sorted(a.placement)
