"""One job of a workload (:class:`JobSpec`) and the bounds of its fields.

Read from Sia workload CSVs (:mod:`heteroplan.workload.sia`, which re-exports it) and generated in
the newTrace setting (:mod:`heteroplan.workload.newtrace`).
"""

from __future__ import annotations

import numbers
from dataclasses import dataclass

from heteroplan.errors import InputError
from heteroplan.inputs import strict_int

__all__ = ["JobSpec", "MAX_ARRIVAL", "MAX_BATCH_SIZE", "MAX_REPLICAS"]

# Beyond these a row is a typo, not a job: 1e12 samples per step would simulate for 4e8 hours.
MAX_BATCH_SIZE = 10_000_000  # samples
MAX_REPLICAS = 100_000  # GPUs
MAX_ARRIVAL = 10 * 365 * 86400.0  # seconds (ten years)


@dataclass(frozen=True)
class JobSpec:
    """One job of a workload.

    Attributes:
        name: unique job name.
        arrival_time: seconds from the start of the trace.
        application: application name (see :mod:`heteroplan.perf.applications`).
        num_replicas: GPUs a rigid scheduler gives the job.
        batch_size: total batch size (samples) a rigid scheduler uses.
        elastic: whether adaptive policies may change GPUs and batch size.
    """

    name: str
    arrival_time: float
    application: str
    num_replicas: int
    batch_size: int
    elastic: bool = True

    def __post_init__(self) -> None:  # the API's entry point; CSV rows are checked with their row number first
        if not isinstance(self.name, str) or not self.name:
            raise InputError("JobSpec.name", self.name, "must be a non-empty string")
        where = f"JobSpec[{self.name}]"
        t = self.arrival_time
        if isinstance(t, bool) or not isinstance(t, numbers.Real) or not 0 <= t <= MAX_ARRIVAL:  # NaN fails too
            raise InputError(f"{where}.arrival_time", t, f"must be between 0 and {MAX_ARRIVAL:g} seconds")
        if not isinstance(self.application, str) or not self.application:
            raise InputError(f"{where}.application", self.application, "must be an application name")
        if strict_int(f"{where}.num_replicas", self.num_replicas, 1) > MAX_REPLICAS:
            raise InputError(f"{where}.num_replicas", self.num_replicas, f"must be <= {MAX_REPLICAS} GPUs")
        if strict_int(f"{where}.batch_size", self.batch_size, 1) > MAX_BATCH_SIZE:
            raise InputError(f"{where}.batch_size", self.batch_size, f"must be <= {MAX_BATCH_SIZE} samples")
        if not isinstance(self.elastic, bool):
            raise InputError(f"{where}.elastic", self.elastic, "must be True or False")
