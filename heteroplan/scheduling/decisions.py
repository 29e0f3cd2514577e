"""What a scheduling round decides for each job: typed decisions, not a bare allocation map."""

from __future__ import annotations

import enum
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from types import MappingProxyType

from heteroplan.policies.base import Allocation
from heteroplan.scheduling.admission import Parked

__all__ = ["DecisionKind", "Decision", "RoundDecisions", "StepTiming"]


class DecisionKind(enum.Enum):
    """What the caller must do with a job this round.

    - ``START``: launch it on ``allocation`` (it held no GPUs last round); when it ran before,
      resume from its checkpoint (``Decision.restart`` is then ``True``).
    - ``KEEP``: leave it running (its allocation may have moved to other nodes of the same type
      and shape when the session treats such moves as free).
    - ``RESCALE``: stop it at an iteration boundary, checkpoint, relaunch on ``allocation``
      (another GPU type, count or placement).
    - ``PREEMPT``: stop it and checkpoint; it keeps its place in the session and waits.
    - ``WAIT``: it holds no GPUs and gets none.
    """

    START = "start"
    KEEP = "keep"
    RESCALE = "rescale"
    PREEMPT = "preempt"
    WAIT = "wait"


@dataclass(frozen=True)
class Decision:
    """One job's decision for one round.

    Attributes:
        job_id: the job.
        kind: what to do (:class:`DecisionKind`).
        allocation: the GPUs it runs on this round (placement filled in), ``None`` for
            ``PREEMPT`` and ``WAIT``.
        previous: what it held last round (``None``: nothing).
        restart: this (re)launch counts as a restart (a first start does not).
        restore_s: seconds of checkpoint restore it must pay from the round's start before it
            makes progress (the restart cost; also what is left of an earlier restart's restore).
        parked: why admission held it back from the policy this round (it can never run on the
            session's cluster as it is now; :class:`~heteroplan.scheduling.admission.Parked`), or
            ``None``. A parked job's kind is ``WAIT`` (``PREEMPT`` if it held GPUs); it is checked
            again at every round.
    """

    job_id: str
    kind: DecisionKind
    allocation: Allocation | None = None
    previous: Allocation | None = None
    restart: bool = False
    restore_s: float = 0.0
    parked: Parked | None = None

    @property
    def runs(self) -> bool:
        """It holds GPUs this round."""
        return self.allocation is not None


@dataclass(frozen=True)
class RoundDecisions:
    """Every active job's decision for the round starting at ``time`` (s), in the order the
    policy saw the jobs (arrival time, then id); ``policy_seconds``: wall time the policy took;
    ``solve_gap``: the relative gap of the policy's solve to its bound this round, for a policy
    that reports one (``last_result.gap``: Sia, Pollux), else ``None``."""

    time: float
    decisions: tuple[Decision, ...]
    policy_seconds: float = 0.0
    solve_gap: float | None = None

    def __iter__(self) -> Iterator[Decision]:
        return iter(self.decisions)

    def __len__(self) -> int:
        return len(self.decisions)

    def __getitem__(self, job_id: str) -> Decision:
        for d in self.decisions:
            if d.job_id == job_id:
                return d
        raise KeyError(job_id)

    @property
    def allocations(self) -> Mapping[str, Allocation]:
        """job id -> allocation of the jobs that hold GPUs this round."""
        return MappingProxyType({d.job_id: d.allocation for d in self.decisions if d.allocation is not None})

    @property
    def parked(self) -> Mapping[str, Parked]:
        """job id -> why admission held it back, for the jobs parked this round."""
        return MappingProxyType({d.job_id: d.parked for d in self.decisions if d.parked is not None})


@dataclass(frozen=True)
class StepTiming:
    """A measured training step, fed to the job's performance model (which refits from it).

    Attributes:
        gpu_type: GPU type it ran on.
        placement: GPUs per node it ran on (e.g. ``(4, 4)``).
        local_bsz: samples per GPU per accumulation step.
        step_time: seconds per accumulation step, synchronization included.
        sync_time: seconds of gradient synchronization per step.
    """

    gpu_type: str
    placement: tuple[int, ...]
    local_bsz: float
    step_time: float
    sync_time: float
