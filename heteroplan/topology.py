"""The cluster's network as a networkx graph: nodes, switches (racks), zones, links with bandwidth.

Graph vertices carry a ``kind``: ``"node"`` (a machine of the :class:`~heteroplan.cluster.Cluster`,
with ``intra_gbps``, the bandwidth between its own GPUs), ``"switch"`` (a top-of-rack switch)
or ``"zone"`` (a zone's spine/router). Edges carry ``gbps``, the link bandwidth (Gbit/s).
:meth:`Topology.from_cluster` builds the usual tree: every node under one switch, every switch
under its zone, zones linked to each other; :meth:`Topology.from_graph` takes any graph.

Two questions are answered from the graph:

- :meth:`Topology.bandwidth`: the bandwidth between two GPU groups (sets of nodes), the
  bottleneck of the path between their farthest-apart members. Between two vertices the path
  taken is the widest one (largest bottleneck), found on a maximum spanning tree, which in a
  tree topology is *the* path.
- :meth:`Topology.switch_of` / :meth:`Topology.nodes_by_switch`: which nodes share a switch, for
  placement that keeps a gang under one switch
  (:func:`heteroplan.policies.placement.place` with ``topology=``).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from enum import StrEnum

import networkx as nx

from heteroplan.cluster import Cluster
from heteroplan.errors import InputError
from heteroplan.inputs import enum_choice, is_count, real_value

__all__ = ["Topology", "VertexKind"]


class VertexKind(StrEnum):
    """What a vertex of the network graph is (its ``kind`` attribute; the value is accepted)."""

    NODE = "node"  # a machine of the cluster
    SWITCH = "switch"  # a top-of-rack switch
    ZONE = "zone"  # a zone's spine/router


def _check_gbps(name: str, value: object) -> float:
    gbps = real_value(value)  # np.float32 too; NaN for a bool, a string and 10**400 (was an OverflowError)
    if not (gbps > 0 and math.isfinite(gbps)):
        raise InputError(name, value, "must be a finite bandwidth > 0 (Gbit/s)")
    return gbps


@dataclass(frozen=True)
class Topology:
    """A validated network graph (see the module docstring for the vertex and edge attributes).

    Build it with :meth:`from_cluster` or :meth:`from_graph`; the graph is copied and frozen.
    """

    graph: nx.Graph
    _tree: nx.Graph = field(init=False, repr=False, compare=False)
    _switch: dict[str, str] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        g = nx.Graph(self.graph)  # new attribute dicts: the caller's graph is left as it is
        for v, data in g.nodes(data=True):
            data["kind"] = enum_choice(VertexKind, f"graph.nodes[{v!r}].kind", data.get("kind"))
            if data["kind"] is VertexKind.NODE:
                _check_gbps(f"graph.nodes[{v!r}].intra_gbps", data.get("intra_gbps"))
        g = nx.freeze(g)
        for a, b, data in g.edges(data=True):
            _check_gbps(f"graph.edges[{a!r}, {b!r}].gbps", data.get("gbps"))
        if g.number_of_nodes() and not nx.is_connected(g):
            parts = [sorted(map(str, c))[:3] for c in nx.connected_components(g)]
            raise InputError("graph", f"{len(parts)} components", f"must be connected; parts start with {parts}")
        switch: dict[str, str] = {}
        for v, data in g.nodes(data=True):
            if data["kind"] is VertexKind.NODE:
                ups = [u for u in g.neighbors(v) if g.nodes[u]["kind"] is VertexKind.SWITCH]
                switch[v] = ups[0] if len(ups) == 1 else v  # a node on no (or several) switch is its own group
        object.__setattr__(self, "graph", g)
        object.__setattr__(self, "_tree", nx.maximum_spanning_tree(g, weight="gbps"))
        object.__setattr__(self, "_switch", switch)

    # ------------------------------------------------------------------ build
    @classmethod
    def from_graph(cls, graph: nx.Graph) -> Topology:
        """Wrap (a copy of) ``graph``; raises :class:`InputError` naming a bad vertex or edge."""
        if not isinstance(graph, nx.Graph):
            raise InputError("graph", type(graph).__name__, "must be a networkx.Graph")
        return cls(graph)

    @classmethod
    def from_cluster(
        cls,
        cluster: Cluster,
        *,
        nodes_per_switch: int = 4,
        intra_gbps: float = 2400.0,
        node_gbps: float = 100.0,
        uplink_gbps: float = 200.0,
        zone_gbps: float = 25.0,
        switch_of: Mapping[str, str] | None = None,
    ) -> Topology:
        """A tree over ``cluster``: node - switch - zone, zones fully linked.

        Args:
            cluster: the machines; each becomes a ``"node"`` vertex named like the node.
            nodes_per_switch: nodes per switch when ``switch_of`` is not given (nodes grouped in
                cluster order within each zone and GPU type, as racks usually are).
            intra_gbps: bandwidth between GPUs of one node (Gbit/s; NVLink-class by default).
            node_gbps: node-to-switch link (Gbit/s).
            uplink_gbps: switch-to-zone link (Gbit/s).
            zone_gbps: zone-to-zone link (Gbit/s).
            switch_of: explicit ``{node name: switch name}`` (every node).
        """
        if not isinstance(cluster, Cluster):
            raise InputError("cluster", type(cluster).__name__, "must be a Cluster")
        if not is_count(nodes_per_switch) or nodes_per_switch < 1:
            raise InputError("nodes_per_switch", nodes_per_switch, "must be an integer >= 1")
        nodes_per_switch = int(nodes_per_switch)  # np.int64 too
        if switch_of is not None and not (isinstance(switch_of, Mapping) and all(
                isinstance(sw, str) and sw not in cluster.node_types for sw in switch_of.values())):
            raise InputError("switch_of", switch_of, "must map node names to switch names (strings that name no "
                             "node: a switch named like a node took its place in the graph)")
        bw = {name: _check_gbps(name, value) for name, value in
              (("intra_gbps", intra_gbps), ("node_gbps", node_gbps), ("uplink_gbps", uplink_gbps), ("zone_gbps", zone_gbps))}
        if switch_of is None:
            switch_of = {}
            groups: dict[tuple[str, str], list[str]] = {}
            for n in cluster.nodes:
                groups.setdefault((n.zone, n.gpu_type), []).append(n.name)
            for (zone, gpu), names in groups.items():
                for i, name in enumerate(names):
                    switch_of[name] = f"switch:{zone}/{gpu}/{i // nodes_per_switch}"
        missing = [n.name for n in cluster.nodes if n.name not in switch_of]
        if missing:
            raise InputError("switch_of", missing[:3], "every node of the cluster needs a switch")
        g = nx.Graph()
        zone_of_switch: dict[str, str] = {}
        for n in cluster.nodes:
            sw = switch_of[n.name]
            if zone_of_switch.setdefault(sw, n.zone) != n.zone:
                raise InputError(f"switch_of[{n.name!r}]", sw, f"switch spans zones {zone_of_switch[sw]} and {n.zone}")
            g.add_node(n.name, kind=VertexKind.NODE, intra_gbps=bw["intra_gbps"], zone=n.zone, gpu_type=n.gpu_type)
            g.add_node(sw, kind=VertexKind.SWITCH, zone=n.zone)
            g.add_edge(n.name, sw, gbps=bw["node_gbps"])
        zones = sorted(set(zone_of_switch.values()))
        for sw, zone in zone_of_switch.items():
            g.add_node(f"zone:{zone}", kind=VertexKind.ZONE)
            g.add_edge(sw, f"zone:{zone}", gbps=bw["uplink_gbps"])
        for a, b in itertools.combinations(zones, 2):
            g.add_edge(f"zone:{a}", f"zone:{b}", gbps=bw["zone_gbps"])
        return cls(g)

    # ---------------------------------------------------------------- queries
    @property
    def machines(self) -> tuple[str, ...]:
        """Names of the ``"node"`` vertices."""
        return tuple(self._switch)

    def switch_of(self, node: str) -> str:
        """The switch a node hangs off (the node itself when it has no single switch)."""
        try:
            return self._switch[node]
        except (KeyError, TypeError):  # a list was a TypeError (unhashable)
            raise InputError("node", node, f"not a node of the topology; e.g. {list(self._switch)[:3]}") from None

    def nodes_by_switch(self, nodes: Iterable[str] | None = None) -> dict[str, list[str]]:
        """``{switch: [node, ...]}`` for ``nodes`` (default: all), in the given order."""
        out: dict[str, list[str]] = {}
        for n in self.machines if nodes is None else nodes:
            out.setdefault(self.switch_of(n), []).append(n)
        return out

    def path_bandwidth(self, a: str, b: str) -> float:
        """Bottleneck bandwidth (Gbit/s) of the widest path between vertices ``a`` and ``b``
        (a node's ``intra_gbps`` when ``a == b``)."""
        for v in (a, b):
            if v not in self.graph:
                raise InputError("vertex", v, "not in the topology")
        if a == b:
            return float(self.graph.nodes[a].get("intra_gbps", float("inf")))
        path = nx.shortest_path(self._tree, a, b)
        return min(float(self.graph.edges[u, v]["gbps"]) for u, v in itertools.pairwise(path))

    def bandwidth(self, group_a: Iterable[str], group_b: Iterable[str] | None = None) -> float:
        """Bandwidth (Gbit/s) between two GPU groups, given as the nodes they occupy: the
        smallest :meth:`path_bandwidth` over pairs of their nodes (the pair a collective waits
        on). With one group, the bandwidth among its own nodes (``intra_gbps`` if it has one)."""
        for name, group in (("group_a", group_a), ("group_b", group_b)):
            if group is not None and (isinstance(group, str) or not isinstance(group, Iterable)):
                raise InputError(name, group, "must be the node names a GPU group occupies (a list; a name alone "
                                 "was read as its characters)")
        a = sorted(set(group_a))
        b = a if group_b is None else sorted(set(group_b))
        if not a or not b:
            raise InputError("group", a if not a else b, "a GPU group needs at least one node")
        if group_b is None:
            if len(a) == 1:
                return self.path_bandwidth(a[0], a[0])
            pairs: Iterable[tuple[str, str]] = itertools.combinations(a, 2)
        else:
            pairs = itertools.product(a, b)
        return min(self.path_bandwidth(x, y) for x, y in pairs)
