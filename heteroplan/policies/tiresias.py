"""Tiresias (NSDI'19) discretized 2D-LAS: rigid jobs, preemptive, heterogeneity-unaware.

A job's priority queue is set by its attained service (GPU-seconds) against the thresholds;
lower queues go first, FIFO within a queue. Each round jobs are admitted in that order while
their requested GPUs fit (skipping those that do not); running jobs not admitted are
preempted.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from heteroplan.cluster import Cluster
from heteroplan.policies.base import Allocation, JobState
from heteroplan.policies.common import place_blind

__all__ = ["TiresiasPolicy"]


@dataclass
class TiresiasPolicy:
    thresholds: tuple[float, ...] = (3600.0, 36000.0)  # GPU-seconds between queues
    name: str = "tiresias"
    adaptive: bool = False

    def allocate(self, cluster: Cluster, jobs: Sequence[JobState], now: float) -> dict[str, Allocation]:
        queue = {j.job_id: int(np.searchsorted(self.thresholds, j.attained_service, side="right")) for j in jobs}
        order = sorted(jobs, key=lambda j: (queue[j.job_id], j.arrival_time, j.job_id))
        free = cluster.num_gpus
        counts: dict[str, int] = {}
        for job in order:
            if job.requested_gpus <= free:
                counts[job.job_id] = job.requested_gpus
                free -= job.requested_gpus
        return place_blind(cluster, jobs, counts)
