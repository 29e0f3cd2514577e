"""Replay jobs known only by their performance model: the simulator's twin of a real run.

The round executor runs real jobs whose performance models a policy reads (an emulated job's
goodput model is its exact step time). :func:`simulate_modelled` replays the same jobs under the
same policy with modelled progress: each round, a job that holds ``k`` GPUs of a type on ``n``
nodes advances at its model's goodput (work units/s) after paying the round's restore delay
(``Decision.restore_s``), and finishes at the exact second its work runs out. A gang that spans
GPU types runs at its slowest type's goodput (synchronous data parallelism); under a forking policy
(HadarE) each of a job's GPUs is a one-GPU copy and the copies' goodputs add up (jobs are submitted
with one requested GPU, so a copy is one GPU), as in :mod:`heteroplan.sim.progress_models`. Comparing the two
(``benchmarks/ray_vs_sim.py``) measures what carrying decisions out adds that the model does not
price (start-up, rendezvous, checkpoints, rounds that run long).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from heteroplan.cluster import Cluster
from heteroplan.errors import InputError, check_seconds
from heteroplan.inputs import finite_number
from heteroplan.policies.base import Allocation, PerfModel, Policy, counts_by_type
from heteroplan.scheduling import JobRecord, SchedulingSession

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

    def __post_init__(self) -> None:
        for name, low in (("arrival_time", 0.0), ("total_work", 1e-12), ("restart_delay_s", 0.0)):
            object.__setattr__(self, name, finite_number(f"job[{self.job_id}].{name}", getattr(self, name), low=low))


def _rate(model: PerfModel, alloc: Allocation, cluster: Cluster, forking: bool) -> float:
    """Work units/s of a job holding ``alloc``: its goodput there; a gang over several types at its
    slowest type's; with ``forking``, the sum of its one-GPU copies' (each type's goodput on 1 GPU)."""
    if not alloc.mixed and not forking:
        return float(model.goodput(alloc.gpu_type, alloc.num_nodes, alloc.num_gpus))
    by_type = counts_by_type(alloc, cluster)
    if forking:
        return float(sum(n * float(model.goodput(t, 1, 1)) for t, n in by_type.items()))
    return min(float(model.goodput(t, alloc.num_nodes, alloc.num_gpus)) for t in by_type)


def simulate_modelled(cluster: Cluster, policy: Policy, jobs: Sequence[ModelledJob], round_length: float,
                      *, free_moves: bool = True, max_rounds: int = 100_000) -> tuple[JobRecord, ...]:
    """Every job's record after replaying ``jobs`` under ``policy`` (see the module doc)."""
    check_seconds("round_length", round_length)
    session = SchedulingSession(cluster, policy, free_moves=free_moves)
    for j in jobs:
        session.submit(j.job_id, arrival_time=float(j.arrival_time), perf_model=j.perf_model, requested_gpus=1,
                       max_gpus=j.max_gpus, batch_size=j.batch_size, total_work=float(j.total_work),
                       restart_delay_s=j.restart_delay_s)
    done = {j.job_id: 0.0 for j in jobs}
    total = {j.job_id: float(j.total_work) for j in jobs}
    now = 0.0
    for _ in range(max_rounds):
        if not session.unfinished():
            return session.records()
        for d in session.round(now):
            if d.allocation is None:
                continue
            model = session.view(d.job_id).estimator
            rate = _rate(model, d.allocation, cluster, bool(policy.forking)) if model is not None else 0.0
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
