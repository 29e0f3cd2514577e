"""Placement of (GPU type, GPU count) allocations onto nodes.

Sia's rule, which avoids fragmentation: jobs keeping their allocation stay where they are;
then jobs needing whole nodes take whole free nodes; then smaller jobs are packed best-fit
(the node of the right type with the fewest free GPUs that still fits). A job that fits on
no single node is spread over the emptiest nodes of its type. A job that cannot be placed at
all (not enough free GPUs of its type) is left out and reported.
"""

from __future__ import annotations

from collections.abc import Mapping

from heteroplan.cluster import Cluster
from heteroplan.errors import PolicyError
from heteroplan.policies.base import Allocation
from heteroplan.policies.topology_placement import choose_under_switches
from heteroplan.topology import Topology

__all__ = ["place", "free_gpus"]


def free_gpus(cluster: Cluster, allocations: Mapping[str, Allocation]) -> dict[str, int]:
    """Free GPUs per node after ``allocations`` (placed ones only)."""
    free = {n.name: n.num_gpus for n in cluster.nodes}
    for alloc in allocations.values():
        for node, count in alloc.placement:
            free[node] -= count
    return free


def place(
    cluster: Cluster,
    wanted: Mapping[str, tuple[str, int]],
    previous: Mapping[str, Allocation] | None = None,
    topology: Topology | None = None,
) -> tuple[dict[str, Allocation], list[str]]:
    """Place ``wanted`` = {job: (gpu_type, num_gpus)} onto nodes.

    With a ``topology``, a gang needing several nodes goes under one switch when a switch has
    room (:func:`~heteroplan.policies.topology_placement.choose_under_switches` picks the nodes).
    Returns the placed allocations and the jobs that could not be placed.
    """
    previous = previous or {}
    by_type: dict[str, list[str]] = {}
    for n in cluster.nodes:
        by_type.setdefault(n.gpu_type, []).append(n.name)
    capacity = {n.name: n.num_gpus for n in cluster.nodes}
    free = dict(capacity)
    placed: dict[str, Allocation] = {}
    todo: list[tuple[str, str, int]] = []
    for job, (gpu_type, count) in wanted.items():
        old = previous.get(job)
        if old is not None and old.gpu_type == gpu_type and old.num_gpus == count and old.placement:
            placed[job] = old
            for node, c in old.placement:
                free[node] -= c
        else:
            todo.append((job, gpu_type, count))
    if any(v < 0 for v in free.values()):
        raise PolicyError("previous placements overlap: a node is over-committed")
    # Biggest jobs first; whole-node jobs before partial ones of the same type.
    todo.sort(key=lambda t: (-t[2], t[0]))
    failed: list[str] = []
    for job, gpu_type, count in todo:
        nodes = [n for n in by_type.get(gpu_type, ()) if free[n] > 0]
        per_node = cluster.gpu_type(gpu_type).gpus_per_node
        chosen: list[tuple[str, int]] = []
        if topology is not None:
            chosen = choose_under_switches(topology, free, nodes, count)
        elif count >= per_node:
            whole = [n for n in nodes if free[n] == capacity[n] == per_node]
            need = count // per_node
            if len(whole) >= need and count % per_node == 0:
                chosen = [(n, per_node) for n in whole[:need]]
        if not chosen:
            fits = [n for n in nodes if free[n] >= count]
            if fits:
                best = min(fits, key=lambda n: (free[n], n))
                chosen = [(best, count)]
        if not chosen and sum(free[n] for n in nodes) >= count:
            left = count
            for n in sorted(nodes, key=lambda n: (-free[n], n)):
                take = min(free[n], left)
                chosen.append((n, take))
                left -= take
                if left == 0:
                    break
        if not chosen:
            failed.append(job)
            continue
        for n, c in chosen:
            free[n] -= c
        placed[job] = Allocation(gpu_type, count, tuple(chosen))
    return placed, failed
