"""Admission: whether a job can ever run on a cluster, and if not, why (one rule for every driver).

The scheduling session asks it for every active job at every round, against the cluster it holds
then (so a job parked on a small cluster runs once the cluster grows, and one that fitted is
parked when the cluster shrinks); the simulator asks it once per job before the first round
(its ``rejected`` jobs). The rule: a job needs ``1`` GPU when the policy may rescale it
(elastic), else its ``requested_gpus`` together; it can use the GPUs of every type on which its
performance model gives a goodput > 0 (every type when it has no model). It is parked when it
needs more GPUs than it can use.
"""

from __future__ import annotations

import enum
from collections.abc import Callable
from dataclasses import dataclass

from heteroplan.cluster import Cluster

__all__ = ["ParkReason", "Parked", "admission", "usable_gpus"]

Rate = Callable[[str, int, int], float]
"""``rate(gpu_type, num_nodes, num_gpus)``: the job's rate there (work units/s; 0: cannot run)."""


class ParkReason(enum.Enum):
    """Why a job is parked (held back from the policy) this round."""

    TOO_LARGE = "too-large"  # it needs more GPUs together than the cluster has of types it can run on
    NO_USABLE_TYPE = "no-usable-type"  # its performance model gives zero goodput on every type of the cluster


@dataclass(frozen=True)
class Parked:
    """A job admission holds back: ``reason``, ``need_gpus`` (GPUs it needs together),
    ``usable_gpus`` (GPUs of the types it can run on) and a sentence ``detail``."""

    reason: ParkReason
    need_gpus: int
    usable_gpus: int

    @property
    def detail(self) -> str:
        """What the caller sees (the simulator's ``rejected`` text)."""
        return f"needs {self.need_gpus} GPUs together; only {self.usable_gpus} GPUs of types it can run on"


def usable_gpus(cluster: Cluster, need: int, rate: Rate | None) -> int:
    """GPUs of ``cluster`` of the types where ``rate`` (at ``need`` GPUs on as few nodes as a
    type's nodes hold them) is > 0; every GPU without a ``rate``."""
    capacity = cluster.capacity()
    if rate is None:
        return sum(capacity.values())
    total = 0
    for gpu_type, count in capacity.items():
        if not count:
            continue
        nodes = max(1, -(-need // cluster.gpu_type(gpu_type).gpus_per_node))  # integer ceil: need may be huge
        if rate(gpu_type, nodes, need) > 0:
            total += count
    return total


def admission(cluster: Cluster, requested_gpus: int, elastic: bool, rate: Rate | None) -> Parked | None:
    """``None`` when the job can run on ``cluster`` (see the module doc), else why it is parked."""
    need = 1 if elastic else requested_gpus
    usable = usable_gpus(cluster, need, rate)
    if need <= usable:
        return None
    too_large = usable > 0 or need > sum(cluster.capacity().values())
    return Parked(ParkReason.TOO_LARGE if too_large else ParkReason.NO_USABLE_TYPE, need, usable)
