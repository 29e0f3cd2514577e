"""The one record of a job's outcome, shared by the scheduling session, the simulator and the runtime."""

from __future__ import annotations

import math
from dataclasses import dataclass

__all__ = ["JobRecord"]


@dataclass(frozen=True)
class JobRecord:
    """What happened to one job (seconds since the clock's origin, GPU-seconds).

    The scheduling session (:meth:`~heteroplan.scheduling.SchedulingSession.record`), the
    simulator's results (``SimResult.jobs``) and the runtime's round executor all report jobs
    with this type, with one spelling of each field.

    Attributes:
        job_id: the job's unique name.
        application: its application (model) name.
        arrival_time: when it was submitted (s).
        start_time: when it first got GPUs (s); ``None``: never ran.
        finish_time: when its work ran out (s); ``None``: unfinished.
        restarts: checkpoint-restarts after its first start (rescales, moves, resumes).
        gpu_seconds: GPU-seconds it held GPUs (attained service).
        fraction_done: share of its work done, in ``[0, 1]``.
        requested_gpus: its gang size (GPUs a rigid scheduler gives it).
        avg_active: mean number of active jobs over the rounds it was active (contention).
        isolated_time: seconds it would need alone on its best GPU type at ``requested_gpus``
            (``inf`` where unknown, e.g. outside the simulator).
        steps_done: training iterations reported done (0 where the caller reports work only).
        observations: measured step timings fed to its performance model.
        phi: gradient noise scale (samples) last reported, ``None`` if none.
        restore_seconds: seconds it held GPUs while restoring a checkpoint ((re)start delays).
        failures: times its run failed (a rank died, its node was lost) and it lost its GPUs.
        steps_redone: iterations it trained again after failures (done since its last checkpoint).
        gave_up: why it was given up on (its ranks kept failing), ``None`` unless it was.
    """

    job_id: str
    application: str
    arrival_time: float
    start_time: float | None = None
    finish_time: float | None = None
    restarts: int = 0
    gpu_seconds: float = 0.0
    fraction_done: float = 0.0
    requested_gpus: int = 1
    avg_active: float = 1.0
    isolated_time: float = math.inf
    steps_done: int = 0
    observations: int = 0
    phi: float | None = None
    restore_seconds: float = 0.0
    failures: int = 0
    steps_redone: int = 0
    gave_up: str | None = None

    @property
    def jct_s(self) -> float | None:
        """Job completion time: finish - arrival (s); ``None`` if unfinished."""
        return None if self.finish_time is None else self.finish_time - self.arrival_time

    @property
    def queueing_delay_s(self) -> float | None:
        """First start - arrival (s); ``None`` if it never ran."""
        return None if self.start_time is None else self.start_time - self.arrival_time
