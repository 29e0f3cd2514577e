"""Cluster description: presets, round trips, and every bad-input path names field and value."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from heteroplan.cluster import GAVEL_GPU_TYPES, SIA_GPU_TYPES, Cluster, GPUType, Node, Zone, preset
from heteroplan.errors import ClusterError


def test_presets_match_the_papers_clusters() -> None:
    sia = preset("sia-64")
    assert sia.capacity() == {"aws": 24, "rtx": 24, "dgx-ext": 16}
    assert sorted(n.num_gpus for n in sia.nodes) == [4] * 6 + [8] * 5
    assert preset("gavel-108").capacity() == {"k80": 36, "p100": 36, "v100": 36}
    gcp = preset("sailor-gcp")
    assert gcp.capacity_by_zone()[("A100-40", "us-central1-a")] == 256
    assert gcp.zone("us-west1-b").region == "us-west1"
    assert gcp.gpu_type("A100-40").price_per_hour == pytest.approx(3.673)


def test_dict_and_json_round_trip(tmp_path) -> None:
    sia = preset("sia-64")
    assert Cluster.from_dict(sia.to_dict()) == sia
    path = tmp_path / "c.json"
    path.write_text(json.dumps({"name": "x", "gpu_types": [{"name": "t", "memory_gb": 16, "gpus_per_node": 4}],
                                "counts": {"t@z1": 10, "t@z2": 4}}))
    c = Cluster.from_json(path)
    assert c.capacity_by_zone() == {("t", "z1"): 10, ("t", "z2"): 4}
    assert sorted(n.num_gpus for n in c.nodes) == [2, 4, 4, 4]


@given(counts=st.dictionaries(st.sampled_from(["k80", "p100", "v100"]), st.integers(0, 100), min_size=1))
def test_from_counts_places_every_gpu_once(counts: dict[str, int]) -> None:
    c = Cluster.from_counts(GAVEL_GPU_TYPES, counts)
    cap = c.capacity()
    for t, n in counts.items():
        assert cap[t] == n
    assert all(1 <= n.num_gpus <= 4 for n in c.nodes)
    assert len({n.name for n in c.nodes}) == len(c.nodes)


@pytest.mark.parametrize(
    "make, field, value",
    [
        (lambda: GPUType("t", -1, 4), "gpu_type[t].memory_gb", -1),
        (lambda: GPUType("t", 16, 2.5), "gpu_type[t].gpus_per_node", 2.5),
        (lambda: GPUType("t", 16, 4, price_per_hour=-3), "gpu_type[t].price_per_hour", -3),
        (lambda: GPUType("t", 16, 4, memory_bandwidth_gbs=-1.0), "gpu_type[t].memory_bandwidth_gbs", -1.0),
        (lambda: GPUType("", 16, 4), "gpu_type.name", ""),
        (lambda: Node("n", "t", -2), "node[n].num_gpus", -2),
        (lambda: Cluster(SIA_GPU_TYPES, (Node("n", "h100", 4),)), "node[n].gpu_type", "h100"),
        (lambda: Cluster(SIA_GPU_TYPES, (Node("n", "aws", 8),)), "node[n].num_gpus", 8),
        (lambda: Cluster(SIA_GPU_TYPES, (Node("n", "aws", 4, "z1"),), (Zone("z1"), Zone("z1"))), "zones.name", "z1"),
        (lambda: Cluster(SIA_GPU_TYPES, (Node("n", "aws", 4, "z9"),), (Zone("z1"),)), "node[n].zone", "z9"),
        (lambda: Cluster(SIA_GPU_TYPES + SIA_GPU_TYPES[:1], ()), "gpu_types.name", "aws"),
        (lambda: Cluster.from_counts(SIA_GPU_TYPES, {"aws": -4}), "counts['aws']", -4),
        (lambda: Cluster.from_counts(SIA_GPU_TYPES, {"tpu": 4}), "counts['tpu']", "tpu"),
        (lambda: preset("nope"), "cluster", "nope"),
        (lambda: preset("sia-64").gpu_type("h100"), "gpu_type", "h100"),
        (lambda: Cluster.from_dict({"gpu_types": []}), "nodes", None),
    ],
)
def test_bad_input_names_field_and_value(make, field: str, value: object) -> None:
    with pytest.raises(ClusterError) as info:
        make()
    assert info.value.field == field
    assert info.value.value == value
    assert field in str(info.value)
