"""Topology-aware placement: keep a multi-node gang under one switch when a switch has room.

:func:`heteroplan.policies.placement.place` with ``topology=`` asks :func:`choose_under_switches`
for each job's nodes (jobs keeping their allocation stay; biggest jobs first as always). A job
that fits on one node gets the fullest node that fits. For a gang that needs several nodes: among the switches whose free GPUs of the job's
type can hold it, the one with the fewest free GPUs takes it (best fit, so big free switches
stay whole for big gangs), whole free nodes first. Only when no single switch has room is the
gang spread, over as few switches as possible. A gang under one switch talks at the node
links' bandwidth instead of the switch uplinks' (see :meth:`heteroplan.topology.Topology.bandwidth`).
"""

from __future__ import annotations

from collections.abc import Mapping

from heteroplan.topology import Topology

__all__ = ["choose_under_switches", "fill_in_order"]


def choose_under_switches(topology: Topology, free: Mapping[str, int], nodes: list[str], count: int) -> list[tuple[str, int]]:
    """``(node, GPUs)`` for one gang of ``count`` GPUs from ``nodes`` (those of its type with free
    GPUs, ``free`` per node, not changed); ``[]`` when they do not hold it."""
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
    return fill_in_order(order, free, count)


def fill_in_order(order: list[str], free: dict[str, int], count: int) -> list[tuple[str, int]]:
    """``count`` GPUs taken from the nodes of ``order`` in turn, each node's free GPUs in full but
    the last's: ``(node, GPUs)`` pairs (short of ``count`` when ``order`` lacks them)."""
    chosen: list[tuple[str, int]] = []
    left = count
    for n in order:
        take = min(free[n], left)
        chosen.append((n, take))
        left -= take
        if left == 0:
            break
    return chosen
