"""YARN capacity scheduler (YARN-CS) for rigid jobs: FIFO, gang, heterogeneity-unaware.

Jobs start in arrival order when enough idle GPUs exist, of whatever types (only types on
which the job cannot run at all, e.g. out of memory, are avoided); a started job keeps its
GPUs until it finishes (no preemption). With ``backfill=False`` (default) the queue head
blocks the jobs behind it, as in a single FIFO queue.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from heteroplan.cluster import Cluster
from heteroplan.errors import check_seconds
from heteroplan.policies.base import Allocation, JobState
from heteroplan.policies.packing import free_gpus, place_gang

__all__ = ["YarnCSPolicy"]


class YarnCSPolicy:
    """FIFO + gang scheduling over any idle GPUs; running jobs are never preempted."""

    elastic = False
    forking = False

    def __init__(self, backfill: bool = False, round_length: float = 60.0, name: str = "yarn-cs") -> None:
        self.backfill = backfill
        self.round_length = check_seconds("round_length", round_length)
        self.name = name

    def allocate(self, cluster: Cluster, jobs: Sequence[JobState], now: float) -> Mapping[str, Allocation]:
        running = {j.job_id: j.allocation for j in jobs if j.allocation is not None and j.allocation.num_gpus}
        out: dict[str, Allocation] = dict(running)  # type: ignore[arg-type]
        free = free_gpus(cluster, out.values())
        for job in sorted(jobs, key=lambda j: (j.arrival_time, j.job_id)):
            if job.job_id in out:
                continue
            allocation = place_gang(job, cluster, free)
            if allocation is None:
                if self.backfill:
                    continue
                break
            out[job.job_id] = allocation
        return out
