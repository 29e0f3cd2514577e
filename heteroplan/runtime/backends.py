"""Where the round executor's decisions are carried out: one interface, two backends.

:class:`~heteroplan.runtime.rounds.RoundExecutor` drives a scheduling session and hands every
start to an :class:`ExecutionBackend`: :class:`LocalBackend` starts a job's ranks as processes of
this machine (:func:`~heteroplan.runtime.launch.launch`);
:class:`~heteroplan.runtime.ray_backend.RayBackend` starts them as Ray actors gang-placed on the
nodes and GPUs of the decision. Both return a :class:`JobHandle` with the same behaviour: it
reports iterations as they finish, raises :class:`~heteroplan.errors.RankFailure` from
:meth:`JobHandle.poll` when a rank dies, fails or stalls (and then has stopped every other rank),
stops at an iteration boundary with a checkpoint on :meth:`JobHandle.stop`, and leaves nothing
running after :meth:`JobHandle.wait` or :meth:`JobHandle.terminate`.
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable

from heteroplan.cluster import Cluster
from heteroplan.planner.plan import Plan
from heteroplan.policies.base import Allocation
from heteroplan.runtime.config import RunConfig, StepMetrics
from heteroplan.runtime.launch import RunResult, launch
from heteroplan.runtime.models import TrainTask

__all__ = ["ExecutionBackend", "JobHandle", "LocalBackend"]


@runtime_checkable
class JobHandle(Protocol):
    """A job's ranks, started by a backend."""

    plan: Plan
    placements: tuple  # where each rank ran (Ray: RankPlacement per rank; local processes: empty)

    @property
    def steps(self) -> list[StepMetrics]:
        """Iterations reported so far by this launch (refreshed by :meth:`poll`)."""
        ...

    def poll(self) -> bool:
        """Collect reports; ``True`` while a rank is still going. Raises ``RankFailure``."""
        ...

    def stop(self) -> None:
        """Ask the ranks to stop at the next iteration boundary (they checkpoint)."""
        ...

    def wait(self, timeout: float | None = None) -> RunResult:
        """Block until every rank is done; what the run did."""
        ...

    def terminate(self) -> None:
        """Kill every rank now (no checkpoint)."""
        ...


@runtime_checkable
class ExecutionBackend(Protocol):
    """Starts jobs' ranks where a decision puts them, and says what cluster there is."""

    def launch(self, job_id: str, plan: Plan, allocation: Allocation, task: TrainTask,
               config: RunConfig) -> JobHandle:
        """Start ``plan``'s ranks on ``allocation``'s nodes and GPUs; return at once."""
        ...

    def cluster(self) -> Cluster | None:
        """The cluster as the engine sees it now (``None``: it never changes)."""
        ...


class LocalBackend:
    """Every rank a process of this machine, whatever node the decision names (one per GPU)."""

    def launch(self, job_id: str, plan: Plan, allocation: Allocation, task: TrainTask,
               config: RunConfig) -> JobHandle:
        return launch(plan, task, config)

    def cluster(self) -> Cluster | None:
        return None
