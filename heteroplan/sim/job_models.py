"""Simulator-side jobs: each workload family's ground truth behind one interface.

:class:`SimJob` holds the state the round loop keeps per job (work done, allocation,
restarts, service) and builds the :class:`~heteroplan.policies.base.JobState` policies see.
Subclasses say how fast the job really runs on ``k`` GPUs of one type:

- :class:`GoodputJob` -- a Sia workload job (:class:`~heteroplan.workload.sia.JobSpec`): the
  ground-truth goodput model fitted on all measurements, with the Sia artifact's slowdowns,
  batch-size choice and gradient statistics (:class:`~heteroplan.sim.fidelity.SimFidelity`);
  work in M0-equivalent samples. Policies see Sia's bootstrapped model or the truth.
- :class:`TableJob` -- a rigid task-level job (:class:`~heteroplan.workload.rigid.RigidJob`,
  Gavel-generated or the user's own throughput matrix): the whole job's steps/s per type at its
  gang size; work in steps. Policies see the same table
  (:class:`~heteroplan.perf.goodput.ThroughputTable`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from heteroplan.cluster import Cluster
from heteroplan.errors import InputError
from heteroplan.inputs import enum_choice
from heteroplan.perf.applications import AppSpec, get_app
from heteroplan.perf.goodput import GoodputModel, ThroughputTable
from heteroplan.perf.gradstats import GradStats
from heteroplan.perf.protocols import ObservesSteps
from heteroplan.perf.sia_data import Estimator, bootstrap_model, grad_stats, true_model
from heteroplan.perf.throughput import sync_time, throughput
from heteroplan.policies.base import Allocation, JobState, PerfModel
from heteroplan.scheduling.decisions import StepTiming
from heteroplan.sim.fidelity import BatchSizeSource, GradStatsSource, SimFidelity
from heteroplan.workload.rigid import RigidJob
from heteroplan.workload.sia import JobSpec

__all__ = ["SimJob", "GoodputJob", "TableJob", "build_jobs"]
_RATE_CACHE_LIMIT = 4096  # rates kept per job (configurations x model states)


@dataclass(eq=False)
class SimJob:
    """One job in the round loop (seconds, work units of its model, GPU-seconds)."""

    name: str
    application: str
    arrival_time: float
    requested_gpus: int
    max_gpus: int
    total_work: float
    restart_delay: float
    estimator: PerfModel
    elastic: bool
    given_batch: int = 0
    ready_time: float = 0.0
    done: float = 0.0
    batch_size: int = 0
    simulated: bool = False

    @property
    def fraction_done(self) -> float:
        return min(self.done / self.total_work, 1.0)

    @property
    def known_types(self) -> tuple[str, ...]:
        """GPU types the job has performance data for."""
        raise NotImplementedError

    def rate_on(self, gpu_type: str, num_nodes: int, num_gpus: int, oracle: bool = False) -> tuple[float, int, int]:
        """(real progress in work units/s, local batch, accumulation steps) on one GPU type."""
        raise NotImplementedError

    def ran(self, alloc: Allocation, local: int, accum: int) -> tuple[StepTiming | None, float | None]:
        """What the job measures when it runs on ``alloc`` (a step timing and the gradient noise
        scale, samples), for the scheduling session to feed to its estimator."""
        return None, None

    def next_rate_change(self) -> float:
        """Work done (work units) at which the job's rate next changes on a fixed allocation
        (the end of its current epoch); ``inf`` where the rate does not change in steps."""
        return math.inf

    def view(self) -> JobState:
        """The policy's view of the job before it is scheduled (the session keeps it after)."""
        return JobState(
            job_id=self.name, application=self.application, arrival_time=self.arrival_time,
            requested_gpus=self.requested_gpus, elastic=self.elastic, max_gpus=self.max_gpus,
            progress=self.fraction_done, remaining_work=max(0.0, self.total_work - self.done),
            restart_delay=self.restart_delay, estimator=self.estimator, batch_size=self.batch_size or self.given_batch,
            requested_batch=self.given_batch,
        )

    def isolated_time(self, cluster: Cluster) -> float:
        """Seconds the job would need alone on its best GPU type at its requested GPU count."""
        best = 0.0
        capacity = cluster.capacity()
        for t in cluster.gpu_types:
            k = min(self.requested_gpus, capacity[t.name])
            if k <= 0:
                continue
            n = max(1, math.ceil(k / t.gpus_per_node))
            best = max(best, self.rate_on(t.name, n, k, oracle=True)[0])
        return self.total_work / best if best > 0 else math.inf


@dataclass(eq=False)
class GoodputJob(SimJob):
    """A Sia workload job with a goodput ground truth (work: M0-equivalent samples)."""

    app: AppSpec | None = None
    truth: GoodputModel | None = None
    fidelity: SimFidelity = field(default_factory=SimFidelity)
    grad: GradStats | None = None
    slowdown: float = 1.0
    observed: set[tuple[str, tuple[int, ...]]] = field(default_factory=set)
    _batches: dict[tuple, tuple[int, int, float | None]] = field(default_factory=dict, repr=False)
    _throughputs: dict[tuple, float] = field(default_factory=dict, repr=False)
    _efficiencies: dict[tuple[int, int], float] = field(default_factory=dict, repr=False)
    _phis: dict[tuple[int, int], float] = field(default_factory=dict, repr=False)

    @property
    def known_types(self) -> tuple[str, ...]:
        return tuple(self.truth.gpu_types)

    def _uses_estimate(self, oracle: bool) -> bool:
        est = self.estimator
        return (self.elastic and not oracle and self.fidelity.batch_size is BatchSizeSource.ESTIMATED and est is not self.truth
                and isinstance(est, GoodputModel))

    def rate_on(self, gpu_type: str, num_nodes: int, num_gpus: int, oracle: bool = False) -> tuple[float, int, int]:
        """Elastic jobs pick their batch from their estimator (``fidelity.batch_size ==
        "estimated"``, unless ``oracle``) or from the ground truth; rigid jobs use their
        given batch. The rate is the ground truth's throughput at that batch times the
        statistical efficiency, divided by the application's slowdown.

        The batch choice is reused while the model that makes it stays the same (the
        estimator's version and noise scale, or the truth's noise scale) and the truth's
        throughput per batch always; arguments are trusted (the round loop checked the
        allocation)."""
        progress = self.fraction_done
        if self.elastic:
            local, accum, good = self._batch_choice(gpu_type, num_nodes, num_gpus, oracle, progress)
            if good is not None:
                return good / self.slowdown, local, accum
            if local <= 0:
                return 0.0, 0, 0
        else:
            local, accum = self._fixed_batch(gpu_type, num_gpus, self.given_batch)
        thr = self._throughput(gpu_type, num_nodes, num_gpus, local, accum)
        return thr * self._efficiency(num_gpus * local * (accum + 1)) / self.slowdown, local, accum

    def _batch_choice(self, gpu_type: str, n: int, k: int, oracle: bool,
                      progress: float) -> tuple[int, int, float | None]:
        """An elastic job's (local batch, accumulation steps) on this configuration, and its
        goodput (samples/s, before the slowdown) when the truth picks the batch and sets the
        efficiency itself (no per-epoch statistics); kept while the model state stays the same."""
        truth = self.truth
        if self._uses_estimate(oracle):
            est = self.estimator
            key = (gpu_type, n, k, est.version, est.noise_scale(progress))
            hit = self._batches.get(key)
            if hit is None:
                _, loc, acc = est.optimize(gpu_type, n, k, progress=progress)
                local, accum = int(loc), int(acc)
                if local <= 0:  # no model for this type yet: the initial batch size (Sia artifact)
                    local, accum = self._fixed_batch(gpu_type, k, max(self.app.init_batch_size, k))
                hit = (local, accum, None)
        else:
            key = (gpu_type, n, k, None, truth.noise_scale(progress))
            hit = self._batches.get(key)
            if hit is None:
                good, loc, acc = truth.optimize(gpu_type, n, k, progress=progress)
                hit = (int(loc), int(acc), float(good) if self.grad is None else None)
        if len(self._batches) >= _RATE_CACHE_LIMIT:
            self._batches.clear()
        self._batches[key] = hit
        return hit

    def _throughput(self, gpu_type: str, n: int, k: int, local: int, accum: int) -> float:
        """The truth's samples/s with this batch (it never changes: kept per argument tuple)."""
        key = (gpu_type, n, k, local, accum)
        thr = self._throughputs.get(key)
        if thr is None:
            params = self.truth.params.get(gpu_type)
            if params is None:  # no data for this type: the model's own clear error
                return float(self.truth.throughput(gpu_type, n, k, local, accum))
            thr = float(throughput(params, n, k, local, accum))
            self._throughputs[key] = thr
        return thr

    def _fixed_batch(self, gpu_type: str, k: int, batch: int) -> tuple[int, int]:
        """(local batch, accumulation steps) for total batch ``batch`` on ``k`` GPUs of ``gpu_type``."""
        max_local = self.truth.max_local_bsz(gpu_type)
        steps = max(1, math.ceil(batch / (k * max_local)))
        local = max(1, math.ceil(batch / (k * steps)))
        return local, steps - 1

    def next_rate_change(self) -> float:
        """The end of the current epoch (work units) under per-epoch gradient statistics."""
        if self.grad is None:
            return math.inf
        ends = self.grad.epoch_ends
        i = int(ends.searchsorted(self.fraction_done, side="right"))  # the first end > progress
        return float(ends[i]) * self.total_work if i < len(ends) and ends[i] < 1.0 else math.inf

    def _epoch(self) -> int:
        """The epoch in progress (:meth:`GradStats.epoch`, without re-checking the progress)."""
        grad = self.grad
        return min(int(grad.epoch_ends.searchsorted(self.fraction_done, side="right")), len(grad.epoch_ends) - 1)

    def _efficiency(self, batch: int) -> float:
        if self.grad is not None:  # constant within an epoch: kept per (batch, epoch)
            key = (batch, self._epoch())
            value = self._efficiencies.get(key)
            if value is None:
                value = self.grad.efficiency(batch, self.fraction_done)
                if len(self._efficiencies) >= _RATE_CACHE_LIMIT:
                    self._efficiencies.clear()
                self._efficiencies[key] = value
            return value
        return float(self.truth.efficiency(batch, self.fraction_done))

    def _phi(self) -> float:
        """The noise scale measured at the job's batch (constant within an epoch: kept per
        (batch, epoch))."""
        key = (self.batch_size, self._epoch())
        value = self._phis.get(key)
        if value is None:
            value = self.grad.phi(self.batch_size, self.fraction_done)
            if len(self._phis) >= _RATE_CACHE_LIMIT:
                self._phis.clear()
            self._phis[key] = value
        return value

    def ran(self, alloc: Allocation, local: int, accum: int) -> tuple[StepTiming | None, float | None]:
        """The step time of a new placement (the first time the job runs on it) and the noise
        scale measured at the job's batch: Sia/Pollux learn both online. Nothing when the
        policies see the ground truth."""
        est = self.estimator
        if est is self.truth or not isinstance(est, GoodputModel):
            return None, None
        phi = self._phi() if self.grad is not None else None
        return self._timing(est, alloc, local), phi

    def _timing(self, est: GoodputModel, alloc: Allocation, local: int) -> StepTiming | None:
        if not isinstance(est, ObservesSteps) or local <= 0 or alloc.mixed:  # BootstrappedModel only
            return None
        placement = tuple(sorted((c for _, c in alloc.placement), reverse=True))
        key = (alloc.gpu_type, placement)
        if key in self.observed:
            return None
        self.observed.add(key)
        n, k = alloc.num_nodes, alloc.num_gpus
        step = float(self.truth.step_time(alloc.gpu_type, n, k, local, 0))
        sync = float(sync_time(self.truth.params[alloc.gpu_type], n, k))
        return StepTiming(alloc.gpu_type, placement, local, step, sync)


@dataclass(eq=False)
class TableJob(SimJob):
    """A rigid job with a measured throughput table (work: steps)."""

    throughputs: dict[str, float] = field(default_factory=dict)

    @property
    def known_types(self) -> tuple[str, ...]:
        return tuple(self.throughputs)

    def rate_on(self, gpu_type: str, num_nodes: int, num_gpus: int, oracle: bool = False) -> tuple[float, int, int]:
        """The table's steps/s at the gang size (linear in the GPU count elsewhere)."""
        return self.throughputs.get(gpu_type, 0.0) * num_gpus / self.requested_gpus, 0, 0


def _goodput_job(spec: JobSpec, elastic_policy: bool, estimator: Estimator, fidelity: SimFidelity,
                 truths: dict[str, GoodputModel], profiling: float) -> GoodputJob:
    app = get_app(spec.application)
    if spec.application not in truths:
        truths[spec.application] = true_model(spec.application)
    truth = truths[spec.application]
    est = bootstrap_model(spec.application, profiles_from=fidelity.profiles) if estimator is Estimator.BOOTSTRAP else truth
    return GoodputJob(
        name=spec.name, application=spec.application, arrival_time=spec.arrival_time,
        requested_gpus=spec.num_replicas, max_gpus=int(app.max_batch_size), total_work=app.total_work,
        restart_delay=app.restart_delay, estimator=est, elastic=elastic_policy and spec.elastic,
        given_batch=spec.batch_size,
        ready_time=spec.arrival_time + (profiling if estimator is Estimator.BOOTSTRAP else 0.0),
        app=app, truth=truth, fidelity=fidelity,
        grad=grad_stats(spec.application) if fidelity.grad_stats is GradStatsSource.BATCH else None,
        slowdown=fidelity.slowdown_of(spec.application),
    )


def _table_job(job: RigidJob) -> TableJob:
    per_gpu = {k: v / job.tasks for k, v in job.throughputs.items()}
    return TableJob(
        name=job.job_id, application=job.job_type or job.job_id, arrival_time=job.arrival_time,
        requested_gpus=job.tasks, max_gpus=job.tasks, total_work=job.total_steps, restart_delay=0.0,
        estimator=ThroughputTable(per_gpu), elastic=False, ready_time=job.arrival_time,
        throughputs=dict(job.throughputs),
    )


def build_jobs(jobs: Any, cluster: Cluster, elastic_policy: bool, estimator: Estimator | str | None,
               fidelity: SimFidelity) -> list[SimJob]:
    """Simulator jobs for a workload of :class:`JobSpec` and/or :class:`RigidJob` items
    (:class:`SimJob` items pass through unchanged, so a caller may keep them to inspect).

    ``estimator`` (Sia jobs; :class:`~heteroplan.perf.sia_data.Estimator` or its value):
    ``"bootstrap"`` (Sia's: 1-GPU profiles, refined online) or ``"oracle"`` (the ground truth);
    ``None``: bootstrap for elastic policies, else oracle.
    Rigid jobs' policies always see their throughput table.
    """
    estimator = enum_choice(Estimator, "estimator",
                            estimator or (Estimator.BOOTSTRAP if elastic_policy else Estimator.ORACLE))
    profiling = fidelity.profiling_time * len(cluster.type_names)
    truths: dict[str, GoodputModel] = {}
    out: list[SimJob] = []
    for i, job in enumerate(jobs):
        if isinstance(job, SimJob):
            out.append(job)
        elif isinstance(job, JobSpec):
            out.append(_goodput_job(job, elastic_policy, estimator, fidelity, truths, profiling))
        elif isinstance(job, RigidJob):
            out.append(_table_job(job))
        else:
            raise InputError(f"jobs[{i}]", type(job).__name__,
                             "must be a JobSpec (Sia workload) or a RigidJob (throughput table)")
    if any(isinstance(j, SimJob) for j in jobs):  # a re-run must start from scratch
        fresh = [j for j in out if j.done == 0 and not j.simulated]
        if len(fresh) != len(out):
            raise InputError("jobs", [j.name for j in out if j not in fresh][:5], "already simulated; build new jobs")
    return out
