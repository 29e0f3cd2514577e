"""Cluster topology: bottleneck bandwidth against hand computation and brute-force path
enumeration; topology-aware placement keeps gangs under one switch whenever one has room."""

from __future__ import annotations

import itertools
import random

import networkx as nx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from heteroplan.cluster import Cluster, GPUType, Node
from heteroplan.errors import InputError
from heteroplan.policies.base import Allocation
from heteroplan.policies.placement import place
from heteroplan.topology import Topology


def two_switch_graph() -> nx.Graph:
    """n0, n1 under s0 (100 and 40 Gbit/s links), n2 under s1 (50), s0 - s1 at 25."""
    g = nx.Graph()
    for n in ("n0", "n1", "n2"):
        g.add_node(n, kind="node", intra_gbps=600.0)
    g.add_node("s0", kind="switch")
    g.add_node("s1", kind="switch")
    g.add_edge("n0", "s0", gbps=100.0)
    g.add_edge("n1", "s0", gbps=40.0)
    g.add_edge("n2", "s1", gbps=50.0)
    g.add_edge("s0", "s1", gbps=25.0)
    return g


def test_bottleneck_bandwidth_on_two_switches_by_hand() -> None:
    topo = Topology.from_graph(two_switch_graph())
    assert topo.path_bandwidth("n0", "n1") == 40.0  # n0-s0 100, s0-n1 40
    assert topo.path_bandwidth("n0", "n2") == 25.0  # the switch-to-switch link
    assert topo.path_bandwidth("n1", "n1") == 600.0  # inside one node
    assert topo.bandwidth(["n0", "n1"], ["n2"]) == 25.0
    assert topo.bandwidth(["n0", "n1"]) == 40.0
    assert topo.bandwidth(["n2"]) == 600.0
    assert topo.switch_of("n1") == "s0" and topo.nodes_by_switch() == {"s0": ["n0", "n1"], "s1": ["n2"]}


def test_widest_path_is_taken_when_there_are_two() -> None:
    g = two_switch_graph()
    g.add_node("z", kind="zone")
    g.add_edge("s0", "z", gbps=80.0)
    g.add_edge("z", "s1", gbps=60.0)  # s0 - z - s1 has bottleneck 60 > the direct 25
    topo = Topology.from_graph(g)
    assert topo.path_bandwidth("n0", "n2") == 50.0  # now the n2 link is the bottleneck
    assert topo.path_bandwidth("s0", "s1") == 60.0


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 10_000), n=st.integers(2, 7), extra=st.integers(0, 8))
def test_path_bandwidth_equals_brute_force_widest_path(seed: int, n: int, extra: int) -> None:
    g = nx.random_labeled_tree(n, seed=seed) if hasattr(nx, "random_labeled_tree") else nx.random_tree(n, seed=seed)
    pairs = list(itertools.combinations(range(n), 2))
    rng = random.Random(seed)
    for a, b in rng.sample(pairs, min(extra, len(pairs))):
        g.add_edge(a, b)
    for a, b in g.edges:
        g.edges[a, b]["gbps"] = float(rng.choice([10, 25, 40, 100, 200]))
    for v in g.nodes:
        g.nodes[v].update(kind="node", intra_gbps=1000.0)
    topo = Topology.from_graph(g)
    for a, b in pairs:
        brute = max(min(g.edges[u, v]["gbps"] for u, v in itertools.pairwise(p)) for p in nx.all_simple_paths(g, a, b))
        assert topo.path_bandwidth(a, b) == brute


def small_cluster(zones: tuple[str, ...] = ("za", "zb"), nodes_per_zone: int = 4) -> Cluster:
    gpu = GPUType("T", 16.0, 4)
    nodes = [Node(f"{z}/n{i}", "T", 4, z) for z in zones for i in range(nodes_per_zone)]
    return Cluster((gpu,), tuple(nodes))


def test_from_cluster_builds_the_tree_with_its_link_speeds() -> None:
    topo = Topology.from_cluster(small_cluster(), nodes_per_switch=2, intra_gbps=900, node_gbps=100,
                                 uplink_gbps=50, zone_gbps=10)
    assert len(topo.nodes_by_switch()) == 4
    assert topo.bandwidth(["za/n0", "za/n1"]) == 100.0  # same switch
    assert topo.bandwidth(["za/n0"], ["za/n2"]) == 50.0  # over the uplinks of one zone
    assert topo.bandwidth(["za/n0"], ["zb/n0"]) == 10.0  # across zones
    assert topo.bandwidth(["za/n3"]) == 900.0


def test_bad_topologies_name_the_field() -> None:
    g = two_switch_graph()
    g.edges["n0", "s0"]["gbps"] = 0
    with pytest.raises(InputError, match=r"graph.edges\['n0', 's0'\].gbps"):
        Topology.from_graph(g)
    g = two_switch_graph()
    g.remove_edge("s0", "s1")
    with pytest.raises(InputError, match="connected"):
        Topology.from_graph(g)
    g = two_switch_graph()
    g.nodes["s1"]["kind"] = "router"
    with pytest.raises(InputError, match="kind"):
        Topology.from_graph(g)
    with pytest.raises(InputError, match="nodes_per_switch"):
        Topology.from_cluster(small_cluster(), nodes_per_switch=0)
    with pytest.raises(InputError, match="vertex"):
        Topology.from_graph(two_switch_graph()).path_bandwidth("n0", "nope")


def test_gang_goes_under_one_switch_where_best_fit_splits_it() -> None:
    cluster = small_cluster(("za",), nodes_per_zone=4)  # switches s0 = {n0, n1}, s1 = {n2, n3}
    topo = Topology.from_cluster(cluster, nodes_per_switch=2)
    busy = {"a": Allocation("T", 2, (("za/n0", 2),)), "b": Allocation("T", 2, (("za/n2", 2),))}
    wanted = {"a": ("T", 2), "b": ("T", 2), "gang": ("T", 6)}
    plain, _ = place(cluster, wanted, busy)
    aware, failed = place(cluster, wanted, busy, topology=topo)
    assert not failed
    switches = {topo.switch_of(n) for n, _ in aware["gang"].placement}
    assert len(switches) == 1 and aware["gang"].num_gpus == 6
    assert len({topo.switch_of(n) for n, _ in plain["gang"].placement}) == 2  # what best fit does


@settings(max_examples=60, deadline=None)
@given(used=st.lists(st.integers(0, 4), min_size=8, max_size=8), gang=st.integers(5, 20))
def test_topology_placement_keeps_gangs_under_one_switch_when_possible(used: list[int], gang: int) -> None:
    cluster = small_cluster(("za", "zb"), nodes_per_zone=4)
    topo = Topology.from_cluster(cluster, nodes_per_switch=2)
    names = [n.name for n in cluster.nodes]
    busy = {f"busy{i}": Allocation("T", u, ((names[i], u),)) for i, u in enumerate(used) if u}
    wanted = {j: (a.gpu_type, a.num_gpus) for j, a in busy.items()} | {"gang": ("T", gang)}
    aware, failed = place(cluster, wanted, busy, topology=topo)
    free = {n: 4 - used[i] for i, n in enumerate(names)}
    total_free = sum(free.values())
    assert ("gang" in failed) == (total_free < gang)  # fails exactly when the cluster is too full
    if "gang" in failed:
        return
    placement = aware["gang"].placement
    assert sum(c for _, c in placement) == gang
    assert all(0 < c <= free[n] for n, c in placement)  # nothing over-committed
    room = {sw: sum(free[n] for n in members) for sw, members in topo.nodes_by_switch().items()}
    spanned = {topo.switch_of(n) for n, _ in placement}
    if any(r >= gang for r in room.values()):
        assert len(spanned) == 1
    else:  # fewest switches: the roomiest ones
        best = sorted(room.values(), reverse=True)
        need = next(k for k in range(1, len(best) + 1) if sum(best[:k]) >= gang)
        assert len(spanned) == need
