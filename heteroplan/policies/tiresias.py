"""Tiresias (NSDI'19) discretized two-dimensional LAS for rigid jobs.

Attained service = GPUs x seconds run. Jobs sit in queues by attained service
(``thresholds``, GPU-seconds); lower queues first, FIFO by arrival inside a queue. Each round
the policy preempts freely: it walks the jobs in that order and starts each one whose gang
fits (skipping those that do not), heterogeneity-unaware (any type the job can run on). Jobs
keep last round's nodes when those are still idle, to avoid needless migrations. Tiresias's
starvation guard (promotion after a long wait) is not modelled.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from heteroplan.cluster import Cluster
from heteroplan.errors import InputError, check_seconds
from heteroplan.policies.base import Allocation, JobState
from heteroplan.policies.packing import free_gpus, place_gang
from heteroplan.schema import Number, Seq, decode, shown

__all__ = ["TiresiasPolicy"]


class TiresiasPolicy:
    """Discretized 2D-LAS with queue thresholds in GPU-seconds."""

    name = "tiresias"
    elastic = False
    forking = False

    def __init__(self, thresholds: Sequence[float] = (3600.0, 36000.0), round_length: float = 60.0) -> None:
        self.round_length = check_seconds("round_length", round_length)
        if isinstance(thresholds, str | bytes):  # as any other non-list: make_policy names the option
            raise TypeError(f"thresholds must be a list of GPU-seconds, not {type(thresholds).__name__}")
        try:
            values = decode(Seq(Number(above=0, unit="GPU-seconds")), thresholds, "thresholds")
        except InputError as exc:  # the option as a whole, its entry in the reason
            raise InputError("thresholds", shown(thresholds), f"{exc.field[len('thresholds'):]}={exc.value!r}: "
                             f"{exc.reason}") from None
        if values != sorted(values):
            raise InputError("thresholds", tuple(values), "must be positive and increasing")
        thresholds = values
        self.thresholds = np.asarray(thresholds, dtype=float)

    def queue(self, attained_service: float) -> int:
        """Queue index (0 = highest priority) for an attained service in GPU-seconds."""
        return int(np.searchsorted(self.thresholds, attained_service, side="right"))

    def allocate(self, cluster: Cluster, jobs: Sequence[JobState], now: float) -> Mapping[str, Allocation]:
        order = sorted(jobs, key=lambda j: (self.queue(j.attained_service), j.arrival_time, j.job_id))
        free = free_gpus(cluster)
        total = sum(free.values())
        chosen: list[JobState] = []
        for job in order:
            if job.requested_gpus <= total:
                chosen.append(job)
                total -= job.requested_gpus
        out: dict[str, Allocation] = {}
        # Keep previous placements where possible, then place the rest.
        for job in chosen:
            prev = job.allocation
            if prev is not None and prev.placement and all(free[n] >= c for n, c in prev.placement):
                for n, c in prev.placement:
                    free[n] -= c
                out[job.job_id] = prev
        for job in chosen:
            if job.job_id in out:
                continue
            allocation = place_gang(job, cluster, free)
            if allocation is not None:
                out[job.job_id] = allocation
        return out
