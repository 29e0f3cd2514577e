"""Round-based discrete-event cluster simulator (the Sia evaluation setting).

Each round (default 60 s) the policy sees a :class:`~heteroplan.policies.base.JobState`
per active job and returns allocations; the simulator checks them (capacity, every GPU
placed once), applies checkpoint-restore delays to jobs whose placement changed, and
advances every running job by its ground-truth goodput. A job completes when its
M0-equivalent progress reaches its application's ``epochs x dataset_size`` samples.

What a policy sees is each job's *estimator* (Sia: the bootstrapped model refined by the
steps it observed; rigid baselines: the ground truth, i.e. oracle profiling); what the
simulator applies is the ground-truth model fitted on all measurements, with the Sia
artifact's calibration slowdowns, batch-size choice and gradient statistics
(:class:`~heteroplan.sim.fidelity.SimFidelity`).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from heteroplan.cluster import Cluster
from heteroplan.errors import InputError
from heteroplan.perf.applications import AppSpec, get_app
from heteroplan.perf.goodput import GoodputModel
from heteroplan.perf.gradstats import GradStats
from heteroplan.perf.sia_data import bootstrap_model, grad_stats, true_model
from heteroplan.perf.throughput import sync_time
from heteroplan.policies.base import (
    Allocation,
    AllocationError,
    JobState,
    Policy,
    check_allocations,
)
from heteroplan.sim.fidelity import SimFidelity
from heteroplan.sim.metrics import JobRecord, SimResult
from heteroplan.sim.progress import ProgressBar
from heteroplan.workload.sia import JobSpec

__all__ = ["Simulator", "simulate", "SimJob", "SimFidelity", "AllocationError"]


@dataclass
class SimJob:
    """Simulator-side state of one job (seconds, samples, GPU-seconds)."""

    spec: JobSpec
    app: AppSpec
    truth: GoodputModel
    estimator: Any
    elastic: bool
    progress: float = 0.0
    allocation: Allocation | None = None
    restore_left: float = 0.0
    restarts: int = 0
    starts: int = 0
    attained: float = 0.0
    start_time: float | None = None
    finish_time: float | None = None
    last_gpus: int = 0
    max_gpus_run: int = 0
    observed: set[tuple[str, str]] = field(default_factory=set)
    grad: GradStats | None = None
    slowdown: float = 1.0
    ready_time: float = 0.0
    batch_size: int = 0

    @property
    def total_work(self) -> float:
        return self.app.total_work

    @property
    def fraction_done(self) -> float:
        return min(self.progress / self.total_work, 1.0)

    def view(self) -> JobState:
        return JobState(
            job_id=self.spec.name,
            application=self.spec.application,
            arrival_time=self.spec.arrival_time,
            requested_gpus=self.spec.num_replicas,
            elastic=self.elastic,
            max_gpus=int(self.app.max_batch_size),
            allocation=self.allocation,
            restoring=self.restore_left > 0,
            num_restarts=self.restarts,
            attained_service=self.attained,
            progress=self.fraction_done,
            restart_delay=self.app.restart_delay,
            estimator=self.estimator,
            extra={"last_gpus": self.last_gpus, "max_gpus_run": self.max_gpus_run,
                   "batch_size": self.spec.batch_size},
        )


def _placement_digits(alloc: Allocation) -> str:
    return "".join(str(c) for c in sorted((c for _, c in alloc.placement), reverse=True))


class Simulator:
    """Replay ``jobs`` on ``cluster`` under ``policy``.

    Args:
        cluster: the cluster.
        jobs: the workload (arrival times in seconds).
        policy: any object with ``allocate(cluster, jobs, now)``; ``policy.adaptive`` (default
            False) selects elastic jobs (GPUs and batch size chosen by the policy) or rigid ones
            (``num_replicas`` GPUs, ``batch_size`` fixed). An allocation may span GPU types
            (task-level heterogeneity, ``gpu_type`` = ``"k80+v100"``); the slowest type then
            sets the pace of every worker (synchronous data parallelism).
        round_length: seconds per scheduling round; default: the policy's own
            ``round_length`` attribute if it has one (Gavel: 360 s), else 60 s (Sia).
        max_time: stop after this many simulated seconds (unfinished jobs are reported).
        estimator: ``"bootstrap"`` (Sia's: 1-GPU profiles, refined online) or ``"oracle"``
            (the ground truth); default: bootstrap for adaptive policies, oracle otherwise.
        seed: seed for any randomness (the simulator itself is deterministic).
        stall_limit: stop with an error after this many seconds in which no job progressed
            and no arrival remains (e.g. a job larger than the cluster).
        fidelity: calibration slowdowns, batch-size choice, gradient statistics and
            profiling time; default: the Sia artifact's (:class:`SimFidelity`);
            ``SimFidelity.ideal()`` for none of them.
    """

    def __init__(
        self,
        cluster: Cluster,
        jobs: Sequence[JobSpec],
        policy: Policy,
        round_length: float | None = None,
        max_time: float | None = None,
        estimator: str | None = None,
        seed: int = 0,
        stall_limit: float = 24 * 3600.0,
        fidelity: SimFidelity | None = None,
    ) -> None:
        if round_length is None:
            round_length = float(getattr(policy, "round_length", 60.0))
        if not round_length > 0:
            raise InputError("round_length", round_length, "must be > 0 seconds")
        if not jobs:
            raise InputError("jobs", jobs, "the workload has no jobs")
        self.cluster = cluster
        self.policy = policy
        self.round_length = float(round_length)
        self.max_time = max_time
        self.seed = seed
        self.stall_limit = stall_limit
        if fidelity is None:
            fidelity = SimFidelity()
        if not isinstance(fidelity, SimFidelity):
            raise InputError("fidelity", fidelity, "must be a SimFidelity")
        self.fidelity = fidelity
        profiling = fidelity.profiling_time * len(cluster.type_names)
        adaptive = bool(getattr(policy, "adaptive", False))
        estimator = estimator or ("bootstrap" if adaptive else "oracle")
        if estimator not in ("bootstrap", "oracle"):
            raise InputError("estimator", estimator, "choose 'bootstrap' or 'oracle'")
        truths: dict[str, GoodputModel] = {}
        self.jobs: list[SimJob] = []
        for spec in jobs:
            app = get_app(spec.application)
            if spec.application not in truths:
                truths[spec.application] = true_model(spec.application)
            truth = truths[spec.application]
            est = bootstrap_model(spec.application) if estimator == "bootstrap" else truth
            job = SimJob(spec, app, truth, est, elastic=adaptive and spec.elastic)
            if fidelity.grad_stats == "batch":
                job.grad = grad_stats(spec.application)
            job.slowdown = fidelity.slowdown_of(spec.application)
            job.ready_time = spec.arrival_time + (profiling if estimator == "bootstrap" else 0.0)
            self.jobs.append(job)
        self.node_type = {n.name: n.gpu_type for n in cluster.nodes}
        self.node_gpus = {n.name: n.num_gpus for n in cluster.nodes}

    # ------------------------------------------------------------------ rates
    def _run_config(self, job: SimJob, alloc: Allocation) -> tuple[float, int, int]:
        """(goodput samples/s, local batch, accumulation steps) of ``job`` on ``alloc``.

        On a mixed-type allocation every type is evaluated at the whole allocation's size and
        the slowest one counts.
        """
        types = [self.node_type[node] for node, _ in alloc.placement] or [alloc.gpu_type]
        best: tuple[float, int, int] | None = None
        for gpu_type in dict.fromkeys(types):
            rate = self._rate_on(job, gpu_type, alloc.num_nodes, alloc.num_gpus)
            if best is None or rate[0] < best[0]:
                best = rate
        assert best is not None
        return best

    def _rate_on(self, job: SimJob, gpu_type: str, n: int, k: int, oracle: bool = False) -> tuple[float, int, int]:
        """(real progress rate in M0-equivalent samples/s, local batch, accumulation steps).

        Elastic jobs pick their batch from their estimator (``fidelity.batch_size ==
        "estimated"``, unless ``oracle``) or from the ground truth; rigid jobs use their
        requested batch. The rate is the ground truth's throughput at that batch times the
        statistical efficiency, divided by the application's slowdown.
        """
        if job.elastic:
            local = accum = 0
            est = job.estimator
            if not oracle and self.fidelity.batch_size == "estimated" and est is not job.truth \
                    and hasattr(est, "optimize"):
                _, loc, acc = est.optimize(gpu_type, n, k, progress=job.fraction_done)
                local, accum = int(loc), int(acc)
                if local <= 0:  # no model for this type yet: the initial batch size (Sia artifact)
                    local, accum = self._fixed_batch(job, gpu_type, k, max(job.app.init_batch_size, k))
            else:
                good, loc, acc = job.truth.optimize(gpu_type, n, k, progress=job.fraction_done)
                local, accum = int(loc), int(acc)
                if job.grad is None:
                    return float(good) / job.slowdown, local, accum
            if local <= 0:
                return 0.0, 0, 0
        else:
            local, accum = self._fixed_batch(job, gpu_type, k, job.spec.batch_size)
        thr = float(job.truth.throughput(gpu_type, n, k, local, accum))
        return thr * self._efficiency(job, k * local * (accum + 1)) / job.slowdown, local, accum

    @staticmethod
    def _fixed_batch(job: SimJob, gpu_type: str, k: int, batch: int) -> tuple[int, int]:
        """(local batch, accumulation steps) for total batch ``batch`` on ``k`` GPUs of ``gpu_type``."""
        max_local = job.truth.max_local_bsz(gpu_type)
        steps = max(1, math.ceil(batch / (k * max_local)))
        local = max(1, math.ceil(batch / (k * steps)))
        return local, steps - 1

    def _efficiency(self, job: SimJob, batch: int) -> float:
        """Statistical efficiency of total batch ``batch`` at the job's current progress."""
        if job.grad is not None:
            return job.grad.efficiency(batch, job.fraction_done)
        return float(job.truth.efficiency(batch, job.fraction_done))

    def _measure_phi(self, job: SimJob, batch: int) -> None:
        """Give the job's estimator the noise scale measured at its batch (Pollux/Sia)."""
        setter = getattr(job.estimator, "set_measured_phi", None)
        if job.grad is None or setter is None or job.estimator is job.truth:
            return
        setter(job.grad.phi(batch, job.fraction_done))

    def _observe(self, job: SimJob, alloc: Allocation, local: int, accum: int) -> None:
        observe: Callable[..., None] | None = getattr(job.estimator, "observe", None)
        if observe is None or local <= 0 or "+" in alloc.gpu_type:
            return
        digits = _placement_digits(alloc)
        key = (alloc.gpu_type, digits)
        if key in job.observed:
            return
        job.observed.add(key)
        n, k = alloc.num_nodes, alloc.num_gpus
        step = float(job.truth.step_time(alloc.gpu_type, n, k, local, 0))
        sync = float(sync_time(job.truth.params[alloc.gpu_type], n, k))
        observe(alloc.gpu_type, digits, local, step, sync)

    # ------------------------------------------------------------- checking
    # ------------------------------------------------------------------ run
    def run(self, progress: bool | None = None) -> SimResult:
        """Simulate until every job finishes (or ``max_time``); never loses results on errors.

        If the policy raises or returns an invalid allocation, the run stops there and the
        result carries ``error`` with what happened, plus every metric gathered so far.
        """
        L = self.round_length
        pending = sorted(self.jobs, key=lambda j: (j.ready_time, j.spec.arrival_time))
        first = pending[0].ready_time
        t = math.floor(first / L) * L
        bar = ProgressBar(f"{getattr(self.policy, 'name', 'policy'):>8}", progress)
        result = SimResult(policy=getattr(self.policy, "name", type(self.policy).__name__), cluster=self.cluster.name,
                           round_length=L, capacity=self.cluster.capacity())
        unfinished = len(self.jobs)
        next_arrival = 0
        active: dict[str, SimJob] = {}
        idle_rounds = 0
        try:
            while unfinished:
                if self.max_time is not None and t >= self.max_time:
                    break
                while next_arrival < len(pending) and pending[next_arrival].ready_time <= t:
                    job = pending[next_arrival]
                    active[job.spec.name] = job
                    next_arrival += 1
                if not active:
                    t = math.floor(pending[next_arrival].ready_time / L) * L + L
                    continue
                before = sum(j.progress for j in active.values())
                self._round(t, active, result)
                moved = sum(j.progress for j in active.values()) > before or any(
                    j.finish_time is not None for j in active.values())
                idle_rounds = 0 if moved or next_arrival < len(pending) else idle_rounds + 1
                if idle_rounds * L > self.stall_limit:
                    stuck = sorted(active)[:5]
                    result.error = (f"stalled: no job progressed for {self.stall_limit / 3600:.0f} h and no "
                                    f"arrivals remain; jobs that cannot run: {stuck}")
                    break
                for jid in [jid for jid, j in active.items() if j.finish_time is not None]:
                    del active[jid]
                    unfinished -= 1
                t += L
                bar.update(1 - unfinished / len(self.jobs), f"t={t / 3600:.1f}h active={len(active)}")
        except Exception as exc:  # keep what we have; say what broke
            result.error = f"stopped at t={t:.0f}s: {type(exc).__name__}: {exc}"
        finally:
            bar.close()
        result.end_time = t
        result.jobs = [self._record(j) for j in self.jobs]
        return result

    def _round(self, t: float, active: dict[str, SimJob], result: SimResult) -> None:
        L = self.round_length
        order = sorted(active.values(), key=lambda j: (j.spec.arrival_time, j.spec.name))
        views = [j.view() for j in order]
        t0 = time.perf_counter()
        allocations = self.policy.allocate(self.cluster, views, t)
        result.policy_times.append(time.perf_counter() - t0)
        allocations = check_allocations(self.cluster, allocations, active)
        in_use = dict.fromkeys(self.cluster.type_names, 0)
        for job in order:
            new = allocations.get(job.spec.name)
            old = job.allocation
            if new is None:
                if old is not None:
                    result.events.append((t, job.spec.name, "preempt", f"{old.num_gpus}x{old.gpu_type}"))
                job.allocation = None
                job.restore_left = 0.0
                continue
            changed = old is None or old.gpu_type != new.gpu_type or sorted(old.placement) != sorted(new.placement)
            if changed:
                if job.starts:
                    job.restarts += 1
                job.starts += 1
                job.restore_left = job.app.restart_delay
                if job.start_time is None:
                    job.start_time = t
                result.events.append((t, job.spec.name, "start" if job.starts == 1 else "restart",
                                      f"{new.num_gpus}x{new.gpu_type} on {len(new.placement)} nodes"))
            job.allocation = new
            job.last_gpus = new.num_gpus
            for node, count in new.placement:
                in_use[self.node_type[node]] += count
            run_time = max(0.0, L - job.restore_left)
            restore = min(job.restore_left, L)
            job.restore_left -= restore
            rate, local, accum = self._run_config(job, new)
            job.batch_size = new.num_gpus * local * (accum + 1)
            if run_time > 0 and rate > 0:
                self._observe(job, new, local, accum)
                self._measure_phi(job, job.batch_size)
                job.max_gpus_run = max(job.max_gpus_run, new.num_gpus)
                remaining = job.total_work - job.progress
                if rate * run_time >= remaining:
                    used = restore + remaining / rate
                    job.progress = job.total_work
                    job.finish_time = t + used
                    job.attained += new.num_gpus * used
                    result.events.append((job.finish_time, job.spec.name, "finish", ""))
                    continue
                job.progress += rate * run_time
            job.attained += new.num_gpus * L
        result.timeline.append((t, dict(in_use), len(active)))

    def _record(self, job: SimJob) -> JobRecord:
        return JobRecord(
            name=job.spec.name,
            application=job.spec.application,
            arrival_time=job.spec.arrival_time,
            start_time=job.start_time,
            finish_time=job.finish_time,
            restarts=job.restarts,
            gpu_seconds=job.attained,
            fraction_done=job.fraction_done,
            isolated_time=self._isolated_time(job),
        )

    def _isolated_time(self, job: SimJob) -> float:
        """Seconds the job would need on the best GPU type at its requested GPU count (FTF baseline)."""
        best = 0.0
        for t in self.cluster.gpu_types:
            cap = self.cluster.capacity()[t.name]
            k = min(job.spec.num_replicas, cap)
            if k <= 0:
                continue
            n = max(1, math.ceil(k / t.gpus_per_node))
            best = max(best, self._rate_on(job, t.name, n, k, oracle=True)[0])
        return job.total_work / best if best > 0 else float("inf")


def simulate(
    jobs: Sequence[JobSpec],
    cluster: Cluster,
    policy: Policy,
    round_length: float | None = None,
    max_time: float | None = None,
    progress: bool | None = None,
    **kwargs: Any,
) -> SimResult:
    """Replay ``jobs`` on ``cluster`` under ``policy`` and return the metrics (see :class:`Simulator`)."""
    return Simulator(cluster, jobs, policy, round_length, max_time, **kwargs).run(progress)

