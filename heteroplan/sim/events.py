"""What happened to the jobs of a simulation, as typed events (:attr:`SimResult.events`)."""

from __future__ import annotations

import enum
from dataclasses import dataclass

from heteroplan.policies.base import Allocation

__all__ = ["SimEvent", "SimEventKind"]


class SimEventKind(enum.Enum):
    """What happened to a job: its first ``START``, a ``RESTART`` (it resumed from its checkpoint,
    or was relaunched on other GPUs), a ``PREEMPT`` (it lost every GPU and waits), its ``FINISH``."""

    START = "start"
    RESTART = "restart"
    PREEMPT = "preempt"
    FINISH = "finish"


@dataclass(frozen=True)
class SimEvent:
    """One event of one job.

    Attributes:
        time_s: when (simulated seconds; a finish within its round, the others at the round's start).
        job: the job's id.
        kind: what happened (:class:`SimEventKind`).
        allocation: the GPUs it started on (``START``, ``RESTART``) or lost (``PREEMPT``); None
            for ``FINISH``.
    """

    time_s: float
    job: str
    kind: SimEventKind
    allocation: Allocation | None = None

    @property
    def detail(self) -> str:
        """``"4xa100 on 1 nodes"`` for a (re)start, ``"4xa100"`` for a preemption, ``""`` for a finish."""
        a = self.allocation
        if a is None:
            return ""
        if self.kind is SimEventKind.PREEMPT:
            return f"{a.num_gpus}x{a.gpu_type}"
        return f"{a.num_gpus}x{a.gpu_type} on {len(a.placement)} nodes"

    def to_list(self) -> list[float | str]:
        """``[time s, job, kind, detail]``: the event as ``SimResult.to_dict`` writes it."""
        return [self.time_s, self.job, self.kind.value, self.detail]
