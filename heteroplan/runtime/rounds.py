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

import statistics
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np

from heteroplan.cluster import Cluster
from heteroplan.errors import InputError, check_int, check_seconds
from heteroplan.names import path_component
from heteroplan.perf.measurements import Measurements
from heteroplan.planner.plan import Plan, ReplicaGroup, Stage
from heteroplan.policies.base import Allocation, Policy, PolicyBase
from heteroplan.policies.registry import make_policy
from heteroplan.runtime.config import RunConfig, StepMetrics, make_optimizer
from heteroplan.runtime.launch import RunHandle, launch
from heteroplan.runtime.models import TrainTask
from heteroplan.scheduling import DecisionKind, JobRecord, SchedulingSession, StepTiming

__all__ = ["RuntimeJob", "RoundExecutor", "RoundLog", "JobOutcome", "data_parallel_plan", "job_plan", "measure_single_gpu"]

JobOutcome = JobRecord  # the former name: one record type for session, simulator and runtime


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

    def __post_init__(self) -> None:
        path_component("job_id", self.job_id)  # its checkpoints go to workdir/<job_id>
        for name in ("steps", "global_batch_size", "max_gpus"):
            check_int(f"job[{self.job_id}].{name}", getattr(self, name), 1)
        if not (isinstance(self.arrival_time, int | float) and self.arrival_time >= 0):
            raise InputError(f"job[{self.job_id}].arrival_time", self.arrival_time, "must be seconds >= 0")


@dataclass(frozen=True)
class RoundLog:
    """One round: when it started (s), what each job got, and what happened."""

    index: int
    time: float
    allocations: dict[str, tuple[str, int]]
    events: tuple[str, ...]


def data_parallel_plan(name: str, global_batch_size: int, num_gpus: int, num_layers: int, gpu_type: str,
                       zone: str = "local") -> Plan:
    """A pure data-parallel plan on ``num_gpus`` replicas (uneven samples split by microbatch counts)."""
    if num_gpus > global_batch_size:
        raise InputError("num_gpus", num_gpus, f"more GPUs than samples per iteration ({global_batch_size})")
    stage = Stage(0, num_layers, (ReplicaGroup(gpu_type, zone, 1, num_gpus),))
    if global_batch_size % num_gpus == 0:
        return Plan(name, global_batch_size, global_batch_size // num_gpus, (stage,))
    base, extra = divmod(global_batch_size, num_gpus)
    micro = tuple(base + (d < extra) for d in range(num_gpus))
    return Plan(name, global_batch_size, 1, (stage,), micro)


def measure_single_gpu(task: TrainTask, local_batch_sizes: Sequence[int], steps: int = 3,
                       config: RunConfig | None = None) -> Measurements:
    """Sia's profiling step, in this process: seconds per iteration on one device at each local batch."""
    config = config or RunConfig()
    model = task.build_model()
    opt = make_optimizer([p for p in model.parameters() if p.requires_grad], config)
    times = []
    for bsz in local_batch_sizes:
        samples = []
        for step in range(steps + 1):
            x, y = task.batch(step, 0, int(bsz))
            t0 = time.perf_counter()
            task.loss(model(x), y).backward()
            opt.step()
            opt.zero_grad(set_to_none=True)
            samples.append(time.perf_counter() - t0)
        times.append(statistics.median(samples[1:]))
    n = len(times)
    return Measurements(np.ones(n), np.ones(n), np.asarray(local_batch_sizes, float), np.asarray(times), np.zeros(n))


def job_plan(job: RuntimeJob, alloc: Allocation, num_layers: int, progress: float) -> Plan:
    """The plan ``job`` runs on ``alloc``: data parallel over its GPUs, at the batch the estimator
    picks (``adaptive_batch``) or at ``job.global_batch_size``."""
    optimize = getattr(job.estimator, "optimize", None)
    if job.adaptive_batch and optimize is not None:
        _, local, accum = optimize(alloc.gpu_type, max(alloc.num_nodes, 1), alloc.num_gpus, progress=progress)
        local, accum = int(local), int(accum)
        if local > 0:  # 0: no model for this type yet; keep the job's batch
            stage = Stage(0, num_layers, (ReplicaGroup(alloc.gpu_type, "local", 1, alloc.num_gpus),))
            return Plan(job.application, alloc.num_gpus * local * (accum + 1), local, (stage,),
                        (accum + 1,) * alloc.num_gpus)
    return data_parallel_plan(job.application, job.global_batch_size, alloc.num_gpus, num_layers, alloc.gpu_type)


@dataclass
class _Running:
    handle: RunHandle
    allocation: Allocation
    seen: int = 0  # step reports already observed
    started: float = 0.0


class _Declared(PolicyBase):
    """A policy object that only has ``allocate`` (and maybe ``name``), with the round loop's
    defaults: the runtime's jobs are elastic (their GPU count may change)."""

    def __init__(self, inner: Any, round_length: float) -> None:
        super().__init__(name=getattr(inner, "name", type(inner).__name__.lower()), round_length=round_length,
                         elastic=bool(getattr(inner, "elastic", True)), forking=bool(getattr(inner, "forking", False)),
                         restart_delay_s=getattr(inner, "restart_delay_s", None))
        self.inner = inner

    def allocate(self, cluster: Cluster, jobs: Sequence[Any], now: float) -> Any:
        return self.inner.allocate(cluster, jobs, now)


class RoundExecutor:
    """Run ``jobs`` on local processes under ``policy``, one allocation per round.

    Args:
        cluster: the GPUs the policy may hand out (one local process per GPU).
        policy: any :class:`~heteroplan.policies.base.Policy` (an object with only
            ``allocate`` gets the defaults of :class:`~heteroplan.policies.base.PolicyBase`, elastic),
            or a registered name (:func:`~heteroplan.policies.registry.make_policy`).
        jobs: the jobs and their arrival times.
        workdir: checkpoints go to ``workdir/<job_id>``.
        round_length: seconds per round.
        max_rounds: stop after this many rounds even if jobs remain.
        progress: called with each :class:`RoundLog`.

    ``session`` is the :class:`~heteroplan.scheduling.SchedulingSession` it drives; ``outcomes``
    each job's :class:`~heteroplan.scheduling.JobRecord` (times in seconds since the run started).
    """

    def __init__(self, cluster: Cluster, policy: Policy | str, jobs: Sequence[RuntimeJob], workdir: str | Path,
                 round_length: float = 30.0, max_rounds: int = 1000,
                 progress: Callable[[RoundLog], None] | None = None) -> None:
        if not isinstance(cluster, Cluster):
            raise InputError("cluster", type(cluster).__name__, "must be a heteroplan.cluster.Cluster")
        if isinstance(policy, str):
            policy = make_policy(policy)
        if not callable(getattr(policy, "allocate", None)):
            raise InputError("policy", type(policy).__name__, "has no allocate(cluster, jobs, now)")
        ids = [j.job_id for j in jobs]
        if len(set(ids)) != len(ids):
            raise InputError("jobs.job_id", sorted(i for i in ids if ids.count(i) > 1)[0], "job ids must be unique")
        check_seconds("round_length", round_length)
        if not all(hasattr(policy, a) for a in ("name", "round_length", "elastic", "forking")):
            policy = _Declared(policy, float(round_length))
        self.cluster, self.policy, self.jobs = cluster, policy, list(jobs)
        self.workdir = Path(workdir)
        self.round_length, self.max_rounds, self.progress = float(round_length), max_rounds, progress
        self.session = SchedulingSession(cluster, policy, free_moves=True)
        for j in self.jobs:
            self.session.submit(j.job_id, arrival_time=float(j.arrival_time), application=j.application,
                                perf_model=j.estimator, requested_gpus=1, max_gpus=min(j.max_gpus, j.global_batch_size),
                                batch_size=j.global_batch_size, total_work=float(j.steps * j.global_batch_size),
                                restart_delay_s=0.0)
        self.log: list[RoundLog] = []
        self._running: dict[str, _Running] = {}

    @property
    def outcomes(self) -> dict[str, JobRecord]:
        """Each job's record so far (job id -> :class:`~heteroplan.scheduling.JobRecord`)."""
        return {j.job_id: self.session.record(j.job_id) for j in self.jobs}

    # --------------------------------------------------------------------- helpers
    def _config(self, job: RuntimeJob) -> RunConfig:
        return replace(job.config, steps=job.steps, checkpoint_dir=str(self.workdir / job.job_id), resume=True,
                       fault=None)

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
        steps: list[StepMetrics] = run.handle.steps[max(run.seen, 1):]
        run.seen = len(run.handle.steps)
        latest = run.handle.steps[-1].step if run.handle.steps else 0  # none yet: still starting (no progress)
        self._report_steps(job, max(latest, self._steps_done(job)))
        self._observe_noise(job, steps)
        if not steps or getattr(job.estimator, "observe", None) is None or run.allocation.mixed:
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
        stats = [(m.extra["grad_var"], m.extra["grad_sqr"]) for m in steps if "grad_sqr" in m.extra]
        if not stats:
            return
        var, sqr = (float(np.mean(v)) for v in zip(*stats, strict=True))
        if var > 0 and sqr > 0:
            self.session.report(job.job_id, phi=var / sqr)

    def _stop(self, job: RuntimeJob, now: float) -> None:
        run = self._running.pop(job.job_id)
        run.handle.stop()
        result = run.handle.wait()
        self._observe(job, run)
        self._report_steps(job, max(result.final_step, self._steps_done(job)))
        if result.final_step >= job.steps and self.session.record(job.job_id).finish_time is None:
            self.session.finish(job.job_id, now)

    # ------------------------------------------------------------------------ run
    def run(self) -> dict[str, JobRecord]:
        """Run rounds until every job is done (or ``max_rounds``); returns each job's record."""
        t0 = time.monotonic()
        by_id = {j.job_id: j for j in self.jobs}
        try:
            for index in range(self.max_rounds):
                now = time.monotonic() - t0
                if not self.session.unfinished():
                    break
                events: list[str] = []
                decisions = self.session.round(now)
                for d in decisions:
                    if d.job_id in self._running and d.kind in (DecisionKind.PREEMPT, DecisionKind.RESCALE):
                        self._stop(by_id[d.job_id], time.monotonic() - t0)
                        events.append(f"stop {d.job_id}" if d.kind is DecisionKind.PREEMPT else f"rescale {d.job_id}")
                for d in decisions:
                    if d.allocation is None:
                        continue
                    if d.job_id in self._running:
                        self._running[d.job_id] = replace(self._running[d.job_id], allocation=d.allocation)
                        continue
                    job = by_id[d.job_id]
                    if self.session.record(d.job_id).finish_time is not None:
                        continue
                    plan = job_plan(job, d.allocation, self._num_layers(job), self._steps_done(job) / job.steps)
                    self._running[d.job_id] = _Running(launch(plan, job.task, self._config(job)), d.allocation,
                                                       started=time.monotonic() - t0)
                    events.append(f"start {d.job_id} on {d.allocation.num_gpus} x {d.allocation.gpu_type}")
                self._wait_round(time.monotonic() + self.round_length, by_id, t0, events)
                for jid, run in self._running.items():
                    self._observe(by_id[jid], run)
                entry = RoundLog(index, now, {j: (a.gpu_type, a.num_gpus) for j, a in decisions.allocations.items()},
                                 tuple(events))
                self.log.append(entry)
                if self.progress is not None:
                    self.progress(entry)
        finally:
            for jid in list(self._running):
                self._stop(by_id[jid], time.monotonic() - t0)
            self.session.settle(time.monotonic() - t0)
        return self.outcomes

    def _wait_round(self, end: float, by_id: Mapping[str, RuntimeJob], t0: float, events: list[str]) -> None:
        """Poll running jobs until the round ends; retire jobs that finish."""
        while time.monotonic() < end:
            for jid in list(self._running):
                if not self._running[jid].handle.poll():
                    self._stop(by_id[jid], time.monotonic() - t0)
                    events.append(f"finish {jid}")
            if not self._running and not self.session.unfinished():
                return
            time.sleep(0.05)
