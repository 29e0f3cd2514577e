"""Round executor: a cluster policy (Sia, Pollux, Gavel, ...) driving real training jobs.

The executor is a driver of a :class:`~heteroplan.scheduling.SchedulingSession`, the same one
the simulator drives, which keeps every job's bookkeeping. Every ``round_length`` seconds it asks
the session for the round's decisions and applies them to local processes: ``KEEP`` leaves a job
running; ``RESCALE`` stops it at an iteration boundary, checkpoints and relaunches it with the new
data-parallel degree (checkpoint-restore on rescale); ``PREEMPT`` stops it; ``START`` launches it
(resuming from its checkpoint). Moves to other GPUs of the same type and shape are free. Each round, the step and synchronization times measured
on each running job are fed to its estimator's ``observe`` (Sia's bootstrapped goodput model
refits from real data). Jobs run as local processes (one per GPU). A job with
``adaptive_batch`` runs at the batch the policy's goodput model picks for its allocation
(``estimator.optimize``: local batch and gradient-accumulation steps, as Pollux and Sia do);
otherwise its global batch stays fixed and each GPU takes ``global_batch / num_gpus`` samples
(uneven splits give some replicas one more microbatch). The gradient noise scale measured from
the job's own gradients (data-parallel runs, :meth:`StageTrainer._noise_terms`) is fed to the
estimator's ``set_measured_phi`` after every round.
"""

from __future__ import annotations

import enum
import logging
import statistics
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np

from heteroplan.cluster import Cluster
from heteroplan.errors import InputError, RankFailure
from heteroplan.inputs import check_wait, finite_number, strict_int, work_fraction
from heteroplan.names import a_path, path_component
from heteroplan.perf.measurements import Measurements
from heteroplan.perf.protocols import ObservesSteps, OptimizesBatch
from heteroplan.planner.plan import Plan, ReplicaGroup, Stage
from heteroplan.policies.base import Allocation, Policy, PolicyBase, counts_by_type
from heteroplan.policies.registry import make_policy
from heteroplan.runtime.backends import ExecutionBackend, JobHandle, LocalBackend
from heteroplan.runtime.checkpoint import latest_checkpoint
from heteroplan.runtime.config import RunConfig, StepMetrics, make_optimizer
from heteroplan.runtime.launch import RunResult, check_task
from heteroplan.runtime.models import TrainTask
from heteroplan.scheduling import Decision, DecisionKind, JobRecord, SchedulingSession, StepTiming
from heteroplan.signals import StopFlag, stop_on_signals

__all__ = ["EventKind", "ExecutorEvent", "RestartLatency", "RuntimeJob", "RoundExecutor", "RoundLog",
           "data_parallel_plan", "job_plan", "measure_single_gpu"]

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class RuntimeJob:
    """A training job for the round executor.

    Attributes:
        job_id: unique name.
        task: what to train (see :class:`~heteroplan.runtime.models.TrainTask`).
        steps: iterations until the job is done.
        global_batch_size: samples per iteration (fixed for the job's life).
        arrival_time: seconds after the executor starts when the job is submitted.
        application: name shown to the policy.
        max_gpus: most GPUs the job may use.
        estimator: the job's goodput model (e.g. a
            :class:`~heteroplan.perf.bootstrap.BootstrappedModel`); its ``observe`` (if any)
            receives the measured steps.
        config: optimizer and timeout settings (``steps``/``checkpoint_dir`` are set by the executor).
        adaptive_batch: run at the batch the estimator's ``optimize`` picks for each allocation
            (``num_gpus x local_bsz x (accum_steps + 1)`` samples per iteration, one microbatch of
            ``local_bsz`` per accumulation step); ``False``: ``global_batch_size`` throughout.
        restart_delay_s: the checkpoint-restore delay the session charges each (re)start of it (s;
            a policy's ``restart_delay_s`` option overrides it). The executor records what a
            restart really took (``RoundExecutor.latencies``).
        requested_gpus: its gang (GPUs): what a rigid policy (FIFO, YARN-CS, Gavel, Hadar) runs it
            on, all at once, and where an elastic one (Sia, Pollux) starts; at most ``max_gpus``
            and ``global_batch_size``.
    """

    job_id: str
    task: TrainTask
    steps: int
    global_batch_size: int
    arrival_time: float = 0.0
    application: str = "custom"
    max_gpus: int = 8
    estimator: Any = None
    config: RunConfig = field(default_factory=RunConfig)
    adaptive_batch: bool = False
    restart_delay_s: float = 0.0
    requested_gpus: int = 1

    def __post_init__(self) -> None:
        path_component("job_id", self.job_id)  # its checkpoints go to workdir/<job_id>
        where = f"job[{self.job_id}]"
        check_task(self.task, task_field=f"{where}.task")
        if not isinstance(self.config, RunConfig):
            raise InputError(f"{where}.config", type(self.config).__name__, "must be a RunConfig")
        if not isinstance(self.application, str) or not self.application:
            raise InputError(f"{where}.application", self.application, "must be a non-empty name (a string)")
        if not isinstance(self.adaptive_batch, bool):
            raise InputError(f"{where}.adaptive_batch", self.adaptive_batch, "must be True or False")
        for name in ("steps", "global_batch_size", "max_gpus", "requested_gpus"):  # numpy's too, stored as ints
            object.__setattr__(self, name, strict_int(f"{where}.{name}", getattr(self, name), 1))
        if self.requested_gpus > min(self.max_gpus, self.global_batch_size):  # a GPU needs a sample
            raise InputError(f"{where}.requested_gpus", self.requested_gpus,
                             f"must be at most max_gpus ({self.max_gpus}) and global_batch_size ({self.global_batch_size})")
        for name in ("arrival_time", "restart_delay_s"):  # np.float32 too; NaN, inf and 10**400 refused
            object.__setattr__(self, name, finite_number(f"{where}.{name}", getattr(self, name), low=0.0))


@dataclass(frozen=True)
class RoundLog:
    """One round: when it started (s), what each job got, and what happened."""

    index: int
    time: float
    allocations: dict[str, tuple[str, int]]
    events: tuple[ExecutorEvent, ...]


def data_parallel_plan(name: str, global_batch_size: int, num_gpus: int, num_layers: int, gpu_type: str,
                       zone: str = "local", gpus_by_type: Mapping[str, int] | None = None) -> Plan:
    """A pure data-parallel plan on ``num_gpus`` replicas (uneven samples split by microbatch counts)
    of ``gpu_type``, or of several types (``gpus_by_type``: GPUs of each, a gang over several types
    that synchronous data parallelism paces at its slowest)."""
    global_batch_size = strict_int("global_batch_size", global_batch_size, 1)
    num_gpus = strict_int("num_gpus", num_gpus, 1)
    if num_gpus > global_batch_size:
        raise InputError("num_gpus", num_gpus, f"more GPUs than samples per iteration ({global_batch_size})")
    by_type = {gpu_type: num_gpus} if gpus_by_type is None else dict(gpus_by_type)
    if sum(by_type.values()) != num_gpus:
        raise InputError("gpus_by_type", gpus_by_type, f"must add up to num_gpus ({num_gpus})")
    stage = Stage(0, num_layers, tuple(ReplicaGroup(t, zone, 1, n) for t, n in by_type.items()))
    if global_batch_size % num_gpus == 0:
        return Plan(name, global_batch_size, global_batch_size // num_gpus, (stage,))
    base, extra = divmod(global_batch_size, num_gpus)
    micro = tuple(base + (d < extra) for d in range(num_gpus))
    return Plan(name, global_batch_size, 1, (stage,), micro)


def measure_single_gpu(task: TrainTask, local_batch_sizes: Sequence[int], steps: int = 3,
                       config: RunConfig | None = None) -> Measurements:
    """Sia's profiling step, in this process: seconds per iteration on one device at each local batch
    (``local_batch_sizes``: a non-empty sequence of whole numbers >= 1; ``steps`` >= 1 timed iterations
    after one warm-up iteration, their median taken)."""
    check_task(task)
    if isinstance(local_batch_sizes, str) or not isinstance(local_batch_sizes, Sequence | np.ndarray) \
            or len(local_batch_sizes) == 0:
        raise InputError("local_batch_sizes", local_batch_sizes, "must be a non-empty sequence of batch sizes >= 1")
    local_batch_sizes = [strict_int("local_batch_sizes", b, 1) for b in local_batch_sizes]  # 2.5 ran at 2, said 2.5
    steps = strict_int("steps", steps, 1)  # 0 was a StatisticsError (the median of no time)
    if config is not None and not isinstance(config, RunConfig):
        raise InputError("config", type(config).__name__, "must be a RunConfig or None")
    config = config or RunConfig()
    model = task.build_model()
    opt = make_optimizer([p for p in model.parameters() if p.requires_grad], config)
    times = []
    for bsz in local_batch_sizes:
        samples = []
        for step in range(steps + 1):
            x, y = task.batch(step, 0, bsz)
            t0 = time.perf_counter()
            task.loss(model(x), y).backward()
            opt.step()
            opt.zero_grad(set_to_none=True)
            samples.append(time.perf_counter() - t0)
        times.append(statistics.median(samples[1:]))
    n = len(times)
    return Measurements(np.ones(n), np.ones(n), np.asarray(local_batch_sizes, float), np.asarray(times), np.zeros(n))


def job_plan(job: RuntimeJob, alloc: Allocation, num_layers: int, progress: float,
             cluster: Cluster | None = None) -> Plan:
    """The plan ``job`` runs on ``alloc``: data parallel over its GPUs, at the batch the estimator
    picks (``adaptive_batch``) or at ``job.global_batch_size``. A gang over several GPU types (a
    mixed allocation, Hadar's task-level heterogeneity) gets a replica group per type, read from
    its placement on ``cluster``, at ``job.global_batch_size``."""
    if not isinstance(job, RuntimeJob):
        raise InputError("job", type(job).__name__, "must be a RuntimeJob")
    if not isinstance(alloc, Allocation):
        raise InputError("alloc", type(alloc).__name__, "must be an Allocation")
    progress = work_fraction(progress)
    if alloc.mixed:  # each rank emulates (and is placed on) its own type; the all-reduce paces them
        if not isinstance(cluster, Cluster):
            raise InputError("cluster", cluster, f"a mixed allocation ({alloc.gpu_type}) needs the cluster "
                             "its placement names")
        return data_parallel_plan(job.application, job.global_batch_size, alloc.num_gpus, num_layers,
                                  alloc.gpu_type, gpus_by_type=counts_by_type(alloc, cluster))
    if job.adaptive_batch and isinstance(job.estimator, OptimizesBatch):
        _, local, accum = job.estimator.optimize(alloc.gpu_type, max(alloc.num_nodes, 1), alloc.num_gpus, progress=progress)
        local, accum = int(local), int(accum)
        if local > 0:  # 0: no model for this type yet; keep the job's batch
            stage = Stage(0, num_layers, (ReplicaGroup(alloc.gpu_type, "local", 1, alloc.num_gpus),))
            return Plan(job.application, alloc.num_gpus * local * (accum + 1), local, (stage,),
                        (accum + 1,) * alloc.num_gpus)
    return data_parallel_plan(job.application, job.global_batch_size, alloc.num_gpus, num_layers, alloc.gpu_type)


class EventKind(enum.Enum):
    """What happened to a job during a round of the executor."""

    START = "start"  # launched on its allocation (resuming from its checkpoint when it ran before)
    RESCALE = "rescale"  # stopped at an iteration boundary to move to another allocation
    STOP = "stop"  # preempted: stopped at an iteration boundary, checkpointed
    FINISH = "finish"  # its last iteration done
    FAIL = "fail"  # a rank died, failed or stalled; restarted from its checkpoint next round
    LOST = "lost"  # its node left the cluster; restarted from its checkpoint next round
    GIVE_UP = "give-up"  # failed too often: no longer scheduled
    NODE_ADDED = "node-added"  # the cluster gained a node (job_id: the node)
    NODE_LOST = "node-lost"  # the cluster lost a node (job_id: the node)


@dataclass(frozen=True)
class ExecutorEvent:
    """One thing that happened during a round: its kind, the job (or node), seconds since the run
    started, and a human-readable detail."""

    kind: EventKind
    job_id: str
    time: float = field(default=0.0, compare=False)
    detail: str = field(default="", compare=False)

    def __str__(self) -> str:
        return f"{self.kind.value} {self.job_id}" + (f" ({self.detail})" if self.detail else "")


@dataclass(frozen=True)
class RestartLatency:
    """Seconds from a decision to the job's first iteration on its new allocation, beside the
    restore delay the policy assumed for it (``Decision.restore_s``).

    Attributes:
        job_id: the job.
        decided_at: when the round decided it (s since the run started).
        seconds: decision -> first iteration reported on the new allocation (process or actor
            start, rendezvous, checkpoint load, one iteration).
        assumed_s: the restore delay the session charged for it (s).
        restart: a restart (``False``: the job's first start).
        gpus: GPUs of the new allocation.
    """

    job_id: str
    decided_at: float
    seconds: float
    assumed_s: float
    restart: bool
    gpus: int


@dataclass
class _Running:
    handle: JobHandle
    allocation: Allocation
    seen: int = 0  # step reports already observed
    started: float = 0.0
    decided: float = 0.0  # monotonic time of the decision that launched it
    assumed_s: float = 0.0
    restart: bool = False
    first_step: bool = False  # its first iteration has been reported


def _halt(handle: JobHandle) -> RunResult:
    """Ask ``handle``'s ranks to stop at an iteration boundary and wait for them (they checkpoint)."""
    handle.stop()
    return handle.wait()


def _concurrently(calls: Mapping[str, Callable[[], Any]]) -> dict[str, Any]:
    """Each call's result (or the :class:`RankFailure` it raised), the calls run in threads at once:
    a round's starts and stops overlap their waits (actor start-up, checkpoints) instead of adding
    them up. Any other exception is raised once every call has ended."""
    def guarded(call: Callable[[], Any]) -> Any:
        try:
            return call()
        except RankFailure as exc:
            return exc

    if len(calls) <= 1:  # no thread for one call
        return {key: guarded(call) for key, call in calls.items()}
    with ThreadPoolExecutor(max_workers=min(len(calls), 16)) as pool:
        futures = {key: pool.submit(guarded, call) for key, call in calls.items()}
    return {key: future.result() for key, future in futures.items()}


class _Declared(PolicyBase):
    """A policy object that only has ``allocate`` (and maybe ``name``), with the round loop's
    defaults: the runtime's jobs are elastic (their GPU count may change)."""

    def __init__(self, inner: Any, round_length: float) -> None:
        for flag in ("elastic", "forking"):  # elastic = "no" was taken as True
            if not isinstance(getattr(inner, flag, False), bool | np.bool_):
                raise InputError(f"policy.{flag}", getattr(inner, flag), "must be True or False")
        super().__init__(name=getattr(inner, "name", type(inner).__name__.lower()), round_length=round_length,
                         elastic=bool(getattr(inner, "elastic", True)), forking=bool(getattr(inner, "forking", False)),
                         restart_delay_s=getattr(inner, "restart_delay_s", None))
        self.inner = inner

    def allocate(self, cluster: Cluster, jobs: Sequence[Any], now: float) -> Any:
        return self.inner.allocate(cluster, jobs, now)


class RoundExecutor:
    """Run ``jobs`` under ``policy``, one allocation per round, on local processes or a Ray cluster.

    Args:
        cluster: the GPUs the policy may hand out; ``None`` with a backend that reads its cluster
            (:class:`~heteroplan.runtime.ray_backend.RayBackend`: the Ray cluster's GPU nodes).
        policy: any :class:`~heteroplan.policies.base.Policy` (an object with only
            ``allocate`` gets the defaults of :class:`~heteroplan.policies.base.PolicyBase`, elastic),
            or a registered name (:func:`~heteroplan.policies.registry.make_policy`).
        jobs: the jobs and their arrival times.
        workdir: checkpoints go to ``workdir/<job_id>`` (on a Ray cluster: a path every node
            reaches); the session is saved to ``workdir/session.json`` after every round.
        round_length: seconds per round.
        max_rounds: stop after this many rounds even if jobs remain.
        progress: called with each :class:`RoundLog`.
        backend: where ranks run (:class:`~heteroplan.runtime.backends.LocalBackend` by default).
        max_failures: a job whose run failed this many times is given up with its reason
            (``JobRecord.gave_up``).
        resume: continue the run saved in ``workdir/session.json`` (after the scheduler process
            stopped): the same jobs, their progress and the policy's state; jobs that held GPUs
            restart from their checkpoints at the first round. Where nothing is saved there, the
            run starts afresh, with a warning saying so.

    ``session`` is the :class:`~heteroplan.scheduling.SchedulingSession` it drives; ``outcomes``
    each job's :class:`~heteroplan.scheduling.JobRecord` (times in seconds since the run started);
    ``latencies`` a :class:`RestartLatency` per launch; ``placements`` (Ray) where each launch's
    ranks ran.
    """

    SESSION_FILE = "session.json"

    def __init__(self, cluster: Cluster | None, policy: Policy | str, jobs: Sequence[RuntimeJob],
                 workdir: str | Path, round_length: float = 30.0, max_rounds: int = 1000,
                 progress: Callable[[RoundLog], None] | None = None, *, backend: ExecutionBackend | None = None,
                 max_failures: int = 3, resume: bool = False) -> None:
        self.backend = LocalBackend() if backend is None else backend
        if not isinstance(self.backend, ExecutionBackend):
            raise InputError("backend", type(self.backend).__name__, "must be an ExecutionBackend (LocalBackend, RayBackend)")
        if cluster is None:
            cluster = self.backend.cluster()
            if cluster is None:
                raise InputError("cluster", None, "give the cluster (this backend does not read one)")
        if not isinstance(cluster, Cluster):
            raise InputError("cluster", type(cluster).__name__, "must be a heteroplan.cluster.Cluster")
        if isinstance(policy, str):
            policy = make_policy(policy)
        if not callable(getattr(policy, "allocate", None)):
            raise InputError("policy", type(policy).__name__, "has no allocate(cluster, jobs, now)")
        if isinstance(jobs, RuntimeJob) or not isinstance(jobs, Sequence) or isinstance(jobs, str):
            raise InputError("jobs", type(jobs).__name__, "must be a sequence of RuntimeJob")
        for j in jobs:
            if not isinstance(j, RuntimeJob):
                raise InputError("jobs", j, "must be a sequence of RuntimeJob")
        ids = [j.job_id for j in jobs]
        if len(set(ids)) != len(ids):
            raise InputError("jobs.job_id", sorted(i for i in ids if ids.count(i) > 1)[0], "job ids must be unique")
        check_wait("round_length", round_length)  # a real wait: bounded as torch's timeouts are
        max_failures = strict_int("max_failures", max_failures, 1)
        max_rounds = strict_int("max_rounds", max_rounds, 0)  # 2.5 failed in run() after the checks; -1 ran nothing
        if progress is not None and not callable(progress):  # it was called only after the first round's training
            raise InputError("progress", type(progress).__name__, "must be a callable taking a RoundLog, or None")
        if not isinstance(resume, bool):
            raise InputError("resume", resume, "must be True or False")
        if a_path("workdir", workdir).exists() and not Path(workdir).is_dir():
            raise InputError("workdir", str(workdir), "is a file, not a directory (checkpoints go to workdir/<job_id>)")
        if not all(hasattr(policy, a) for a in ("name", "round_length", "elastic", "forking")):
            policy = _Declared(policy, float(round_length))
        if policy.forking:  # its copies would run as one gang, and the simulator would rate them as copies
            raise InputError("policy", policy.name, "forks jobs into copies (HadarE); the round executor runs "
                             "one gang per job: use a policy that does not fork, e.g. 'hadar'")
        self.cluster, self.policy, self.jobs = cluster, policy, list(jobs)
        self.workdir = Path(workdir)
        self.round_length, self.max_rounds, self.progress = float(round_length), max_rounds, progress
        self.max_failures = max_failures
        self.log: list[RoundLog] = []
        self.latencies: list[RestartLatency] = []
        self.placements: dict[str, list[Any]] = {}
        self._running: dict[str, _Running] = {}
        self._events: list[ExecutorEvent] = []  # this round's (a stop at shutdown may add to them)
        self.stopped_by: StopFlag | None = None  # the run's signal flag (its signum: SIGINT/SIGTERM, or None)
        self._by_id = {j.job_id: j for j in self.jobs}
        self._saving = True
        self._clock0 = 0.0  # seconds of the run before this process (a resumed run)
        saved = self.workdir / self.SESSION_FILE
        if resume and saved.is_file():
            self.session = SchedulingSession.load(saved, cluster, policy,
                                                  {j.job_id: j.estimator for j in self.jobs if j.estimator is not None})
            missing = sorted(set(ids) - set(self.session.job_ids))
            if missing or len(ids) != len(self.session.job_ids):
                raise InputError("jobs", missing or sorted(set(self.session.job_ids) - set(ids)),
                                 f"the jobs must be those of the saved run ({saved})")
            self._clock0 = self.session.last_round_time or 0.0
            return
        if resume:  # asked to continue, but nothing was saved there: say so, then start afresh
            log.warning("resume: no saved run at %s; starting the run afresh", saved)
        self.session = SchedulingSession(cluster, policy, free_moves=True)
        for j in self.jobs:
            self.session.submit(j.job_id, arrival_time=float(j.arrival_time), application=j.application,
                                perf_model=j.estimator, requested_gpus=j.requested_gpus,
                                max_gpus=min(j.max_gpus, j.global_batch_size),
                                batch_size=j.global_batch_size, total_work=float(j.steps * j.global_batch_size),
                                restart_delay_s=j.restart_delay_s)

    @property
    def outcomes(self) -> dict[str, JobRecord]:
        """Each job's record so far (job id -> :class:`~heteroplan.scheduling.JobRecord`)."""
        return {j.job_id: self.session.record(j.job_id) for j in self.jobs}

    # --------------------------------------------------------------------- helpers
    def _config(self, job: RuntimeJob) -> RunConfig:
        return replace(job.config, steps=job.steps, checkpoint_dir=str(self.workdir / job.job_id), resume=True)

    def _num_layers(self, job: RuntimeJob) -> int:
        layers = getattr(job.task, "num_layers", None)
        return layers if isinstance(layers, int) else len(job.task.build_model())

    def _steps_done(self, job: RuntimeJob) -> int:
        return self.session.record(job.job_id).steps_done

    def _report_steps(self, job: RuntimeJob, steps: int) -> None:
        steps = min(steps, job.steps)
        self.session.report(job.job_id, steps_done=steps, work_done=float(steps * job.global_batch_size))

    def _observe(self, job: RuntimeJob, run: _Running) -> None:
        """Report the steps measured since the last call (first step: warm-up) to the session, which
        feeds them to the job's estimator, and the gradient noise scale. With ``adaptive_batch`` the
        step time is per accumulation step of ``local_bsz`` samples (plus the sync); otherwise per
        iteration of ``global / n``."""
        reported = run.handle.steps
        steps: list[StepMetrics] = reported[max(run.seen, 1):]
        run.seen = len(reported)
        latest = reported[-1].step if reported else 0  # none yet: still starting (no progress)
        self._report_steps(job, max(latest, self._steps_done(job)))
        self._observe_noise(job, steps)
        if not steps or not isinstance(job.estimator, ObservesSteps) or run.allocation.mixed:
            return
        n, plan = run.allocation.num_gpus, run.handle.plan
        placement = tuple(c for _, c in run.allocation.placement) or (n,)
        rounds = max(plan.microbatches()) if job.adaptive_batch else 1  # accumulation steps + 1
        sync = statistics.median(m.sync_time for m in steps)
        step = statistics.median(m.iteration_time for m in steps)
        self.session.report(job.job_id, step_timing=StepTiming(
            run.allocation.gpu_type, placement, plan.global_batch_size / (n * rounds), (step - sync) / rounds + sync,
            sync))

    def _observe_noise(self, job: RuntimeJob, steps: list[StepMetrics]) -> None:
        """Gradient noise scale ``tr(Sigma) / |G|^2`` over the round's steps (ratio of means) -> the session."""
        stats = [(m.grad_var, m.grad_sqr) for m in steps if m.grad_sqr is not None and m.grad_var is not None]
        if not stats:
            return
        var, sqr = (float(np.mean(v)) for v in zip(*stats, strict=True))
        if var > 0 and sqr > 0:
            self.session.report(job.job_id, phi=var / sqr)

    def _now(self) -> float:
        return self._clock0 + time.monotonic() - self._t0

    def _stop(self, *jobs: RuntimeJob) -> None:
        """Stop ``jobs`` at an iteration boundary (they checkpoint), all at once; a failure while
        stopping counts as a failure."""
        runs = {job.job_id: self._running[job.job_id] for job in jobs}
        outcomes = _concurrently({jid: partial(_halt, run.handle) for jid, run in runs.items()})
        for job in jobs:
            result = outcomes[job.job_id]
            if isinstance(result, RankFailure):
                self._failed(job, result, EventKind.FAIL)
                continue
            self._running.pop(job.job_id)
            self._observe(job, runs[job.job_id])
            self._report_steps(job, max(result.final_step, self._steps_done(job)))
            if result.final_step >= job.steps and self.session.record(job.job_id).finish_time is None:
                self.session.finish(job.job_id, self._now())

    def _failed(self, job: RuntimeJob, exc: RankFailure, kind: EventKind) -> None:
        """``job``'s run failed: its ranks are gone; it restarts from its checkpoint next round, or
        is given up after ``max_failures`` failures."""
        self._drop(job.job_id)
        now = self._now()
        checkpoint = latest_checkpoint(self.workdir / job.job_id)
        redone = max(0, self._steps_done(job) - (checkpoint.step if checkpoint else 0))
        record = self.session.record(job.job_id)
        if record.finish_time is None and record.gave_up is None:
            self.session.fail(job.job_id, now, steps_redone=redone)
        cause = exc.reason.splitlines()[0][:200]
        self._events.append(ExecutorEvent(kind, job.job_id, now, f"{cause}; {redone} iteration(s) to redo"))
        self._give_up_if_exhausted(job.job_id, now, cause)

    def _drop(self, job_id: str) -> None:
        """``job_id``'s ranks are gone or going: kill what is left, keep what they reported."""
        run = self._running.pop(job_id, None)
        if run is not None:
            run.handle.terminate()
            self._observe(self._by_id[job_id], run)

    def _give_up_if_exhausted(self, job_id: str, now: float, cause: str) -> None:
        """After ``max_failures`` failures the job is given up, with its last failure as the reason."""
        record = self.session.record(job_id)
        if record.gave_up is None and record.failures >= self.max_failures:
            reason = f"failed {self.max_failures} times; last: {cause}"
            self.session.give_up(job_id, now, reason)
            self._events.append(ExecutorEvent(EventKind.GIVE_UP, job_id, now, reason))

    def _launch(self, starts: list[Decision], decided: float) -> None:
        """Start the jobs of ``starts`` on their allocations, all at once (a backend's start-up:
        process or actor start, rendezvous, checkpoint probe)."""
        started = self._now()
        calls = {}
        for d in starts:
            job, alloc = self._by_id[d.job_id], d.allocation
            assert alloc is not None
            plan = job_plan(job, alloc, self._num_layers(job), self._steps_done(job) / job.steps,
                            self.session.cluster)
            calls[d.job_id] = partial(self.backend.launch, job.job_id, plan, alloc, job.task, self._config(job))
        handles = _concurrently(calls)
        for d in starts:
            job, alloc, handle = self._by_id[d.job_id], d.allocation, handles[d.job_id]
            assert alloc is not None
            if isinstance(handle, RankFailure):
                self._failed(job, handle, EventKind.FAIL)
                continue
            self._running[job.job_id] = _Running(handle, alloc, started=started, decided=decided,
                                                 assumed_s=d.restore_s,
                                                 restart=self.session.record(job.job_id).restarts > 0)
            if handle.placements:
                self.placements.setdefault(job.job_id, []).append((alloc, tuple(handle.placements)))
            self._events.append(ExecutorEvent(EventKind.START, job.job_id, self._now(),
                                              f"{alloc.num_gpus} x {alloc.gpu_type}"))

    def _refresh_cluster(self) -> None:
        """Read the backend's cluster; when it changed, the session schedules on the new one and
        jobs on lost nodes are stopped (they restart from their checkpoints)."""
        cluster = self.backend.cluster()
        if cluster is None or cluster.nodes == self.session.cluster.nodes:
            return
        now = self._now()
        old = {n.name for n in self.session.cluster.nodes}
        new = {n.name for n in cluster.nodes}
        for name in sorted(new - old):
            self._events.append(ExecutorEvent(EventKind.NODE_ADDED, name, now))
        for name in sorted(old - new):
            self._events.append(ExecutorEvent(EventKind.NODE_LOST, name, now))
        for jid in self.session.update_cluster(cluster, now):
            self._drop(jid)
            self._events.append(ExecutorEvent(EventKind.LOST, jid, now, "its node left the cluster"))
            self._give_up_if_exhausted(jid, now, "its node left the cluster")
        self.cluster = cluster

    def _save(self) -> None:
        if not self._saving:
            return
        try:
            self.session.save(self.workdir / self.SESSION_FILE)
        except InputError as exc:  # the path cannot be written: say so once, keep running
            log.warning("the session is not saved (the run cannot be resumed): %s", exc)
            self._saving = False

    # ------------------------------------------------------------------------ run
    def run(self) -> dict[str, JobRecord]:
        """Run rounds until every job is done or given up (or ``max_rounds``); returns each job's
        record. SIGINT/SIGTERM (in the main thread) stop every running job at an iteration
        boundary with a checkpoint and save the session: ``resume=True`` continues it."""
        self._t0 = time.monotonic()
        try:
            self.workdir.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise InputError("workdir", str(self.workdir), f"cannot create it: {exc.strerror or exc}") from None
        with stop_on_signals() as stopped:  # also while cleaning up: a second Ctrl-C must not cut it short
            self.stopped_by = stopped
            try:
                for index in range(self.max_rounds):
                    if not self.session.unfinished() or stopped():
                        break
                    self._round(index, stopped)
            finally:
                stopping = list(self._running)
                self._stop(*(self._by_id[jid] for jid in stopping))
                for jid in stopping:
                    record = self.session.record(jid)
                    if record.finish_time is None and record.gave_up is None:
                        self.session.release(jid, self._now())  # stopped, checkpointed: restarted on resume
                self.session.settle(self._now())
                self._save()
        return self.outcomes

    def _round(self, index: int, stopped: Callable[[], bool]) -> None:
        self._events = []
        self._refresh_cluster()
        now = self._now()
        decided = time.monotonic()
        decisions = self.session.round(now)
        moved = [d for d in decisions
                 if d.job_id in self._running and d.kind in (DecisionKind.PREEMPT, DecisionKind.RESCALE)]
        self._stop(*(self._by_id[d.job_id] for d in moved))
        for d in moved:
            kind = EventKind.STOP if d.kind is DecisionKind.PREEMPT else EventKind.RESCALE
            self._events.append(ExecutorEvent(kind, d.job_id, self._now()))
        starts = []
        for d in decisions:
            if d.allocation is None:
                continue
            if d.job_id in self._running:
                self._running[d.job_id].allocation = d.allocation
                continue
            record = self.session.record(d.job_id)
            if record.finish_time is None and record.gave_up is None:
                starts.append(d)
        self._launch(starts, decided)
        self._wait_round(decided + self.round_length, stopped)  # rounds start on the clock, as simulated
        for jid, run in list(self._running.items()):
            self._observe(self._by_id[jid], run)
        entry = RoundLog(index, now, {j: (a.gpu_type, a.num_gpus) for j, a in decisions.allocations.items()},
                         tuple(self._events))
        self.log.append(entry)
        self._save()
        if self.progress is not None:
            self.progress(entry)

    def _wait_round(self, end: float, stopped: Callable[[], bool]) -> None:
        """Poll running jobs until the round ends; retire jobs that finish, restart failed ones next round."""
        while time.monotonic() < end and not stopped():
            for jid in list(self._running):
                run = self._running[jid]
                try:
                    going = run.handle.poll()
                except RankFailure as exc:
                    self._failed(self._by_id[jid], exc, EventKind.FAIL)
                    continue
                if not run.first_step and len(run.handle.steps) > 0:
                    run.first_step = True
                    self.latencies.append(RestartLatency(jid, run.started, time.monotonic() - run.decided,
                                                         run.assumed_s, run.restart, run.allocation.num_gpus))
                if not going:
                    self._stop(self._by_id[jid])
                    self._events.append(ExecutorEvent(EventKind.FINISH, jid, self._now()))
            if not self._running and not self.session.unfinished():
                return
            time.sleep(0.05)
