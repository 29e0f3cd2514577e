"""FIFO (a YARN-like capacity scheduler): rigid, gang-scheduled, heterogeneity-unaware.

Jobs get exactly their requested GPUs, in arrival order, on whichever GPU type has the most
free GPUs; a running job is never preempted. With ``backfill=False`` (default, YARN-CS
style) a job that does not fit blocks every later job (head-of-line blocking).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from heteroplan.cluster import Cluster
from heteroplan.policies.base import Allocation, JobState
from heteroplan.policies.common import place_blind

__all__ = ["FifoPolicy"]


@dataclass
class FifoPolicy:
    backfill: bool = False
    name: str = "fifo"
    adaptive: bool = False

    def allocate(self, cluster: Cluster, jobs: Sequence[JobState], now: float) -> dict[str, Allocation]:
        free = cluster.capacity()
        counts: dict[str, int] = {}
        for job in jobs:
            if job.allocation is not None:
                counts[job.job_id] = job.allocation.num_gpus
                free[job.allocation.gpu_type] -= job.allocation.num_gpus
        for job in sorted((j for j in jobs if j.allocation is None), key=lambda j: (j.arrival_time, j.job_id)):
            best = max(free, key=lambda t: (free[t], t))
            if free[best] >= job.requested_gpus:
                counts[job.job_id] = job.requested_gpus
                free[best] -= job.requested_gpus
            elif not self.backfill:
                break
        return place_blind(cluster, jobs, counts)
