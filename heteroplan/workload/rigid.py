"""Rigid task-level jobs (the Gavel / Hadar setting): a gang of W workers, a step count and a
measured throughput per GPU type."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from heteroplan.errors import InputError
from heteroplan.workload.gavel import GavelJob, GavelThroughputs

__all__ = ["RigidJob", "rigid_jobs_from_gavel"]


@dataclass(frozen=True)
class RigidJob:
    """A rigid job: ``tasks`` workers together, ``total_steps`` steps, ``throughputs`` steps/s per type.

    ``throughputs[k]`` is the whole job's steps/s with ``tasks`` workers on type k (0: cannot
    run there; a type missing from the mapping has no data, which a simulation refuses).
    Any GPU type names work, so this is how a user brings their own throughput matrix.
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


def rigid_jobs_from_gavel(jobs: Sequence[GavelJob], throughputs: GavelThroughputs) -> list[RigidJob]:
    """Attach each Gavel job's measured throughputs (at its scale factor) on every type."""
    return [
        RigidJob(
            j.job_id,
            j.scale_factor,
            j.total_steps,
            j.arrival_time,
            {g: throughputs.throughput(j.job_type, j.scale_factor, g) for g in throughputs.gpu_types},
            j.job_type or "",
        )
        for j in jobs
    ]
