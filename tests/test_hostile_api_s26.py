"""Hostile inputs to the Python API (session 26): the round executor and its Ray cluster reader, the
run configuration, the sweep API and the MILP layer. Each bad value must raise :class:`InputError`
naming the field and the value, never an exception from inside the standard library, numpy, HiGHS,
torch or a rank process, and never be taken silently; numpy numbers are numbers."""

from __future__ import annotations

import math

import numpy as np
import pytest

from heteroplan.errors import InputError

TORCH_REASON = ("the runtime tests need torch: pip install torch==2.13.0 "
                "(CPU wheel: --index-url https://download.pytorch.org/whl/cpu)")


@pytest.fixture
def rt():
    """The runtime modules (``heteroplan.runtime`` imports torch), or the test is skipped."""
    pytest.importorskip("torch", reason=TORCH_REASON)
    from heteroplan.runtime import config, ray_cluster, rounds
    return rounds, config, ray_cluster


# -- the Ray cluster's node records (plain dicts: no Ray started) ----------------------------

def _node(**kw):
    node = {"NodeID": "ab" * 28, "Alive": True, "Resources": {"GPU": 2.0, "CPU": 8.0, "accelerator_type:A100": 1.0}}
    return node | kw


def _gpus(value):
    return _node(Resources={"GPU": value, "CPU": 8.0, "accelerator_type:A100": 1.0})


@pytest.mark.parametrize(("nodes", "field"), [
    ([_gpus(math.nan)], r"ray node abababab\.Resources\.GPU=nan"),  # was a ValueError from int()
    ([_gpus(math.inf)], r"ray node abababab\.Resources\.GPU=inf"),  # an OverflowError
    ([_gpus("2")], r"ray node abababab\.Resources\.GPU='2'"),  # taken by int('2'); 'x' was a ValueError
    ([_gpus(1.5)], r"ray node abababab\.Resources\.GPU=1\.5"),  # was taken as 1 GPU
    ([_gpus(-2.0)], r"ray node abababab\.Resources\.GPU=-2\.0"),  # was 'no GPU nodes'
    ([_node(Resources={"GPU": 2.0, "CPU": math.nan, "accelerator_type:A100": 1.0})],
     r"ray node abababab\.Resources\.CPU=nan"),  # was taken: cpus_per_rank reads it
    ([{"Alive": True, "Resources": {"GPU": 1.0, "accelerator_type:A100": 1.0}}], r"ray node\.NodeID=None"),  # KeyError
    ([_node(NodeID=12345)], r"ray node\.NodeID=12345"),  # was taken, named 'A100-12345'
    ([_node(Labels=["a"])], r"ray node abababab\.Labels=\['a'\]"),  # AttributeError: 'list' ... 'get'
    ([_node(Resources=["GPU"])], r"ray node abababab\.Resources=\['GPU'\]"),
    ({"node": _node()}, r"ray nodes='dict'"),  # its keys were read as nodes: AttributeError
    (["node"], r"ray nodes='node'"),
])
def test_ray_node_records_that_are_no_records_are_named(rt, nodes, field) -> None:
    _, _, ray_cluster = rt
    with pytest.raises(InputError, match=f"^{field}: "):
        ray_cluster.nodes_from_ray_state(nodes)


@pytest.mark.parametrize(("kwargs", "field"), [
    ({"gpu_types": ["A100"]}, "gpu_types"),  # was AttributeError: 'str' object has no attribute 'name'
    ({"type_labels": ["A100"]}, "type_labels"),  # was a ValueError from dict()
    ({"type_labels": {"A100": 5}}, "type_labels"),
])
def test_ray_reader_options_of_the_wrong_kind_are_named(rt, kwargs, field) -> None:
    _, _, ray_cluster = rt
    with pytest.raises(InputError, match=f"^{field}="):
        ray_cluster.nodes_from_ray_state([_node()], **kwargs)


def test_ray_records_ray_writes_still_read_the_same(rt) -> None:
    """Dead nodes are skipped unread (an empty record was an AttributeError), numpy amounts are amounts, a
    CPU-only head is left out: the cluster of the live GPU nodes, as before."""
    _, _, ray_cluster = rt
    head = {"NodeID": "cd" * 28, "Alive": True, "Resources": {"CPU": 4.0}}
    dead = {"Alive": False, "Resources": None}
    nodes = ray_cluster.nodes_from_ray_state([head, dead, _gpus(np.float64(2)), _node(NodeID="ef" * 28)])
    assert nodes.cluster.capacity() == {"A100": 4}
    assert sorted(nodes.cpus.values()) == [8.0, 8.0] and nodes.node_ids["A100-abababab"] == "ab" * 28
