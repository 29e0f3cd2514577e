"""The scheduling session: the one place a job's life is tracked between rounds.

A :class:`SchedulingSession` holds the jobs a caller submitted and everything a policy reads
about them that outlives a round: the allocation each holds, restarts, the checkpoint restore
still to pay, the most GPUs it ran on, the GPUs of its last allocation, attained service,
progress and batch size. The caller (heteroplan's simulator, the runtime's round executor, or
a user's own loop) does four things:

1. :meth:`~SchedulingSession.submit` a job when it arrives;
2. :meth:`~SchedulingSession.round` at time ``now``: the policy allocates, the session returns a
   typed :class:`~heteroplan.scheduling.decisions.Decision` per active job (start, keep,
   rescale, preempt, wait), each with its allocation, placement and restore cost;
3. :meth:`~SchedulingSession.report` what it observed while the job ran: work or steps done,
   the batch size, measured step times (which refit the job's performance model) and the
   gradient noise scale;
4. :meth:`~SchedulingSession.finish` a job whose work ran out.

**Admission.** Each round, before the policy sees them, the active jobs that can never run on
``self.cluster`` as it is then are *parked* (:mod:`heteroplan.scheduling.admission`): held back
from the policy, their decision ``WAIT`` (``PREEMPT`` if they held GPUs) carrying the
:class:`~heteroplan.scheduling.admission.Parked` reason. The check runs again every round, so a
job parked on a small cluster starts once the cluster grows.

**Invariants.** The clock is finite seconds >= 0 and never goes back; a job finishes at or after
its arrival and the last round, and fails, is released or given up (and the cluster
changes) no earlier than the last round; work and steps reported never go back; a finished job's record is
final; ``max_gpus >= requested_gpus``; a policy's answer is checked
(:func:`~heteroplan.policies.base.check_allocations`). Bad input is an
:class:`~heteroplan.errors.InputError` naming the field and the value, raised before anything
changes.

Time is the caller's clock (seconds). Service is charged lazily: the GPUs a job held from one
round to the next (or to its finish) count at the next :meth:`round`, :meth:`finish` or
:meth:`settle`.

**A job nobody reports on.** A job that held GPUs for a round (past its restore time) but got no
``work_done`` or ``steps_done`` report before the next round is assumed to have run on them: its
"most GPUs run" grows, so elastic policies keep scaling it up (Sia doubles at most per round).
Its progress stays at what was last reported. The session warns once per job
(:class:`UnreportedJobWarning`); pass ``assume_progress=False`` to treat such a round as no
progress instead: its "most GPUs run" then stays where it was. (Sia's and Pollux's scale-up rule,
:mod:`heteroplan.policies.common`, starts from the GPUs a job *holds* as well, so under them a job
that holds GPUs still doubles each round either way; the flag changes their scale-up only after a
job shrank.) Either way the session carries the job's allocation and last GPU count from
round to round, which is what a policy's scale-up rule starts from (a caller rebuilding
:class:`~heteroplan.policies.base.JobState` records each round without them kept every job on
one GPU).

**Restart cost.** A (re)start pays a checkpoint-restore delay: the session's
``restart_delay_s`` when given (one value for every job and policy of a run), else the policy's
``restart_delay_s`` option when it has one (``make_policy(name, restart_delay_s=30)``), else the
job's own (its application's measured delay, or what :meth:`submit` was given).

The session is saved as JSON (:meth:`save`) and restored (:meth:`load`) in another process,
with the policy's own state between rounds (:mod:`heteroplan.policies.state`: Gavel's time
fractions and priorities, ``pollux-sia``'s virtual nodes, profiles and random generator,
Hadar's commitments); the policy object is given again at load (it is code, built with the same
options) and takes that state back, so the restored session's next round decides as the
original's would have. A file of format 1 (no policy state) loads with a fresh policy state.
"""

from __future__ import annotations

import math
import time
import warnings
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from heteroplan.cluster import Cluster
from heteroplan.errors import HeteroplanError, InputError, PolicyError
from heteroplan.perf.protocols import ObservesSteps, TakesMeasuredNoise
from heteroplan.perf.sia_data import Estimator
from heteroplan.policies.base import (
    Allocation,
    JobState,
    PerfModel,
    Policy,
    ReportsSolveGap,
    check_allocations,
)
from heteroplan.policies.state import policy_state, restore_policy_state
from heteroplan.scheduling.admission import Parked, admission
from heteroplan.scheduling.arguments import (
    MAX_COUNT,
    check_clock,
    check_count,
    check_event,
    check_final,
    check_finish,
    check_report,
    finite_seconds,
)
from heteroplan.scheduling.decisions import Decision, DecisionKind, RoundDecisions, StepTiming
from heteroplan.scheduling.policy_check import check_policy, restart_delay_of
from heteroplan.scheduling.records import JobRecord
from heteroplan.scheduling.session_job import ModelKind, SessionJob, new_job
from heteroplan.scheduling.storage import SavedSession, load_session, save_session

__all__ = ["SchedulingSession", "UnreportedJobWarning"]

class UnreportedJobWarning(UserWarning):
    """A job held GPUs for a round without any progress report; the session assumed it ran."""


class SchedulingSession:
    """Jobs, their bookkeeping and a policy, driven one round at a time.

    Args:
        cluster: the GPUs the policy hands out.
        policy: any :class:`~heteroplan.policies.base.Policy`.
        free_moves: moving a job to other nodes of the same GPU type with the same GPUs per node
            costs no restart (the Sia artifact's simulator; heteroplan's simulator by default);
            ``False``: every change of nodes is a restart.
        restart_delay_s: seconds every (re)start costs, for every job, overriding the policy's
            and the jobs' own delays (``None``: not overridden).
        assume_progress: a job that held GPUs for a round without a progress report is assumed
            to have run (see the module doc).
    """

    def __init__(self, cluster: Cluster, policy: Policy, *, free_moves: bool = False,
                 restart_delay_s: float | None = None, assume_progress: bool = True) -> None:
        if not isinstance(cluster, Cluster):
            raise InputError("cluster", type(cluster).__name__, "must be a heteroplan.cluster.Cluster")
        self.cluster = cluster
        self.policy = check_policy(policy)
        if restart_delay_s is not None:
            restart_delay_s = finite_seconds("restart_delay_s", restart_delay_s)
        for name, value in (("free_moves", free_moves), ("assume_progress", assume_progress)):
            if not isinstance(value, bool):
                raise InputError(name, value, "must be True or False")
        self.free_moves, self.assume_progress = free_moves, assume_progress
        self.restart_delay_s = None if restart_delay_s is None else float(restart_delay_s)
        self._jobs: dict[str, SessionJob] = {}
        # Jobs a round or settle must still visit: unfinished ones, and finished ones until the
        # next settle clears their report flag (a 960-job trace visits ~30 a round, not 960).
        self._live: dict[str, SessionJob] = {}
        self._last_round: float | None = None
        self.rounds = 0

    # ------------------------------------------------------------------ submit/report
    def submit(self, job_id: str, *, arrival_time: float, application: str = "custom",
               perf_model: PerfModel | Estimator | str | None = Estimator.BOOTSTRAP, requested_gpus: int = 1, max_gpus: int | None = None,
               elastic: bool = True, batch_size: int = 0, total_work: float | None = None,
               restart_delay_s: float | None = None) -> None:
        """Add a job.

        Args:
            job_id: unique name.
            arrival_time: when it arrived (s on the caller's clock); it is active from then on.
            application: a Sia application name (``"cifar10"``, ``"bert"``, ...) for the named
                models and defaults below, or any label.
            perf_model: the job's performance model as the policy sees it: a
                :class:`~heteroplan.policies.base.PerfModel` object (e.g. a
                :class:`~heteroplan.perf.goodput.ThroughputTable` of work units/s per type), or
                for a Sia application an :class:`~heteroplan.perf.sia_data.Estimator` or its value:
                ``"bootstrap"`` (Sia's 1-GPU profiles, refit from reported step timings) or
                ``"oracle"`` (the application's fitted ground truth); ``None``
                for a policy that reads none (FIFO). Asked at once on the session's cluster
                (admission): a goodput that is not a finite number >= 0 is an ``InputError``.
            requested_gpus: its gang size (GPUs a rigid policy gives it).
            max_gpus: most GPUs it may use, >= ``requested_gpus`` (default: the application's
                maximum batch size, at least ``requested_gpus``; else ``requested_gpus``).
            elastic: the policy may change its GPU count (only if the policy is elastic);
                ``False``: a rigid job, whose allocation must be exactly ``requested_gpus``.
            batch_size: its total batch (samples) until it reports one.
            total_work: work until done, in the model's units (samples for goodput models,
                steps or samples for throughput tables); default the application's.
            restart_delay_s: seconds a (re)start costs it (default the application's measured
                delay, else 0); the session's and the policy's option take precedence.
        """
        if isinstance(job_id, str) and job_id in self._jobs:
            raise InputError("job_id", job_id, "already submitted; job ids must be unique")
        job = new_job(job_id, arrival_time, application, perf_model, requested_gpus, max_gpus,
                      elastic, batch_size, total_work, restart_delay_s, elastic_policy=bool(self.policy.elastic))
        _admit(job, self.cluster)  # a model that fails or answers NaN is refused now, not at a later round
        self._jobs[job_id] = self._live[job_id] = job

    def report(self, job_id: str, *, work_done: float | None = None, steps_done: int | None = None,
               batch_size: int | None = None, step_timing: StepTiming | None = None,
               phi: float | None = None) -> None:
        """What the caller observed of a running job (any subset, any time between rounds).

        Args:
            work_done: total work done so far (model units, from the job's start; capped at its
                total work). More than before while it holds GPUs means it ran on them.
            steps_done: total training iterations done so far (kept in the record).
            batch_size: the total batch (samples) it runs with now.
            step_timing: a measured step; the job's model refits from it (models with ``observe``).
            phi: gradient noise scale (samples) measured from its gradients (models with
                ``set_measured_phi``).
        """
        job = self._job(job_id)
        check_report(f"job[{job_id}]", job.work_done, job.steps_done, work_done, steps_done, batch_size, step_timing,
                     phi, _known_types(job, self.cluster, step_timing is not None), len(self.cluster.nodes))
        if job.finish_time is not None:  # restating its final record is harmless; changing it is refused
            check_final(f"job[{job_id}]", job.finish_time, (("work_done", work_done, job.work_done),
                        ("steps_done", steps_done, job.steps_done), ("batch_size", batch_size, job.batch_size),
                        ("step_timing", step_timing, None), ("phi", phi, job.phi)))
            return
        if work_done is not None:
            if work_done > job.work_done and job.allocation is not None:
                job.max_gpus_run = max(job.max_gpus_run, job.allocation.num_gpus)
            job.work_done = float(work_done)
            job.reported = True
        if steps_done is not None:
            if work_done is None and steps_done > job.steps_done and job.allocation is not None:
                job.max_gpus_run = max(job.max_gpus_run, job.allocation.num_gpus)
            job.steps_done = int(steps_done)
            job.reported = True
        if batch_size is not None:
            job.batch_size = int(batch_size)
        if step_timing is not None:
            if isinstance(job.estimator, ObservesSteps):
                job.estimator.observe(step_timing.gpu_type, [int(c) for c in step_timing.placement],
                                      step_timing.local_bsz, step_timing.step_time, step_timing.sync_time)
                job.observations += 1
        if phi is not None:
            job.phi = float(phi)
            if isinstance(job.estimator, TakesMeasuredNoise):
                job.estimator.set_measured_phi(float(phi))

    def finish(self, job_id: str, at: float) -> JobRecord:
        """Mark a job done at time ``at`` (s; at or after its arrival and the last round, within the
        current round); returns its record."""
        job = self._job(job_id)
        if job.finish_time is not None:
            raise InputError(f"job[{job_id}]", job_id, f"already finished at {job.finish_time} s")
        at = check_finish(f"job[{job_id}].finish.at", at, job.arrival_time, self._last_round)
        self._release(job, at)
        job.work_done = job.total_work
        job.finish_time = float(at)
        return self.record(job_id)

    # ----------------------------------------------------------- faults and a changing cluster
    def fail(self, job_id: str, at: float, *, steps_redone: int = 0) -> None:
        """A running job's ranks failed at ``at`` (s): a rank died, its node was lost. It holds no GPUs
        from then on (GPUs are charged up to ``at``) and the next round restarts it (a ``START`` with
        ``restart=True``, paying the restore delay) from its last checkpoint; ``steps_redone``: the
        iterations done since that checkpoint, which it must train again. Counted in
        ``JobRecord.failures`` and ``JobRecord.steps_redone``."""
        job = self._job(job_id)
        at = check_event("at", at, self._last_round)
        if job.finish_time is not None or job.gave_up is not None:
            raise InputError(f"job[{job_id}]", job_id, "is no longer running (finished or given up)")
        steps_redone = check_count(f"job[{job_id}].steps_redone", steps_redone, 0, MAX_COUNT)
        self._release(job, at)
        job.failures += 1
        job.steps_redone += steps_redone
        if steps_redone and job.steps_done:  # the work since the checkpoint is lost too
            kept = max(0, job.steps_done - steps_redone)
            job.work_done *= kept / job.steps_done
            job.steps_done = kept

    def release(self, job_id: str, at: float) -> None:
        """The caller stopped ``job_id`` at ``at`` (s) outside a round's decision (its scheduler is
        shutting down): it holds no GPUs from then on (charged up to ``at``) and the next round
        starts it again from its checkpoint (a restart). Not a failure."""
        job = self._job(job_id)
        at = check_event("at", at, self._last_round)
        self._release(job, at)

    def give_up(self, job_id: str, at: float, reason: str) -> JobRecord:
        """Stop scheduling ``job_id`` for good at ``at`` (s): its ranks kept failing (or the caller
        gave up on it for ``reason``). It leaves the rounds and :meth:`unfinished`; its record keeps
        ``finish_time=None`` and says why (``JobRecord.gave_up``)."""
        job = self._job(job_id)
        at = check_event("at", at, self._last_round)
        if not isinstance(reason, str) or not reason:
            raise InputError(f"job[{job_id}].reason", reason, "must be a non-empty string")
        if job.finish_time is not None or job.gave_up is not None:
            raise InputError(f"job[{job_id}]", job_id, "already finished or given up")
        self._release(job, at)
        job.gave_up = reason
        return self.record(job_id)

    def update_cluster(self, cluster: Cluster, at: float) -> tuple[str, ...]:
        """Schedule on ``cluster`` from the next round on: nodes lost, drained or added (read from the
        engine that runs the jobs, e.g. :func:`heteroplan.runtime.ray_cluster.cluster_from_ray`).

        A job placed on a node that is gone, holds another GPU type or has fewer GPUs than it was
        given loses its allocation at ``at`` (s), as :meth:`fail` (a failure, restarted by the next
        round). Returns the ids of those jobs, in submission order.
        """
        if not isinstance(cluster, Cluster):
            raise InputError("cluster", type(cluster).__name__, "must be a heteroplan.cluster.Cluster")
        at = check_event("at", at, self._last_round)
        nodes = {n.name: n for n in cluster.nodes}
        lost = []
        for job in self._jobs.values():
            alloc = job.allocation
            if alloc is None or job.finish_time is not None:
                continue
            fits = all(name in nodes and nodes[name].num_gpus >= count
                       and nodes[name].gpu_type in alloc.gpu_types for name, count in alloc.placement)
            if not fits:
                self.fail(job.job_id, at)
                lost.append(job.job_id)
        self.cluster = cluster
        return tuple(lost)

    def _release(self, job: SessionJob, at: float) -> None:
        """``job`` gives its GPUs back at ``at`` (s): charged up to then, no restore left."""
        if job.allocation is not None and self._last_round is not None:
            job.gpu_seconds += job.allocation.num_gpus * max(0.0, at - self._last_round)
            job.restored += min(job.restore_left, max(0.0, at - self._last_round))
        job.allocation = None
        job.restore_left = 0.0


    # ------------------------------------------------------------------------ rounds
    def round(self, now: float) -> RoundDecisions:
        """The policy's allocation for the round starting at ``now`` (s), as one decision per
        active job (submitted, arrived by ``now``, unfinished), in the order the policy saw them.

        Jobs admission parks (see the module doc) are not shown to the policy; their decision
        carries the reason. Raises :class:`~heteroplan.errors.PolicyError` when the policy fails or
        returns an allocation the cluster or the job cannot carry out (``AllocationError``).
        """
        now = check_clock(now, self._last_round)
        self.settle(now)
        active = sorted((j for j in self._live.values()
                         if j.finish_time is None and j.gave_up is None and j.arrival_time <= now),
                        key=lambda j: (j.arrival_time, j.job_id))
        order = [j for j in active if _admit(j, self.cluster) is None]  # parked jobs are not the policy's
        allocations, seconds = self._allocate(order, now) if order else ({}, 0.0)  # nobody active: no policy call
        solved = self.policy.last_result if order and isinstance(self.policy, ReportsSolveGap) else None
        decisions = []
        for job in active:
            if job.parked is not None:
                decisions.append(_park(job))
                continue
            job.active_rounds += 1
            job.active_sum += len(order)
            decisions.append(_decide(job, allocations.get(job.job_id), now, self.free_moves, self.restart_delay(job.job_id)))
        self._last_round = float(now)
        self.rounds += 1
        return RoundDecisions(float(now), tuple(decisions), seconds, None if solved is None else float(solved.gap))

    def settle(self, now: float) -> None:
        """Charge the GPUs held since the last round through ``now`` (s) and age restores; called
        by :meth:`round`, and by a caller that stops and wants final records."""
        now = check_clock(now, self._last_round)
        if self._last_round is None:
            return
        elapsed = now - self._last_round
        for job in list(self._live.values()):
            alloc = job.allocation
            if job.finish_time is not None or alloc is None:
                job.reported = False
                if job.finish_time is not None:
                    del self._live[job.job_id]
                continue
            job.gpu_seconds += alloc.num_gpus * elapsed
            if not job.reported and elapsed > job.restore_left:
                _unreported(job, self.assume_progress)
            spent = min(job.restore_left, elapsed)
            job.restored += spent
            job.restore_left -= spent
            job.reported = False
        self._last_round = float(now)

    # --------------------------------------------------------------------- admission
    def parked(self, job_id: str) -> Parked | None:
        """Why ``job_id`` can never run on ``self.cluster`` as it is now (parked: see the module doc), or ``None``."""
        return _admit(self._job(job_id), self.cluster)

    def _allocate(self, order: list[SessionJob], now: float) -> tuple[dict[str, Allocation], float]:
        views = [_view(j, self.restart_delay(j.job_id)) for j in order]
        t0 = time.perf_counter()
        try:
            answer = self.policy.allocate(self.cluster, views, now)
        except HeteroplanError:
            raise
        except Exception as exc:  # a bug in the policy: say so, keep the traceback
            raise PolicyError(f"policy {self.policy.name!r} failed at t={now:.0f} s: "
                              f"{type(exc).__name__}: {exc}") from exc
        seconds = time.perf_counter() - t0
        return check_allocations(self.cluster, answer, views, policy=self.policy.name, forking=bool(self.policy.forking),
                                 rigid=[j.job_id for j in order if j.rigid]), seconds

    # ------------------------------------------------------------------------- views
    def restart_delay(self, job_id: str) -> float:
        """Seconds a (re)start of ``job_id`` costs (session option, else policy option, else the job's)."""
        job = self._job(job_id)
        if self.restart_delay_s is not None:
            return self.restart_delay_s
        policy_delay = restart_delay_of(self.policy)
        return job.own_restart_delay if policy_delay is None else policy_delay

    def view(self, job_id: str) -> JobState:
        """What the policy sees of ``job_id`` at the next round."""
        return _view(self._job(job_id), self.restart_delay(job_id))

    def record(self, job_id: str) -> JobRecord:
        """The job's record so far."""
        return _record(self._job(job_id))

    def records(self) -> tuple[JobRecord, ...]:
        """Every submitted job's record, in submission order."""
        return tuple(self.record(j) for j in self._jobs)

    @property
    def last_round_time(self) -> float | None:
        """When the last round started (s on the caller's clock); ``None`` before the first."""
        return self._last_round

    @property
    def job_ids(self) -> tuple[str, ...]:
        """Submitted jobs, in submission order."""
        return tuple(self._jobs)

    def unfinished(self) -> tuple[str, ...]:
        """Submitted jobs still to run: neither finished nor given up (:meth:`give_up`)."""
        return tuple(j.job_id for j in self._jobs.values() if j.finish_time is None and j.gave_up is None)

    def allocation(self, job_id: str) -> Allocation | None:
        """What ``job_id`` holds now (``None``: nothing)."""
        return self._job(job_id).allocation

    def _job(self, job_id: str) -> SessionJob:
        try:
            return self._jobs[job_id]
        except (KeyError, TypeError):  # TypeError: not even a possible id (a list, a dict)
            raise InputError("job_id", job_id, "not submitted to this session") from None

    # ------------------------------------------------------------------- save / load
    def save(self, path: str | Path) -> Path:
        """Write the session, with its policy's state between rounds, to a JSON file (atomically);
        :meth:`load` takes it back."""
        saved = SavedSession(self.cluster.name, self.policy.name, self.free_moves, self.restart_delay_s,
                             self.assume_progress, self._last_round, self.rounds, tuple(self._jobs.values()),
                             policy_state(self.policy))
        return save_session(saved, _path(path))

    @classmethod
    def load(cls, path: str | Path, cluster: Cluster, policy: Policy,
             perf_models: Mapping[str, PerfModel] | None = None) -> SchedulingSession:
        """A session saved by :meth:`save`, on ``cluster`` under ``policy`` (given again: a policy is
        code, not data; build it with the saved one's options). The policy takes back the state it
        kept between rounds (see :mod:`heteroplan.policies.state`), so the next :meth:`round`
        decides as the saved session's would have. Raises :class:`InputError` when the file holds
        another kind of policy's state; a format-1 file (saved without it) warns
        (:class:`~heteroplan.scheduling.storage.PolicyStateLostWarning`) under a stateful policy.
        ``perf_models``: job id -> the model object of each job submitted with one of its own (saved
        without it; a missing one is an :class:`InputError` naming the job)."""
        saved = load_session(_path(path), cluster, policy, perf_models)
        session = cls(cluster, policy, free_moves=saved.free_moves, restart_delay_s=saved.restart_delay_s,
                      assume_progress=saved.assume_progress)
        _adopt(session, saved)
        return session

    def __repr__(self) -> str:
        return (f"SchedulingSession(policy={self.policy.name!r}, cluster={self.cluster.name!r}, "
                f"jobs={len(self._jobs)}, unfinished={len(self.unfinished())}, rounds={self.rounds})")


def _adopt(session: SchedulingSession, saved: SavedSession) -> None:
    """Give a new ``session`` the jobs, clock and policy state of ``saved`` (:meth:`SchedulingSession.load`)."""
    session._jobs = {j.job_id: j for j in saved.jobs}
    session._live = dict(session._jobs)  # as submitted: the next round or settle prunes the finished
    session._last_round, session.rounds = saved.last_round, saved.rounds
    if saved.policy_state is not None:
        restore_policy_state(session.policy, saved.policy_state)


def _admit(job: SessionJob, cluster: Cluster) -> Parked | None:
    """Admission's verdict on ``job`` (kept until the cluster object or the model changes)."""
    key = (cluster, job.observations)
    if job.admitted_on is None or job.admitted_on[0] is not key[0] or job.admitted_on[1] != key[1]:
        job.parked = admission(cluster, job.requested_gpus, job.elastic, _rate_of(job, cluster))
        job.admitted_on = key
    return job.parked


def _moved(old: Allocation | None, new: Allocation, free_moves: bool) -> bool:
    """A (re)start: first start, other type, or other nodes (unless ``free_moves`` and same shape)."""
    if old is None or old.gpu_type != new.gpu_type:
        return True
    if sorted(old.placement) == sorted(new.placement):
        return False
    if not free_moves:
        return True
    return sorted(c for _, c in old.placement) != sorted(c for _, c in new.placement)


def _decide(job: SessionJob, new: Allocation | None, now: float, free_moves: bool, restart_delay: float) -> Decision:
    """``job``'s decision for the round at ``now`` (s) given its new allocation (``None``: none);
    a (re)start costs ``restart_delay`` seconds of restore."""
    old = job.allocation
    if new is None:
        job.allocation = None
        job.restore_left = 0.0
        return Decision(job.job_id, DecisionKind.WAIT if old is None else DecisionKind.PREEMPT, None, old)
    restarted = _moved(old, new, free_moves)
    if restarted:
        if job.starts:
            job.restarts += 1
        job.starts += 1
        job.restore_left = restart_delay
        if job.start_time is None:
            job.start_time = float(now)
        kind = DecisionKind.START if old is None else DecisionKind.RESCALE
    else:
        kind = DecisionKind.KEEP
    job.allocation = new
    job.last_gpus = new.num_gpus
    return Decision(job.job_id, kind, new, old, restarted and job.starts > 1, job.restore_left)


def _view(job: SessionJob, restart_delay: float) -> JobState:
    """What a policy sees of ``job`` (``restart_delay``: seconds a (re)start costs it)."""
    return JobState(
        job_id=job.job_id, application=job.application, arrival_time=job.arrival_time,
        requested_gpus=job.requested_gpus, elastic=job.elastic, max_gpus=job.max_gpus,
        allocation=job.allocation, restoring=job.restore_left > 0, num_restarts=job.restarts,
        attained_service=job.gpu_seconds, progress=job.fraction_done,
        remaining_work=max(0.0, job.total_work - job.work_done), restart_delay=restart_delay,
        estimator=job.estimator, max_gpus_run=job.max_gpus_run, last_gpus=job.last_gpus,
        batch_size=job.batch_size or job.given_batch, requested_batch=job.given_batch,
    )


def _record(j: SessionJob) -> JobRecord:
    """``j``'s record so far."""
    return JobRecord(
        job_id=j.job_id, application=j.application, arrival_time=j.arrival_time, start_time=j.start_time,
        finish_time=j.finish_time, restarts=j.restarts, gpu_seconds=j.gpu_seconds,
        fraction_done=j.fraction_done, requested_gpus=j.requested_gpus,
        avg_active=j.active_sum / j.active_rounds if j.active_rounds else 1.0,
        steps_done=j.steps_done, observations=j.observations, phi=j.phi, restore_seconds=j.restored,
        failures=j.failures, steps_redone=j.steps_redone, gave_up=j.gave_up,
    )


def _unreported(job: SessionJob, assume_progress: bool) -> None:
    """A job held GPUs for a round without a report: assume it ran (or not), warn once."""
    if job.allocation is None:
        return
    if assume_progress:
        job.max_gpus_run = max(job.max_gpus_run, job.allocation.num_gpus)
    if not job.warned:
        job.warned = True
        assumed = "assuming it ran" if assume_progress else "counting no progress"
        warnings.warn(f"job {job.job_id!r} held {job.allocation.num_gpus} GPUs for a round without a progress "
                      f"report; {assumed} (report work_done or steps_done each round)",
                      UnreportedJobWarning, stacklevel=3)


def _park(job: SessionJob) -> Decision:
    """A parked job's decision: it gets nothing (and loses what it held)."""
    old = job.allocation
    job.allocation = None
    job.restore_left = 0.0
    return Decision(job.job_id, DecisionKind.WAIT if old is None else DecisionKind.PREEMPT, None, old,
                    parked=job.parked)


def _known_types(job: SessionJob, cluster: Cluster, needed: bool) -> set[str]:
    """GPU types a step timing of ``job`` may name: the cluster's, and those its model knows."""
    known = set(cluster.type_names)
    if needed and job.model_kind in (ModelKind.BOOTSTRAP, ModelKind.ORACLE, ModelKind.TABLE):
        known |= set(job.estimator.gpu_types)  # type: ignore[union-attr]
    return known


def _rate_of(job: SessionJob, cluster: Cluster) -> Any:
    """The job's goodput as admission reads it (``None``: no model, every type usable)."""
    model = job.estimator
    if model is None:
        return None
    # The models the session knows list their types; a user's object answers for every type.
    types = None if job.model_kind is ModelKind.OBJECT else set(model.gpu_types)
    total = sum(cluster.capacity().values())

    def rate(gpu_type: str, num_nodes: int, num_gpus: int) -> float:
        if types is not None and gpu_type not in types:
            return 0.0
        if num_gpus > total:  # it cannot run anyway (too large); is the type one it runs on at all?
            num_nodes, num_gpus = 1, 1
        try:
            value = float(model.goodput(gpu_type, num_nodes, num_gpus, progress=job.fraction_done))
        except HeteroplanError:
            raise
        except Exception as exc:  # a user's model object that fails: its input, named
            raise InputError(f"job[{job.job_id}].perf_model", type(model).__name__,
                             f"goodput({gpu_type!r}, {num_nodes}, {num_gpus}) failed: {type(exc).__name__}: {exc}"
                             ) from exc
        if not (math.isfinite(value) and value >= 0):  # NaN is no "cannot run here": say so, don't park on it
            raise InputError(f"job[{job.job_id}].perf_model", type(model).__name__,
                             f"goodput({gpu_type!r}, {num_nodes}, {num_gpus}) returned {value}: must be a finite "
                             "number >= 0 (work units/s; 0: cannot run there)")
        return value

    return rate


def _path(path: object) -> Path:
    """``path`` (a string or a path) as a :class:`Path`, else :class:`InputError`."""
    if not isinstance(path, str | Path) or not str(path):
        raise InputError("path", path, "must be a file path (str or pathlib.Path)")
    return Path(path)
