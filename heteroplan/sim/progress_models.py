"""How an allocation turns into progress: the round loop's pluggable progress models.

- :class:`GangProgress` -- one gang per job. Elastic jobs (Sia, Pollux) run at their goodput
  on whatever GPU count the policy chose; rigid jobs (Gavel, FIFO, Tiresias, YARN-CS, Hadar)
  must get exactly their ``requested_gpus`` (time-slicing happens across rounds). A gang that
  spans GPU types (task-level heterogeneity, ``"k80+v100"``) runs at its slowest type
  (synchronous data parallelism).
- :class:`ForkingProgress` -- HadarE: an allocation of a rigid job holds copies; each full
  group of W GPUs of one type is a copy, the GPUs left over on each type (together 0 or W)
  form at most one mixed copy paced by its slowest type, and the job's progress is the sum
  of its copies'.

Rates are in the job's work units per second (see :mod:`heteroplan.sim.job_models`).
"""

from __future__ import annotations

import math

from heteroplan.cluster import Cluster
from heteroplan.policies.base import Allocation, AllocationError, counts_by_type
from heteroplan.sim.job_models import SimJob

__all__ = ["GangProgress", "ForkingProgress", "progress_model"]


class GangProgress:
    """One gang per job; the slowest GPU type of the gang sets its pace."""

    def __init__(self, cluster: Cluster) -> None:
        self.cluster = cluster

    def rate(self, job: SimJob, alloc: Allocation) -> tuple[float, int, int]:
        """(work units/s, local batch, accumulation steps) of ``job`` on ``alloc``.

        Raises :class:`AllocationError` when a rigid job does not get its gang on types it can use.
        """
        by_type = counts_by_type(alloc, self.cluster)
        if not job.elastic and alloc.num_gpus != job.requested_gpus:
            raise AllocationError(f"allocation[{job.name}].num_gpus", alloc.num_gpus,
                                  f"the rigid job needs its gang of {job.requested_gpus} GPUs together")
        best: tuple[float, int, int] | None = None
        for gpu_type in by_type:
            rate = job.rate_on(gpu_type, alloc.num_nodes, alloc.num_gpus)
            if not job.elastic and rate[0] <= 0:
                raise AllocationError(f"allocation[{job.name}].gpu_type", gpu_type,
                                      "the job cannot run on this GPU type (its rate there is 0)")
            if best is None or rate[0] < best[0]:
                best = rate
        assert best is not None
        return best


class ForkingProgress(GangProgress):
    """Copies of W GPUs whose progress adds up (rigid jobs; elastic jobs run as one gang)."""

    def rate(self, job: SimJob, alloc: Allocation) -> tuple[float, int, int]:
        if job.elastic:
            return super().rate(job, alloc)
        w = job.requested_gpus
        by_type = counts_by_type(alloc, self.cluster)
        per_copy: dict[str, tuple[float, int, int]] = {}
        for k in by_type:
            nodes = max(1, math.ceil(w / self.cluster.gpu_type(k).gpus_per_node))
            per_copy[k] = job.rate_on(k, nodes, w)
            if per_copy[k][0] <= 0:
                raise AllocationError(f"allocation[{job.name}].gpu_type", k,
                                      "the job cannot run on this GPU type (its rate there is 0)")
        full = {k: c // w for k, c in by_type.items()}
        rest = {k: c % w for k, c in by_type.items() if c % w}
        if sum(rest.values()) not in (0, w):
            raise AllocationError(f"allocation[{job.name}].placement", alloc.placement,
                                  f"copies need {w} GPUs each; the leftovers {rest} do not form one copy")
        mixed = min(per_copy[k][0] for k in rest) if rest else 0.0
        total = float(sum(n * per_copy[k][0] for k, n in full.items()) + mixed)
        _, local, accum = min(per_copy.values())
        return total, local, accum


def progress_model(cluster: Cluster, forking: bool) -> GangProgress:
    """The progress model of a policy that does (HadarE) or does not fork jobs."""
    return ForkingProgress(cluster) if forking else GangProgress(cluster)
