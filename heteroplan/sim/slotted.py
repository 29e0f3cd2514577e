"""A small time-slotted simulator for rigid jobs (the Gavel / Hadar setting).

Each job j runs ``W_j`` tasks together (gang) and needs ``E_j`` steps. ``T_j^k`` is its
measured throughput (steps/s of the whole job with ``W_j`` workers) on GPU type k; one task
advances at ``r_j^k = T_j^k / W_j``. Every round (slot of ``round_length`` s) the policy
returns allocations; a job whose W_j tasks sit on several types advances at
``W_j * min over used types of r_j^k`` steps/s (synchronous data parallelism: the slowest
task sets the pace). With ``forking`` (HadarE), an allocation holds copies: each full group of
W_j GPUs of one type is a copy, the GPUs left over on each type (together 0 or W_j) form at
most one mixed copy paced by its slowest type, and the job's progress is the sum of its
copies' steps. A job finishes inside a slot at the exact time its
steps run out; its GPUs count as used until then. Jobs arriving inside a slot are first seen
at the next round boundary. Checkpoint/restart overheads are not modelled.

Metrics (hours where noted): average JCT, makespan (first arrival to last completion),
queuing delay (arrival to first slot with GPUs), finish-time fairness (Themis rho = JCT over
the time the job would take alone on its fastest type with a 1/N share of the cluster, N =
average number of active jobs during its life) and utilization (GPU-seconds used over
GPUs x makespan).
"""

from __future__ import annotations

import math
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from heteroplan.cluster import Cluster
from heteroplan.errors import HeteroplanError, InputError
from heteroplan.policies.base import Allocation, JobState, Policy, counts_by_type
from heteroplan.workload.gavel import GavelJob, GavelThroughputs

__all__ = [
    "RigidJob",
    "TableEstimator",
    "PolicyError",
    "SimResult",
    "simulate",
    "rigid_jobs_from_gavel",
    "check_jobs",
]


class PolicyError(HeteroplanError):
    """A policy returned an allocation the cluster or the job cannot carry out."""


@dataclass(frozen=True)
class RigidJob:
    """A rigid job: ``tasks`` workers together, ``total_steps`` steps, ``throughputs`` steps/s per type.

    ``throughputs[k]`` is the whole job's steps/s with ``tasks`` workers on type k (0: cannot run).
    """

    job_id: str
    tasks: int
    total_steps: float
    arrival_time: float
    throughputs: Mapping[str, float]
    job_type: str = ""

    def __post_init__(self) -> None:
        if isinstance(self.tasks, bool) or int(self.tasks) != self.tasks or self.tasks < 1:
            raise InputError(f"job[{self.job_id}].tasks", self.tasks, "must be an integer >= 1")
        if not (self.total_steps > 0 and math.isfinite(self.total_steps)):
            raise InputError(f"job[{self.job_id}].total_steps", self.total_steps, "must be > 0")
        if not (self.arrival_time >= 0 and math.isfinite(self.arrival_time)):
            raise InputError(f"job[{self.job_id}].arrival_time", self.arrival_time, "must be >= 0")
        for k, v in self.throughputs.items():
            if not (v >= 0 and math.isfinite(v)):
                raise InputError(f"job[{self.job_id}].throughputs[{k}]", v, "must be >= 0")
        if not any(v > 0 for v in self.throughputs.values()):
            raise InputError(
                f"job[{self.job_id}].throughputs", dict(self.throughputs), "no GPU type can run it"
            )

    def rate(self, gpu_type: str) -> float:
        """Whole-job steps/s on one type (0 when it cannot run there)."""
        return float(self.throughputs.get(gpu_type, 0.0))

    @property
    def best_rate(self) -> float:
        return max(self.throughputs.values())


class TableEstimator:
    """GoodputEstimator over a job's measured throughputs (steps/s) at its task count.

    ``goodput(type, nodes, gpus)`` returns ``T^k * gpus / tasks`` (the table value at the
    job's own task count; linear in the GPU count elsewhere), 0 for a type it cannot use.
    """

    def __init__(self, throughputs: Mapping[str, float], tasks: int) -> None:
        self.throughputs = dict(throughputs)
        self.tasks = int(tasks)

    def goodput(self, gpu_type: str, num_nodes: Any, num_gpus: Any) -> Any:
        gpus = np.asarray(num_gpus, dtype=float)
        return self.throughputs.get(gpu_type, 0.0) * gpus / self.tasks


def rigid_jobs_from_gavel(jobs: Sequence[GavelJob], throughputs: GavelThroughputs) -> list[RigidJob]:
    """Attach each Gavel job's measured throughputs (at its scale factor) on every type."""
    return [
        RigidJob(
            j.job_id,
            j.scale_factor,
            j.total_steps,
            j.arrival_time,
            {g: throughputs.throughput(j.job_type, j.scale_factor, g) for g in throughputs.gpu_types},
            j.job_type,
        )
        for j in jobs
    ]


def check_jobs(cluster: Cluster, jobs: Sequence[RigidJob]) -> tuple[list[RigidJob], dict[str, str]]:
    """Split jobs into runnable ones and rejections ``{job_id: reason}``.

    A job is rejected when it needs more tasks than the GPUs of the types it can use, and
    an :class:`InputError` is raised when a job lacks a throughput entry for a cluster type.
    """
    cap = cluster.capacity()
    ok: list[RigidJob] = []
    rejected: dict[str, str] = {}
    seen: set[str] = set()
    for j in jobs:
        if j.job_id in seen:
            raise InputError("job_id", j.job_id, "job named twice")
        seen.add(j.job_id)
        missing = [k for k in cluster.type_names if k not in j.throughputs]
        if missing:
            raise InputError(
                f"job[{j.job_id}].throughputs", sorted(j.throughputs), f"no entry for GPU type(s) {missing}"
            )
        usable = sum(c for k, c in cap.items() if j.rate(k) > 0)
        if j.tasks > usable:
            rejected[j.job_id] = f"needs {j.tasks} tasks; only {usable} GPUs of types it can use"
        else:
            ok.append(j)
    return ok, rejected


@dataclass
class SimResult:
    """Outcome of :func:`simulate`; times in seconds unless the name says hours."""

    policy: str
    completion: dict[str, float]
    first_start: dict[str, float]
    arrival: dict[str, float]
    ftf_rho: dict[str, float]
    gpu_seconds: float
    num_gpus: int
    rejected: dict[str, str]
    unfinished: list[str]
    rounds: int
    policy_time: float
    reallocations: int
    schedule: list[tuple[float, dict[str, Allocation]]] = field(default_factory=list)

    @property
    def jcts(self) -> np.ndarray:
        return np.array([self.completion[j] - self.arrival[j] for j in self.completion])

    def metrics(self) -> dict[str, float]:
        """avg JCT, makespan, queuing delay (hours), FTF rho (mean, max), utilization, counts."""
        if not self.completion:
            return {"jobs_done": 0}
        start = min(self.arrival[j] for j in self.completion)
        makespan = max(self.completion.values()) - start
        queue = np.array([self.first_start[j] - self.arrival[j] for j in self.completion])
        rho = np.array(list(self.ftf_rho.values()))
        return {
            "jobs_done": len(self.completion),
            "avg_jct_h": float(self.jcts.mean() / 3600),
            "p99_jct_h": float(np.percentile(self.jcts, 99) / 3600),
            "makespan_h": float(makespan / 3600),
            "avg_queuing_delay_h": float(queue.mean() / 3600),
            "ftf_rho_mean": float(rho.mean()),
            "ftf_rho_max": float(rho.max()),
            "utilization": float(self.gpu_seconds / (self.num_gpus * makespan)) if makespan > 0 else 0.0,
            "rounds": self.rounds,
            "policy_time_s": self.policy_time,
            "reallocations": self.reallocations,
        }


def _job_rate(job: RigidJob, alloc: Allocation, cluster: Cluster, forking: bool) -> float:
    """Steps/s of ``job`` under ``alloc``; :class:`PolicyError` when it is not a valid gang."""
    by_type = counts_by_type(alloc, cluster)
    if any(job.rate(k) <= 0 for k in by_type):
        raise PolicyError(f"job {job.job_id} placed on a GPU type it cannot run on: {alloc}")
    if forking:
        full = {k: c // job.tasks for k, c in by_type.items()}
        rest = {k: c % job.tasks for k, c in by_type.items() if c % job.tasks}
        if sum(rest.values()) not in (0, job.tasks):
            raise PolicyError(
                f"job {job.job_id}: copies need {job.tasks} GPUs each; leftovers {rest} do not form one copy"
            )
        mixed = min(job.rate(k) for k in rest) if rest else 0.0
        return float(sum(n * job.rate(k) for k, n in full.items()) + mixed)
    if alloc.num_gpus != job.tasks:
        raise PolicyError(f"job {job.job_id} needs {job.tasks} GPUs together (gang), got {alloc.num_gpus}")
    return min(job.rate(k) for k in by_type)


def _check_capacity(cluster: Cluster, allocs: Mapping[str, Allocation]) -> None:
    nodes = {n.name: n for n in cluster.nodes}
    used: dict[str, int] = {}
    for jid, a in allocs.items():
        if sum(c for _, c in a.placement) != a.num_gpus or not a.placement:
            raise PolicyError(f"job {jid}: placement {a.placement} does not hold {a.num_gpus} GPUs")
        for name, c in a.placement:
            if name not in nodes:
                raise PolicyError(f"job {jid}: unknown node {name!r}")
            if c <= 0:
                raise PolicyError(f"job {jid}: non-positive count on node {name!r}")
            used[name] = used.get(name, 0) + c
    over = {n: u for n, u in used.items() if u > nodes[n].num_gpus}
    if over:
        raise PolicyError(f"node capacity exceeded: {over}")


def simulate(
    policy: Policy,
    cluster: Cluster,
    jobs: Sequence[RigidJob],
    round_length: float = 360.0,
    max_rounds: int = 200_000,
    forking: bool | None = None,
    on_infeasible: str = "reject",
    record: bool = False,
) -> SimResult:
    """Run ``policy`` round by round until every job finishes (or ``max_rounds``).

    Args:
        policy: any :class:`Policy`; ``policy.forking`` (HadarE) switches to copy semantics
            unless ``forking`` is given.
        cluster: the cluster.
        jobs: rigid jobs (every cluster GPU type must have a throughput entry).
        round_length: slot length (s).
        max_rounds: safety limit; jobs still running then are listed in ``unfinished``.
        on_infeasible: ``"reject"`` lists jobs that can never fit in ``rejected``;
            ``"raise"`` raises :class:`InputError` instead.
        record: keep every round's allocations in ``schedule``.
    """
    if not round_length > 0:
        raise InputError("round_length", round_length, "must be > 0 s")
    if on_infeasible not in ("reject", "raise"):
        raise InputError("on_infeasible", on_infeasible, "must be 'reject' or 'raise'")
    runnable, rejected = check_jobs(cluster, jobs)
    if rejected and on_infeasible == "raise":
        jid, why = next(iter(rejected.items()))
        raise InputError(f"job[{jid}].tasks", next(j.tasks for j in jobs if j.job_id == jid), why)
    forking = bool(getattr(policy, "forking", False)) if forking is None else forking
    pending = sorted(runnable, key=lambda j: (j.arrival_time, j.job_id))
    by_id = {j.job_id: j for j in runnable}
    states: dict[str, JobState] = {}
    done_steps: dict[str, float] = {}
    completion: dict[str, float] = {}
    first_start: dict[str, float] = {}
    active_count: dict[str, list[int]] = {}
    gpu_seconds = 0.0
    policy_time = 0.0
    reallocations = 0
    schedule: list[tuple[float, dict[str, Allocation]]] = []
    num_gpus = cluster.num_gpus
    now = math.ceil(pending[0].arrival_time / round_length) * round_length if pending else 0.0
    rounds = 0
    nxt = 0
    while rounds < max_rounds and (nxt < len(pending) or states):
        while nxt < len(pending) and pending[nxt].arrival_time <= now + 1e-9:
            j = pending[nxt]
            states[j.job_id] = JobState(
                job_id=j.job_id,
                application=j.job_type,
                arrival_time=j.arrival_time,
                requested_gpus=j.tasks,
                elastic=False,
                max_gpus=j.tasks,
                estimator=TableEstimator(j.throughputs, j.tasks),
                extra={"total_steps": j.total_steps, "remaining_steps": j.total_steps},
            )
            done_steps[j.job_id] = 0.0
            active_count[j.job_id] = []
            nxt += 1
        if not states:
            now = math.ceil(pending[nxt].arrival_time / round_length) * round_length
            continue
        view = [states[k] for k in sorted(states, key=lambda k: (states[k].arrival_time, k))]
        t0 = time.perf_counter()
        allocs = dict(policy.allocate(cluster, view, now))
        policy_time += time.perf_counter() - t0
        allocs = {k: a for k, a in allocs.items() if a.num_gpus > 0}
        unknown = [k for k in allocs if k not in states]
        if unknown:
            raise PolicyError(f"allocations for jobs that are not active: {unknown[:5]}")
        _check_capacity(cluster, allocs)
        if record:
            schedule.append((now, allocs))
        n_active = len(states)
        finished: list[str] = []
        for jid, st in states.items():
            active_count[jid].append(n_active)
            a = allocs.get(jid)
            if not (a is None and st.allocation is None) and not (
                a is not None and st.allocation is not None and a.placement == st.allocation.placement
            ):
                reallocations += a is not None
            st.allocation = a
            if a is None:
                continue
            job = by_id[jid]
            rate = _job_rate(job, a, cluster, forking)
            first_start.setdefault(jid, now)
            remaining = job.total_steps - done_steps[jid]
            run = min(round_length, remaining / rate)
            done_steps[jid] += rate * run
            gpu_seconds += a.num_gpus * run
            st.attained_service += a.num_gpus * run
            st.progress = done_steps[jid]
            st.extra["remaining_steps"] = max(0.0, job.total_steps - done_steps[jid])
            if run < round_length or done_steps[jid] >= job.total_steps * (1 - 1e-12):
                completion[jid] = now + run
                finished.append(jid)
        for jid in finished:
            del states[jid]
        rounds += 1
        now += round_length
    total = cluster.num_gpus
    rho: dict[str, float] = {}
    for jid, end in completion.items():
        job = by_id[jid]
        n_avg = float(np.mean(active_count[jid])) if active_count[jid] else 1.0
        alone = job.total_steps / job.best_rate
        share = max(1.0, n_avg * job.tasks / total)
        rho[jid] = (end - job.arrival_time) / (alone * share)
    return SimResult(
        policy=getattr(policy, "name", type(policy).__name__),
        completion=completion,
        first_start=first_start,
        arrival={j.job_id: j.arrival_time for j in runnable},
        ftf_rho=rho,
        gpu_seconds=gpu_seconds,
        num_gpus=num_gpus,
        rejected=rejected,
        unfinished=sorted(states) + [j.job_id for j in pending[nxt:]],
        rounds=rounds,
        policy_time=policy_time,
        reallocations=reallocations,
        schedule=schedule,
    )
