"""Replay jobs known only by their performance model: the simulator's twin of a real run.

The round executor runs real jobs whose performance models a policy reads (an emulated job's
goodput model is its exact step time). :func:`simulate_modelled` replays the same jobs under the
same policy with modelled progress: each round, a job that holds ``k`` GPUs of a type on ``n``
nodes advances at its model's goodput (work units/s) after paying the round's restore delay
(``Decision.restore_s``), and finishes at the exact second its work runs out. An allocation's
goodput is the round loop's (:mod:`heteroplan.sim.progress_models`): a gang that spans GPU types
runs at its slowest type's (synchronous data parallelism), and under a forking policy (HadarE) a
job's copies of ``requested_gpus`` GPUs add up. Comparing the two
(``benchmarks/ray_vs_sim.py``) measures what carrying decisions out adds that the model does not
price (start-up, rendezvous, checkpoints, rounds that run long).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from heteroplan.cluster import Cluster
from heteroplan.errors import InputError, check_seconds
from heteroplan.inputs import finite_number, strict_int
from heteroplan.policies.base import PerfModel, Policy
from heteroplan.scheduling import JobRecord, SchedulingSession
from heteroplan.sim.progress_models import progress_model

__all__ = ["ModelledJob", "simulate_modelled"]


@dataclass(frozen=True)
class ModelledJob:
    """A job for :func:`simulate_modelled` (seconds, work units of its model).

    Attributes:
        job_id: unique name.
        arrival_time: when it is submitted (s).
        perf_model: its goodput model (work units/s on ``k`` GPUs of a type over ``n`` nodes).
        total_work: work until done (e.g. samples: iterations x batch).
        max_gpus: most GPUs it may use.
        requested_gpus: its gang (GPUs): what a rigid policy (FIFO, Gavel, Hadar) gives it, and
            where an elastic one starts; at most ``max_gpus``.
        batch_size: its batch (samples), for the policy.
        restart_delay_s: seconds each (re)start costs it.
    """

    job_id: str
    arrival_time: float
    perf_model: PerfModel
    total_work: float
    max_gpus: int = 1
    batch_size: int = 0
    restart_delay_s: float = 0.0
    requested_gpus: int = 1

    def __post_init__(self) -> None:
        for name, low in (("arrival_time", 0.0), ("total_work", 1e-12), ("restart_delay_s", 0.0)):
            object.__setattr__(self, name, finite_number(f"job[{self.job_id}].{name}", getattr(self, name), low=low))
        object.__setattr__(self, "requested_gpus", strict_int(f"job[{self.job_id}].requested_gpus",
                                                              self.requested_gpus, 1))
        if self.requested_gpus > self.max_gpus:
            raise InputError(f"job[{self.job_id}].requested_gpus", self.requested_gpus,
                             f"must be at most max_gpus ({self.max_gpus})")


@dataclass(frozen=True)
class _ModelledRates:
    """What the round loop's progress models read of a job (:class:`~heteroplan.sim.job_models.SimJob`'s
    ``name``, ``elastic``, ``requested_gpus`` and ``rate_on``), from its performance model."""

    name: str
    elastic: bool
    requested_gpus: int
    model: PerfModel

    def rate_on(self, gpu_type: str, num_nodes: int, num_gpus: int) -> tuple[float, int, int]:
        """(work units/s, 0, 0): the model's goodput; batch choices are the model's own."""
        return float(self.model.goodput(gpu_type, num_nodes, num_gpus)), 0, 0


def simulate_modelled(cluster: Cluster, policy: Policy, jobs: Sequence[ModelledJob], round_length: float,
                      *, free_moves: bool = True, max_rounds: int = 100_000) -> tuple[JobRecord, ...]:
    """Every job's record after replaying ``jobs`` under ``policy`` (see the module doc)."""
    check_seconds("round_length", round_length)
    session = SchedulingSession(cluster, policy, free_moves=free_moves)
    for j in jobs:
        session.submit(j.job_id, arrival_time=float(j.arrival_time), perf_model=j.perf_model,
                       requested_gpus=j.requested_gpus, max_gpus=j.max_gpus, batch_size=j.batch_size,
                       total_work=float(j.total_work), restart_delay_s=j.restart_delay_s)
    rates = {j.job_id: _ModelledRates(j.job_id, bool(policy.elastic), j.requested_gpus, j.perf_model) for j in jobs}
    progress = progress_model(cluster, bool(policy.forking))
    done = {j.job_id: 0.0 for j in jobs}
    total = {j.job_id: float(j.total_work) for j in jobs}
    now = 0.0
    for _ in range(max_rounds):
        if not session.unfinished():
            return session.records()
        for d in session.round(now):
            if d.parked is not None:  # the cluster does not change here: it would wait forever
                raise InputError(f"job[{d.job_id}]", d.parked.reason.value, f"can never run here: {d.parked.detail}")
            if d.allocation is None:
                continue
            rate = progress.rate(rates[d.job_id], d.allocation)[0]  # a SimJob's view of the job
            run = max(0.0, round_length - d.restore_s)
            left = total[d.job_id] - done[d.job_id]
            if rate > 0 and rate * run >= left:
                session.finish(d.job_id, now + d.restore_s + left / rate)
                continue
            done[d.job_id] += rate * run
            session.report(d.job_id, work_done=min(done[d.job_id], total[d.job_id]))
        now += round_length
        if not math.isfinite(now):
            break
    raise InputError("max_rounds", max_rounds, f"{len(session.unfinished())} job(s) unfinished after it")
