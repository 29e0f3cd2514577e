"""The simulator's stand-in for real training: a job runs a round on its allocation.

:class:`SimulatedTraining` advances a :class:`~heteroplan.sim.job_models.SimJob` by its ground
truth (the policy's progress model: elastic goodput, rigid gangs or HadarE's copies; with
``epoch_rates`` the rate is re-evaluated at each epoch boundary crossed inside the round) and
reports what a real job would have reported to its scheduling session: the step timing of a
new placement and the gradient noise scale (before the round's work, so that the job's model
refits first, as the artifact's jobs do), then the work done and the batch size. The
simulator's round loop uses it, and so can a user's own loop (``docs/own_loop.md``).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

from heteroplan.cluster import Cluster
from heteroplan.policies.base import Allocation
from heteroplan.scheduling import Decision
from heteroplan.sim.job_models import SimJob
from heteroplan.sim.progress_models import GangProgress, progress_model

__all__ = ["SimulatedTraining"]


class SimulatedTraining:
    """Modelled progress of simulator jobs on ``cluster``.

    Args:
        cluster: the cluster.
        forking: the policy forks rigid jobs into copies (HadarE's progress model).
        epoch_rates: re-evaluate a job's rate at each epoch boundary inside a round.
    """

    def __init__(self, cluster: Cluster, forking: bool = False, epoch_rates: bool = True) -> None:
        self.cluster, self.epoch_rates = cluster, epoch_rates
        self.model: GangProgress = progress_model(cluster, bool(forking))

    def run(self, job: SimJob, decision: Decision, seconds: float, report: Callable[..., Any]) -> float | None:
        """Run ``job`` for a round of ``seconds`` on ``decision``'s allocation, paying its
        ``restore_s`` first; ``report(job_id, **observed)`` receives what it measured. Returns the
        seconds into the round at which its work ran out, else ``None``.

        Raises :class:`~heteroplan.policies.base.AllocationError` when a rigid job does not get
        its gang on GPU types it can use.
        """
        alloc = decision.allocation
        if alloc is None:
            return None
        rate, local, accum = self.model.rate(job, alloc)
        run_time = max(0.0, seconds - decision.restore_s)
        restore = min(decision.restore_s, seconds)
        job.batch_size = alloc.num_gpus * local * (accum + 1)
        if run_time > 0 and rate > 0:
            timing, phi = job.ran(alloc, local, accum)
            if timing is not None or phi is not None:
                report(job.name, step_timing=timing, phi=phi)
            ran_for = self.advance(job, alloc, rate, run_time)
            if ran_for is not None:
                job.done = job.total_work
                report(job.name, work_done=job.total_work, batch_size=job.batch_size)
                return restore + ran_for
        report(job.name, work_done=job.done, batch_size=job.batch_size)
        return None

    def advance(self, job: SimJob, alloc: Allocation, rate: float, seconds: float) -> float | None:
        """Run ``job`` on ``alloc`` for ``seconds`` starting at ``rate`` (work units/s); the
        seconds it needed when it finished, else ``None``. With ``epoch_rates`` the rate is
        re-evaluated at each epoch boundary the job crosses (the artifact's ``Job.step``)."""
        left = seconds
        while True:
            remaining = job.total_work - job.done
            boundary = job.next_rate_change() if self.epoch_rates else math.inf
            step = min(remaining, boundary - job.done)
            if rate * left < step * (1 - 1e-12):
                job.done += rate * left
                return None
            if step >= remaining:
                return seconds - left + min(left, remaining / rate)
            left -= step / rate
            job.done = boundary * (1 + 1e-12)  # just past the boundary: the next epoch's rate
            rate, local, accum = self.model.rate(job, alloc)
            job.batch_size = alloc.num_gpus * local * (accum + 1)
            if rate <= 0:
                return None
