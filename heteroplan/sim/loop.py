"""The round loop: admission, allocation, placement, progress, metrics -- for every policy.

The loop is a driver of a :class:`~heteroplan.scheduling.SchedulingSession`, which keeps every
job's bookkeeping (allocation, restarts, restore left, most GPUs run, service) and turns the
policy's answer into typed decisions. Each round (the policy's ``round_length``, or the one
given) the loop submits the jobs that have arrived, asks the session for the round's decisions
(the policy sees a :class:`~heteroplan.policies.base.JobState` per active job; its answer is
checked by :func:`~heteroplan.policies.base.check_allocations`; a job whose placement changed
pays a checkpoint-restore delay -- moves to nodes of the same type and shape are free with
``SimFidelity.free_moves`` -- its own measured delay, 0 for throughput-table jobs, unless the
policy's or the run's ``restart_delay_s`` option says otherwise), and advances every running job
by the policy's progress model (:class:`~heteroplan.sim.training.SimulatedTraining`: elastic
goodput, rigid gangs, or HadarE's copies; with ``SimFidelity.epoch_rates`` the rate is
re-evaluated at each epoch boundary a job crosses inside the round), reporting what it measured
to the session. A job finishes inside a round at the exact time its work runs out. Jobs
arriving inside a round are first seen at the next round boundary.

Before the first round the loop refuses what can never run: a job without performance data
for one of the cluster's GPU types is a :class:`~heteroplan.errors.MissingDataError` naming
the job, its application and the types; a job the session's admission
(:func:`~heteroplan.scheduling.admission.admission`) would park -- a rigid job larger than the GPUs it can use -- is
rejected (``on_infeasible="reject"``, listed in ``SimResult.rejected``) or an
:class:`~heteroplan.errors.InputError` (``"raise"``). A policy that raises, or returns an
allocation the cluster or the job cannot carry out, stops the run with a
:class:`~heteroplan.errors.PolicyError` (its ``result`` holds the metrics so far).
"""

from __future__ import annotations

import logging
import math
from collections.abc import Sequence
from dataclasses import replace
from enum import StrEnum

from heteroplan.cluster import Cluster
from heteroplan.errors import HeteroplanError, InputError, MissingDataError
from heteroplan.inputs import MIN_ROUND_S, enum_choice, strict_int
from heteroplan.perf.sia_data import Estimator
from heteroplan.policies.base import Policy, counts_by_type
from heteroplan.scheduling import (
    DecisionKind,
    JobRecord,
    RoundDecisions,
    SchedulingSession,
    check_policy,
)
from heteroplan.scheduling.admission import admission
from heteroplan.sim.events import SimEvent, SimEventKind
from heteroplan.sim.fidelity import SimFidelity
from heteroplan.sim.job_models import SimJob, build_jobs
from heteroplan.sim.metrics import SimResult
from heteroplan.sim.progress import ProgressBar
from heteroplan.sim.training import SimulatedTraining
from heteroplan.workload.rigid import RigidJob
from heteroplan.workload.sia import JobSpec

__all__ = ["simulate", "DEFAULT_MAX_TIME", "check_policy", "OnInfeasible"]

log = logging.getLogger(__name__)

DEFAULT_MAX_TIME = 90 * 24 * 3600.0  # s; the guard on simulated time when none is given
class OnInfeasible(StrEnum):
    """What :func:`simulate` does with a rigid job larger than the GPUs it can use."""

    REJECT = "reject"  # list it in ``SimResult.rejected`` and simulate the rest
    RAISE = "raise"  # raise InputError naming the job


def _check_data(cluster: Cluster, jobs: Sequence[SimJob]) -> None:
    """Every job must have performance data for every GPU type of the cluster."""
    for job in jobs:
        known = set(job.known_types)
        missing = [t for t in cluster.type_names if t not in known]
        if missing:
            raise MissingDataError(
                f"job[{job.name}].application", job.application,
                f"no performance data for GPU type(s) {missing} of cluster {cluster.name!r} "
                f"(data exists for {sorted(known)}); give the job a throughput for every type, "
                f"or use a cluster of those types",
            )


def _reject_infeasible(cluster: Cluster, jobs: list[SimJob], on_infeasible: OnInfeasible) -> dict[str, str]:
    """Jobs the session's admission would park for good (the cluster never changes in a
    simulation): needing more GPUs together than the types they can run on hold."""
    rejected: dict[str, str] = {}
    for job in jobs:
        parked = admission(cluster, job.requested_gpus, job.elastic,
                           lambda k, nodes, gpus, job=job: job.rate_on(k, nodes, gpus, oracle=True)[0])
        if parked is not None:
            if on_infeasible is OnInfeasible.RAISE:
                raise InputError(f"job[{job.name}].requested_gpus", parked.need_gpus, parked.detail)
            rejected[job.name] = parked.detail
    return rejected


class _Run:
    """One simulation: drives a :class:`SchedulingSession` (which keeps every job's bookkeeping)
    and advances the jobs' modelled progress; :meth:`result` freezes it into a :class:`SimResult`."""

    def __init__(self, cluster: Cluster, policy: Policy, round_length: float, jobs: list[SimJob],
                 rejected: dict[str, str], record: bool, fidelity: SimFidelity) -> None:
        self.cluster, self.policy, self.L, self.jobs = cluster, policy, round_length, jobs
        self.rejected, self.record = rejected, record
        self.session = SchedulingSession(cluster, policy, free_moves=fidelity.free_moves,
                                         restart_delay_s=fidelity.restart_delay_s)
        self.training = SimulatedTraining(cluster, bool(policy.forking), fidelity.epoch_rates)
        self.timeline: list[tuple[float, dict[str, int], int]] = []
        self.policy_times: list[float] = []
        self.solve_gaps: list[float | None] = []
        self.events: list[SimEvent] = []
        self.decisions: list[RoundDecisions] = []
        self.t = 0.0
        self.rounds = 0

    def submit(self, job: SimJob) -> None:
        """Hand an admitted job to the session (its model object, so that reports refit it)."""
        job.simulated = True
        self.session.submit(job.name, arrival_time=job.arrival_time, application=job.application,
                            perf_model=job.estimator, requested_gpus=job.requested_gpus, max_gpus=job.max_gpus,
                            elastic=job.elastic, batch_size=job.given_batch, total_work=job.total_work,
                            restart_delay_s=job.restart_delay)

    def result(self, stop_reason: str, error: str | None = None) -> SimResult:
        self.session.settle(self.t)
        submitted = set(self.session.job_ids)
        records = tuple(
            replace(self.session.record(j.name), isolated_time=j.isolated_time(self.cluster)) if j.name in submitted
            else JobRecord(j.name, j.application, j.arrival_time, requested_gpus=j.requested_gpus,
                           isolated_time=j.isolated_time(self.cluster))
            for j in self.jobs if j.name not in self.rejected
        )
        return SimResult(
            policy=self.policy.name, cluster=self.cluster.name, round_length=self.L,
            capacity=self.cluster.capacity(), jobs=records, timeline=tuple(self.timeline),
            policy_times=tuple(self.policy_times), solve_gaps=tuple(self.solve_gaps), events=tuple(self.events), end_time=self.t,
            rounds=self.rounds, rejected=dict(self.rejected), stop_reason=stop_reason, error=error,
            decisions=tuple(self.decisions),
        )

    def round(self, active: dict[str, SimJob]) -> list[str]:
        """One round at ``self.t``: the session decides, the jobs progress; the jobs that finished."""
        t = self.t
        decisions = self.session.round(t)
        self.policy_times.append(decisions.policy_seconds)
        self.solve_gaps.append(decisions.solve_gap)
        if self.record:
            # a WAIT (no GPUs before, none now) says nothing a record needs: left out, as waiting jobs
            # can outnumber running ones by far over thousands of rounds
            self.decisions.append(replace(decisions, decisions=tuple(
                d for d in decisions if d.kind is not DecisionKind.WAIT)))
        in_use = dict.fromkeys(self.cluster.type_names, 0)
        finished = []
        for d in decisions:
            job, new = active[d.job_id], d.allocation
            if new is None:
                if d.kind is DecisionKind.PREEMPT:
                    self.events.append(SimEvent(t, job.name, SimEventKind.PREEMPT, d.previous))
                continue
            if d.kind is not DecisionKind.KEEP:
                self.events.append(SimEvent(t, job.name, SimEventKind.RESTART if d.restart else SimEventKind.START, new))
            for gpu_type, count in counts_by_type(new, self.cluster).items():
                in_use[gpu_type] += count
            used = self.training.run(job, d, self.L, self.session.report)
            if used is not None:
                self.session.finish(job.name, t + used)
                self.events.append(SimEvent(t + used, job.name, SimEventKind.FINISH))
                finished.append(job.name)
        self.timeline.append((t, in_use, len(decisions)))
        return finished


def simulate(
    jobs: Sequence[JobSpec | RigidJob],
    cluster: Cluster,
    policy: Policy,
    round_length: float | None = None,
    max_time: float | None = None,
    progress: bool | None = None,
    *,
    max_rounds: int | None = None,
    estimator: Estimator | str | None = None,
    fidelity: SimFidelity | None = None,
    stall_limit: float = 24 * 3600.0,
    on_infeasible: OnInfeasible | str = OnInfeasible.REJECT,
    record: bool = False,
) -> SimResult:
    """Run ONE policy on one workload and cluster; the round loop every policy shares.

    Args:
        jobs: Sia workload jobs (:class:`JobSpec`, goodput ground truth) and/or rigid jobs
            (:class:`RigidJob`, a throughput per GPU type: Gavel-generated, Hadar tasks, or
            the user's own matrix).
        cluster: the cluster.
        policy: any :class:`~heteroplan.policies.base.Policy` (declares ``round_length``,
            ``elastic``, ``forking``).
        round_length: seconds per round; default the policy's ``round_length``.
        max_time: stop after this many simulated seconds (default :data:`DEFAULT_MAX_TIME`,
            90 days); unfinished jobs are reported, ``stop_reason="max_time"``.
        progress: progress bar on stderr (default: when stderr is a terminal).
        max_rounds: stop after this many rounds (``stop_reason="max_rounds"``).
        estimator: Sia jobs' model as policies see it (:class:`~heteroplan.perf.sia_data.Estimator`
            or its value): ``"bootstrap"`` or ``"oracle"`` (default: bootstrap for elastic policies,
            else oracle).
        fidelity: the Sia artifact's simulator mechanisms (:class:`SimFidelity`, default on).
        stall_limit: stop (``stop_reason="stalled"``, ``error`` says which jobs wait) after
            this many seconds in which no job progressed and no arrival remains.
        on_infeasible: :class:`OnInfeasible` or its value: ``"reject"`` lists rigid jobs larger than their usable GPUs in
            ``rejected``; ``"raise"`` raises :class:`InputError` instead.
        record: keep every round's decisions in ``SimResult.decisions`` (those of jobs that hold
            or lose GPUs; and so its allocations in ``SimResult.schedule``).

    Raises:
        MissingDataError: before the first round, for a job without data for a cluster GPU type.
        PolicyError: when the policy fails (``exc.result``: the metrics up to then).
        KeyboardInterrupt: passed on, with ``exc.result`` (``stop_reason="interrupted"``) attached.
    """
    policy = check_policy(policy)
    if not (isinstance(stall_limit, int | float) and not isinstance(stall_limit, bool) and stall_limit > 0):
        raise InputError("stall_limit", stall_limit, "must be a number of seconds > 0 (inf: never stop)")  # NaN: never
    if max_rounds is not None:
        max_rounds = strict_int("max_rounds", max_rounds, 0)
    for name, flag in (("record", record), ("progress", progress)):
        if flag is not None and not isinstance(flag, bool):
            raise InputError(name, flag, "must be True or False" + (" or None" if name == "progress" else ""))
    L, max_time, fidelity, on_infeasible = _check_options(jobs, cluster, policy, round_length, max_time, fidelity,
                                                          on_infeasible)
    sim_jobs = build_jobs(jobs, cluster, bool(policy.elastic), estimator, fidelity)
    names = [j.name for j in sim_jobs]
    if len(set(names)) != len(names):
        raise InputError("jobs", sorted(n for n in set(names) if names.count(n) > 1)[:5], "job names must be unique")
    _check_data(cluster, sim_jobs)
    rejected = _reject_infeasible(cluster, sim_jobs, on_infeasible)
    if round_length is not None and abs(L - float(policy.round_length)) > 1e-9:
        log.info("policy %s designed for %.0f s rounds runs with %.0f s rounds", policy.name, policy.round_length, L)
    run = _Run(cluster, policy, L, sim_jobs, rejected, record, fidelity)
    pending = sorted((j for j in sim_jobs if j.name not in rejected), key=lambda j: (j.ready_time, j.arrival_time))
    run.t = _round_start(pending[0].ready_time, L) if pending else 0.0
    bar = ProgressBar(f"{policy.name:>8}", progress)
    try:
        stop, error = _rounds(run, pending, max_time, max_rounds, stall_limit, bar)
    except HeteroplanError as exc:
        exc.result = run.result("error", str(exc))  # type: ignore[attr-defined]
        raise
    except KeyboardInterrupt as exc:  # SIGINT: the caller may still write what ran
        exc.result = run.result("interrupted")  # type: ignore[attr-defined]
        raise
    finally:
        bar.close()
    return run.result(stop, error)


def _check_options(jobs: Sequence[JobSpec | RigidJob], cluster: Cluster, policy: Policy, round_length: float | None,
                   max_time: float | None, fidelity: SimFidelity | None,
                   on_infeasible: OnInfeasible | str) -> tuple[float, float, SimFidelity, OnInfeasible]:
    """:func:`simulate`'s options checked (:class:`InputError` naming the first bad one); returns
    the round length (s), the time limit (s), the fidelity and what to do with jobs that can never
    fit, defaults filled in."""
    if not isinstance(cluster, Cluster):
        raise InputError("cluster", cluster, "must be a heteroplan.Cluster (heteroplan.cluster.preset(name) for a preset)")
    L = float(policy.round_length if round_length is None else round_length)
    if not (L > 0 and math.isfinite(L)):
        raise InputError("round_length", round_length, "must be a number of seconds > 0")
    if L < MIN_ROUND_S:  # a round is a scheduling decision, not a time step: 0.001 s never ends
        raise InputError("round_length", round_length if round_length is not None else policy.round_length,
                         f"must be >= {MIN_ROUND_S:g} seconds (a scheduling round, not a time step)")
    if not jobs:
        raise InputError("jobs", jobs, "the workload has no jobs")
    on_infeasible = enum_choice(OnInfeasible, "on_infeasible", on_infeasible)
    max_time = DEFAULT_MAX_TIME if max_time is None else max_time
    if isinstance(max_time, bool | str) or not max_time > 0:  # a string would fail deep in the loop
        raise InputError("max_time", max_time, "must be a number of seconds > 0")
    if fidelity is None:
        fidelity = SimFidelity()
    if not isinstance(fidelity, SimFidelity):
        raise InputError("fidelity", fidelity, "must be a SimFidelity")
    return L, max_time, fidelity, on_infeasible


def _round_start(ready: float, L: float) -> float:
    """The first round boundary (a multiple of ``L`` s) at which a job ready at ``ready`` s is
    submitted (``ready <= start + 1e-9``), a boundary within 1e-9 rounds below ``ready`` counting as
    at it. Where ``L`` is huge (``--round 1e12``) 1e-9 rounds exceed 1e-9 s: the boundary then moves
    on until the job is due (else the loop would wait at the same time forever)."""
    k = math.ceil(ready / L - 1e-9)
    while k * L + 1e-9 < ready:
        k += 1
    return k * L


def _rounds(run: _Run, pending: list[SimJob], max_time: float, max_rounds: int | None, stall_limit: float,
            bar: ProgressBar) -> tuple[str, str | None]:
    """:func:`simulate`'s round loop from ``run.t``: jobs of ``pending`` (in order of readiness)
    submitted as they become ready, one round every ``run.L`` seconds, until every job finished
    or a limit stops it; returns the stop reason and the error text (``None`` unless stalled)."""
    L = run.L
    active: dict[str, SimJob] = {}
    unfinished, nxt, idle = len(pending), 0, 0
    while unfinished:
        if run.t >= max_time:
            return "max_time", None
        if max_rounds is not None and run.rounds >= max_rounds:
            return "max_rounds", None
        while nxt < len(pending) and pending[nxt].ready_time <= run.t + 1e-9:
            active[pending[nxt].name] = pending[nxt]
            run.submit(pending[nxt])
            nxt += 1
        if not active:
            run.t = _round_start(pending[nxt].ready_time, L)
            continue
        before = sum(j.done for j in active.values())
        finished = run.round(active)
        run.rounds += 1
        moved = sum(j.done for j in active.values()) > before
        idle = 0 if moved or nxt < len(pending) else idle + 1
        for name in finished:
            del active[name]
            unfinished -= 1
        run.t += L
        if idle * L > stall_limit:
            return "stalled", (f"stalled: no job progressed for {stall_limit / 3600:.0f} h and no arrivals remain; "
                               f"jobs that cannot run: {sorted(active)[:5]}")
        bar.update(1 - unfinished / len(pending), f"t={run.t / 3600:.1f}h active={len(active)}")
    return "finished", None
