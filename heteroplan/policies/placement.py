"""Placement of (GPU type, GPU count) allocations onto nodes.

Sia's rule, which avoids fragmentation: jobs keeping their allocation stay where they are;
then jobs needing whole nodes take whole free nodes; then smaller jobs are packed best-fit
(the node of the right type with the fewest free GPUs that still fits). A job that fits on
no single node is spread over the emptiest nodes of its type. A job that cannot be placed at
all (not enough free GPUs of its type) is left out and reported.
"""

from __future__ import annotations

import bisect
from collections.abc import Mapping

from heteroplan.cluster import Cluster
from heteroplan.errors import PolicyError
from heteroplan.policies.base import Allocation
from heteroplan.policies.topology_placement import choose_under_switches, fill_in_order
from heteroplan.topology import Topology

__all__ = ["place", "free_gpus"]


def free_gpus(cluster: Cluster, allocations: Mapping[str, Allocation]) -> dict[str, int]:
    """Free GPUs per node after ``allocations`` (placed ones only)."""
    free = {n.name: n.num_gpus for n in cluster.nodes}
    for alloc in allocations.values():
        for node, count in alloc.placement:
            free[node] -= count
    return free


class _FreeIndex:
    """Free GPUs per node, indexed by (GPU type, free count) so that best-fit, whole-node and
    spread choices cost a lookup per job rather than a scan of the cluster's nodes."""

    def __init__(self, cluster: Cluster, free: dict[str, int]) -> None:
        nodes = cluster.nodes
        self.free = free
        self.type_of = {n.name: n.gpu_type for n in nodes}
        self.position = {n.name: i for i, n in enumerate(nodes)}  # cluster order (whole nodes)
        self.by_name = sorted(n.name for n in nodes)
        self.rank = {name: r for r, name in enumerate(self.by_name)}  # name order (best fit, spread)
        self.per_node = {t.name: t.gpus_per_node for t in cluster.gpu_types}
        # buckets[type][f]: name ranks of the type's nodes with f free GPUs (sorted; f >= 1)
        self.buckets = {t: [[] for _ in range(g + 1)] for t, g in self.per_node.items()}
        self.whole: dict[str, list[int]] = {t: [] for t in self.per_node}  # positions of wholly free nodes
        self.total = dict.fromkeys(self.per_node, 0)
        for n in sorted(nodes, key=lambda n: n.name):
            f = free[n.name]
            if f > 0:
                self.buckets[n.gpu_type][f].append(self.rank[n.name])
                self.total[n.gpu_type] += f
        for n in nodes:
            if free[n.name] == self.per_node[n.gpu_type]:
                self.whole[n.gpu_type].append(self.position[n.name])

    def take(self, node: str, count: int) -> None:
        """Use ``count`` GPUs of ``node``."""
        t, old = self.type_of[node], self.free[node]
        new = old - count
        self.free[node] = new
        self.total[t] -= count
        rank = self.rank[node]
        bucket = self.buckets[t][old]
        del bucket[bisect.bisect_left(bucket, rank)]
        if new > 0:
            bisect.insort(self.buckets[t][new], rank)
        if old == self.per_node[t]:
            whole = self.whole[t]
            del whole[bisect.bisect_left(whole, self.position[node])]

    def choose(self, cluster: Cluster, gpu_type: str, count: int) -> list[tuple[str, int]]:
        """Sia's choice of nodes for ``count`` GPUs of ``gpu_type`` (not yet taken); ``[]`` if none."""
        per_node = self.per_node[gpu_type]
        if count >= per_node and count % per_node == 0:  # whole free nodes, in cluster order
            whole = self.whole[gpu_type]
            need = count // per_node
            if len(whole) >= need:
                return [(cluster.nodes[i].name, per_node) for i in whole[:need]]
        buckets = self.buckets[gpu_type]
        for f in range(count, per_node + 1):  # best fit: fewest free GPUs that hold it, then name
            if buckets[f]:
                return [(self.by_name[buckets[f][0]], count)]
        if self.total[gpu_type] < count:
            return []
        chosen, left = [], count  # spread over the emptiest nodes (then by name)
        for f in range(per_node, 0, -1):
            for rank in buckets[f]:
                take = min(f, left)
                chosen.append((self.by_name[rank], take))
                left -= take
                if left == 0:
                    return chosen
        return []


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
    if topology is not None:
        return _place_on_topology(cluster, todo, free, placed, topology)
    index = _FreeIndex(cluster, free)
    for job, gpu_type, count in todo:
        cluster.gpu_type(gpu_type)  # an unknown type is an error
        chosen = index.choose(cluster, gpu_type, count) if count > 0 else []
        if not chosen:
            failed.append(job)
            continue
        for n, c in chosen:
            index.take(n, c)
        placed[job] = Allocation(gpu_type, count, tuple(chosen))
    return placed, failed


def _place_on_topology(
    cluster: Cluster, todo: list[tuple[str, str, int]], free: dict[str, int], placed: dict[str, Allocation],
    topology: Topology,
) -> tuple[dict[str, Allocation], list[str]]:
    """:func:`place`'s remaining jobs with gangs kept under one switch where they fit."""
    by_type: dict[str, list[str]] = {}
    for n in cluster.nodes:
        by_type.setdefault(n.gpu_type, []).append(n.name)
    failed: list[str] = []
    for job, gpu_type, count in todo:
        nodes = [n for n in by_type.get(gpu_type, ()) if free[n] > 0]
        cluster.gpu_type(gpu_type)
        chosen = choose_under_switches(topology, free, nodes, count) or _tightest_or_spread(nodes, free, count)
        if not chosen:
            failed.append(job)
            continue
        for n, c in chosen:
            free[n] -= c
        placed[job] = Allocation(gpu_type, count, tuple(chosen))
    return placed, failed


def _tightest_or_spread(nodes: list[str], free: dict[str, int], count: int) -> list[tuple[str, int]]:
    """``count`` GPUs on the fullest node that holds them all, else spread over the freest nodes
    (fewest nodes first); ``[]`` when ``nodes`` lack ``count`` free GPUs."""
    fits = [n for n in nodes if free[n] >= count]
    if fits:
        return [(min(fits, key=lambda n: (free[n], n)), count)]
    if sum(free[n] for n in nodes) < count:
        return []
    return fill_in_order(sorted(nodes, key=lambda n: (-free[n], n)), free, count)
