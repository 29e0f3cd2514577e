"""Topology-aware placement: keep a multi-node gang under one switch when a switch has room.

Same contract as :func:`heteroplan.policies.placement.place` (jobs keeping their allocation stay;
biggest jobs first; a job that fits on one node gets the fullest node that fits), with one
change for a gang that needs several nodes: among the switches whose free GPUs of the job's
type can hold it, the one with the fewest free GPUs takes it (best fit, so big free switches
stay whole for big gangs), whole free nodes first. Only when no single switch has room is the
gang spread, over as few switches as possible. A gang under one switch talks at the node
links' bandwidth instead of the switch uplinks' (see :meth:`heteroplan.topology.Topology.bandwidth`).
"""

from __future__ import annotations

from collections.abc import Mapping

from heteroplan.cluster import Cluster
from heteroplan.policies.base import Allocation
from heteroplan.topology import Topology

__all__ = ["place_under_switches"]


def place_under_switches(
    cluster: Cluster,
    topology: Topology,
    wanted: Mapping[str, tuple[str, int]],
    previous: Mapping[str, Allocation] | None = None,
) -> tuple[dict[str, Allocation], list[str]]:
    """Place ``wanted`` = {job: (gpu_type, GPUs)} onto nodes, gangs under one switch when possible.

    Returns the placed allocations and the jobs that could not be placed.
    """
    previous = previous or {}
    free = {n.name: n.num_gpus for n in cluster.nodes}
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
        raise ValueError("previous placements overlap: a node is over-committed")
    todo.sort(key=lambda t: (-t[2], t[0]))
    failed: list[str] = []
    for job, gpu_type, count in todo:
        nodes = [n.name for n in cluster.nodes_of_type(gpu_type) if free[n.name] > 0]
        chosen = _choose(topology, free, nodes, count)
        if not chosen:
            failed.append(job)
            continue
        for n, c in chosen:
            free[n] -= c
        placed[job] = Allocation(gpu_type, count, tuple(chosen))
    return placed, failed


def _choose(topology: Topology, free: Mapping[str, int], nodes: list[str], count: int) -> list[tuple[str, int]]:
    """GPUs for one gang from ``nodes`` (all of its type with free GPUs); [] if they do not fit."""
    fits = [n for n in nodes if free[n] >= count]
    if fits:  # one node suffices: the fullest one that fits
        best = min(fits, key=lambda n: (free[n], n))
        return [(best, count)]
    if sum(free[n] for n in nodes) < count:
        return []
    groups = {sw: sorted(members, key=lambda n: (-free[n], n))  # emptiest nodes first: fewest nodes
              for sw, members in topology.nodes_by_switch(nodes).items()}
    room = {sw: sum(free[n] for n in members) for sw, members in groups.items()}
    holding = [sw for sw in groups if room[sw] >= count]
    if holding:  # the tightest switch that holds the whole gang
        order = groups[min(holding, key=lambda sw: (room[sw], sw))]
    else:  # spread over as few switches as possible: roomiest switches first
        order = [n for sw in sorted(groups, key=lambda sw: (-room[sw], sw)) for n in groups[sw]]
    chosen: list[tuple[str, int]] = []
    left = count
    for n in order:
        take = min(free[n], left)
        chosen.append((n, take))
        left -= take
        if left == 0:
            break
    return chosen
