"""Free-GPU bookkeeping and node packing shared by the round-based policies.

Units: GPU counts. ``free`` maps node name -> idle GPUs this round.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

import numpy as np

from heteroplan.cluster import Cluster
from heteroplan.policies.base import Allocation, JobState

__all__ = ["free_gpus", "take_gpus", "place_gang", "make_allocation", "usable_types", "nodes_by_type", "rate_of"]


def free_gpus(cluster: Cluster, allocations: Iterable[Allocation] = ()) -> dict[str, int]:
    """Idle GPUs per node after ``allocations`` (which must carry placements)."""
    free = {n.name: n.num_gpus for n in cluster.nodes}
    for a in allocations:
        for node, count in a.placement:
            free[node] -= count
    return free


def take_gpus(free: dict[str, int], nodes: Iterable[str], count: int) -> tuple[tuple[str, int], ...] | None:
    """Place ``count`` GPUs on ``nodes`` and debit ``free``; ``None`` (and no change) if they do not fit.

    Best fit: the fullest-fitting single node when one node suffices, else the nodes with
    the most idle GPUs first (fewest nodes spanned).
    """
    cand = [n for n in nodes if free[n] > 0]
    if sum(free[n] for n in cand) < count:
        return None
    single = [n for n in cand if free[n] >= count]
    if single:
        best = min(single, key=lambda n: free[n])
        free[best] -= count
        return ((best, count),)
    placement = []
    need = count
    for n in sorted(cand, key=lambda n: -free[n]):
        c = min(need, free[n])
        placement.append((n, c))
        free[n] -= c
        need -= c
        if need == 0:
            break
    return tuple(placement)


def place_gang(job: JobState, cluster: Cluster, free: dict[str, int]) -> Allocation | None:
    """``job``'s ``requested_gpus`` GPUs, all at once, on nodes of the types its estimator runs on
    (:func:`usable_types`), best fit (:func:`take_gpus`), ``free`` debited; ``None`` (and no
    change) if they do not fit."""
    usable = set(usable_types(job.estimator, cluster.type_names, job.requested_gpus))
    placement = take_gpus(free, [n.name for n in cluster.nodes if n.gpu_type in usable], job.requested_gpus)
    return None if placement is None else make_allocation(placement, cluster)


def make_allocation(placement: tuple[tuple[str, int], ...], cluster: Cluster) -> Allocation:
    """An :class:`Allocation` whose ``gpu_type`` lists the placement's types (``"k80+v100"``)."""
    node_type = {n.name: n.gpu_type for n in cluster.nodes}
    used = {node_type[n] for n, _ in placement}
    return Allocation.spanning([t for t in cluster.type_names if t in used], tuple(placement))


def rate_of(estimator: object, gpu_type: str, gpus: int, gpus_per_node: int) -> float:
    """Rate (estimator units) of a job on ``gpus`` GPUs of ``gpu_type``, packed on as few nodes as possible."""
    nodes = -(-gpus // gpus_per_node)
    return _first(estimator.goodput(gpu_type, np.array([nodes]), np.array([gpus])))  # type: ignore[attr-defined]


def usable_types(estimator: object, type_names: Iterable[str], gpus: int) -> list[str]:
    """Types on which the job's estimator reports a positive rate at ``gpus`` GPUs (all if none)."""
    names = list(type_names)
    if estimator is None:
        return names
    out = []
    for t in names:
        value = estimator.goodput(t, 1, gpus)  # type: ignore[attr-defined]
        if float(_first(value)) > 0:
            out.append(t)
    return out


def _first(value: object) -> float:
    return float(np.asarray(value, dtype=float).reshape(-1)[0])


def nodes_by_type(cluster: Cluster) -> Mapping[str, list[str]]:
    """Node names per GPU type, in cluster order."""
    out: dict[str, list[str]] = {t: [] for t in cluster.type_names}
    for n in cluster.nodes:
        out[n.gpu_type].append(n.name)
    return out
