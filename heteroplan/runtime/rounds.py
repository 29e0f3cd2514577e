"""Round executor: a cluster policy (Sia, Pollux, Gavel, ...) driving real training jobs.

Every ``round_length`` seconds the executor shows the policy the same :class:`JobState`
views the simulator builds, then applies its allocations to running jobs: a job whose GPU type
and count are unchanged keeps running; a changed one is stopped at an iteration boundary,
checkpointed and relaunched with the new data-parallel degree (checkpoint-restore on rescale);
a job that lost its GPUs is stopped. Each round, the step and synchronization times measured
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
from heteroplan.perf.measurements import Measurements
from heteroplan.planner.plan import Plan, ReplicaGroup, Stage
from heteroplan.policies.base import Allocation, JobState, Policy, check_allocations
from heteroplan.policies.registry import make_policy
from heteroplan.runtime.config import RunConfig, StepMetrics, make_optimizer
from heteroplan.runtime.launch import RunHandle, launch
from heteroplan.runtime.models import TrainTask

__all__ = ["RuntimeJob", "RoundExecutor", "RoundLog", "JobOutcome", "data_parallel_plan", "job_plan", "measure_single_gpu"]


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


@dataclass
class JobOutcome:
    """How a job fared: times in seconds since the executor started."""

    job_id: str
    arrival_time: float
    finish_time: float | None = None
    steps_done: int = 0
    restarts: int = 0
    gpu_seconds: float = 0.0
    observations: int = 0
    phi: float | None = None
    """Gradient noise scale (samples) last measured from the job's gradients."""

    @property
    def jct(self) -> float | None:
        """Job completion time (s), ``None`` if unfinished."""
        return None if self.finish_time is None else self.finish_time - self.arrival_time


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


class RoundExecutor:
    """Run ``jobs`` on local processes under ``policy``, one allocation per round.

    Args:
        cluster: the GPUs the policy may hand out (one local process per GPU).
        policy: any :class:`~heteroplan.policies.base.Policy`, or a registered name
            (:func:`~heteroplan.policies.registry.make_policy`).
        jobs: the jobs and their arrival times.
        workdir: checkpoints go to ``workdir/<job_id>``.
        round_length: seconds per round.
        max_rounds: stop after this many rounds even if jobs remain.
        progress: called with each :class:`RoundLog`.
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
        self.cluster, self.policy, self.jobs = cluster, policy, list(jobs)
        self.workdir = Path(workdir)
        self.round_length, self.max_rounds, self.progress = float(round_length), max_rounds, progress
        self.outcomes = {j.job_id: JobOutcome(j.job_id, j.arrival_time) for j in jobs}
        self.log: list[RoundLog] = []
        self._running: dict[str, _Running] = {}
        self._last: dict[str, Allocation] = {}

    # --------------------------------------------------------------------- helpers
    def _config(self, job: RuntimeJob) -> RunConfig:
        return replace(job.config, steps=job.steps, checkpoint_dir=str(self.workdir / job.job_id), resume=True,
                       fault=None)

    def _num_layers(self, job: RuntimeJob) -> int:
        layers = getattr(job.task, "num_layers", None)
        return layers if isinstance(layers, int) else len(job.task.build_model())

    def _state(self, job: RuntimeJob, now: float) -> JobState:
        out = self.outcomes[job.job_id]
        return JobState(job.job_id, job.application, job.arrival_time, requested_gpus=1, elastic=True,
                        max_gpus=min(job.max_gpus, job.global_batch_size), allocation=self._last.get(job.job_id),
                        num_restarts=out.restarts, attained_service=out.gpu_seconds,
                        progress=out.steps_done / job.steps, estimator=job.estimator,
                        remaining_work=float(max(job.steps - out.steps_done, 0) * job.global_batch_size))

    def _observe(self, job: RuntimeJob, run: _Running) -> None:
        """Feed the steps measured since the last call to the job's estimator (first step: warm-up),
        and the gradient noise scale. With ``adaptive_batch`` the step time is per accumulation
        step of ``local_bsz`` samples (plus the sync); otherwise per iteration of ``global / n``."""
        steps: list[StepMetrics] = run.handle.steps[max(run.seen, 1):]
        run.seen = len(run.handle.steps)
        self._observe_noise(job, steps)
        observe = getattr(job.estimator, "observe", None)
        if not steps or observe is None or "+" in run.allocation.gpu_type:
            return
        n, plan = run.allocation.num_gpus, run.handle.plan
        placement = [c for _, c in run.allocation.placement] or [n]
        rounds = max(plan.microbatches()) if job.adaptive_batch else 1  # accumulation steps + 1
        sync = statistics.median(m.sync_time for m in steps)
        step = statistics.median(m.iteration_time for m in steps)
        observe(run.allocation.gpu_type, placement, plan.global_batch_size / (n * rounds), (step - sync) / rounds + sync, sync)
        self.outcomes[job.job_id].observations += 1

    def _observe_noise(self, job: RuntimeJob, steps: list[StepMetrics]) -> None:
        """Gradient noise scale ``tr(Sigma) / |G|^2`` over the round's steps (ratio of means) -> the estimator."""
        stats = [(m.extra["grad_var"], m.extra["grad_sqr"]) for m in steps if "grad_sqr" in m.extra]
        if not stats:
            return
        var, sqr = (float(np.mean(v)) for v in zip(*stats, strict=True))
        if var > 0 and sqr > 0:
            self.outcomes[job.job_id].phi = var / sqr
            setter = getattr(job.estimator, "set_measured_phi", None)
            if setter is not None:
                setter(var / sqr)

    def _stop(self, job: RuntimeJob, now: float) -> None:
        run = self._running.pop(job.job_id)
        run.handle.stop()
        result = run.handle.wait()
        self._observe(job, run)
        out = self.outcomes[job.job_id]
        out.steps_done = result.final_step
        out.gpu_seconds += run.allocation.num_gpus * (now - run.started)
        if out.steps_done >= job.steps and out.finish_time is None:
            out.finish_time = now

    # ------------------------------------------------------------------------ run
    def run(self) -> dict[str, JobOutcome]:
        """Run rounds until every job is done (or ``max_rounds``); returns each job's outcome."""
        t0 = time.monotonic()
        by_id = {j.job_id: j for j in self.jobs}
        try:
            for index in range(self.max_rounds):
                now = time.monotonic() - t0
                active = [j for j in self.jobs if j.arrival_time <= now and self.outcomes[j.job_id].finish_time is None]
                pending = [j for j in self.jobs if j.arrival_time > now]
                if not active and not pending:
                    break
                events: list[str] = []
                allocs = check_allocations(
                    self.cluster, self.policy.allocate(self.cluster, [self._state(j, now) for j in active], now),
                    [j.job_id for j in active])
                for jid in list(self._running):
                    new = allocs.get(jid)
                    if new is None or not new.same_resources(self._running[jid].allocation):
                        self._stop(by_id[jid], time.monotonic() - t0)
                        events.append(f"stop {jid}" if new is None else f"rescale {jid}")
                for jid, alloc in allocs.items():
                    if jid in self._running:
                        self._running[jid] = replace(self._running[jid], allocation=alloc)
                        continue
                    job = by_id[jid]
                    if self.outcomes[jid].finish_time is not None:
                        continue
                    plan = job_plan(job, alloc, self._num_layers(job), self.outcomes[jid].steps_done / job.steps)
                    if jid in self._last or self.outcomes[jid].steps_done:
                        self.outcomes[jid].restarts += 1
                    self._running[jid] = _Running(launch(plan, job.task, self._config(job)), alloc,
                                                  started=time.monotonic() - t0)
                    events.append(f"start {jid} on {alloc.num_gpus} x {alloc.gpu_type}")
                self._last = {jid: a for jid, a in allocs.items()}
                self._wait_round(time.monotonic() + self.round_length, by_id, t0, events)
                for jid, run in self._running.items():
                    self._observe(by_id[jid], run)
                entry = RoundLog(index, now, {j: (a.gpu_type, a.num_gpus) for j, a in allocs.items()}, tuple(events))
                self.log.append(entry)
                if self.progress is not None:
                    self.progress(entry)
        finally:
            for jid in list(self._running):
                self._stop(by_id[jid], time.monotonic() - t0)
        return self.outcomes

    def _wait_round(self, end: float, by_id: Mapping[str, RuntimeJob], t0: float, events: list[str]) -> None:
        """Poll running jobs until the round ends; retire jobs that finish."""
        while time.monotonic() < end:
            for jid in list(self._running):
                if not self._running[jid].handle.poll():
                    self._stop(by_id[jid], time.monotonic() - t0)
                    self._last.pop(jid, None)
                    events.append(f"finish {jid}")
            if not self._running and all(o.finish_time is not None for o in self.outcomes.values()):
                return
            time.sleep(0.05)
