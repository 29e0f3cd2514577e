"""Numbers computed with numpy (``np.float32`` prices from an array, ``np.int64`` counts) are taken
where a Python number is, and stored as the Python ``float`` / ``int`` they equal, so that a saved
cluster, job or config never holds a numpy scalar (``json.dumps`` refuses ``np.float32``)."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from heteroplan.cluster import Cluster, GPUType, Node
from heteroplan.errors import ClusterError, InputError
from heteroplan.inputs import finite_number
from heteroplan.perf.goodput import ThroughputTable
from heteroplan.policies.registry import make_policy
from heteroplan.sim.modelled import ModelledJob, simulate_modelled

NUMPY_REALS = [np.float32(2.5), np.float16(2.5), np.int64(3), np.int8(3), np.float64(2.5), np.uint16(3)]


@pytest.mark.parametrize("value", NUMPY_REALS)
def test_finite_number_takes_numpy_reals_as_the_float_they_equal(value) -> None:
    out = finite_number("x", value, low=0)
    assert type(out) is float and out == float(value)


@pytest.mark.parametrize("value", [True, np.bool_(True), "2", None, np.float32("nan"), np.float32("inf"),
                                   np.array(2.0), [2.0], complex(2, 0)])
def test_finite_number_still_refuses_what_is_no_finite_real(value) -> None:
    with pytest.raises(InputError) as err:
        finite_number("x", value)
    assert err.value.field == "x"


def test_a_cluster_built_from_numpy_numbers_saves_and_loads_as_python_numbers() -> None:
    prices = np.array([1.5, 0.25], dtype=np.float32)
    types = (GPUType("a", np.float32(40), np.int64(8), price_per_hour=prices[0], peak_tflops_bf16=np.float32(312)),
             GPUType("b", 16.0, 4, price_per_hour=prices[1]))
    cluster = Cluster(types, (Node("n0", "a", np.int64(8)), Node("n1", "b", np.int32(4))))
    a = cluster.gpu_types[0]
    assert type(a.price_per_hour) is float and a.price_per_hour == 1.5
    assert type(a.gpus_per_node) is int and type(a.memory_gb) is float and type(a.peak_tflops_bf16) is float
    assert all(type(n.num_gpus) is int for n in cluster.nodes)
    text = json.dumps(cluster.to_dict())  # raised TypeError on a numpy scalar
    assert Cluster.from_dict(json.loads(text)).to_dict() == cluster.to_dict()


def test_cluster_numbers_are_still_checked() -> None:
    with pytest.raises(ClusterError, match=r"price_per_hour"):
        GPUType("a", 40.0, 8, price_per_hour=np.float32(-1))
    with pytest.raises(ClusterError, match=r"gpus_per_node"):
        GPUType("a", 40.0, np.float32(8.5))
    with pytest.raises(ClusterError, match=r"memory_gb"):
        GPUType("a", np.float64(0.0), 8)


def test_modelled_jobs_and_rate_tables_take_numpy_numbers_and_give_the_same_schedule() -> None:
    """The hand-computed FIFO schedule of tests/test_sim_modelled.py, from numpy inputs."""
    cluster = Cluster.from_counts((GPUType("fast", 16, 1),), {"fast": 1})
    table = ThroughputTable({"fast": np.float32(10.0)})
    jobs = [ModelledJob("a", np.float32(0.0), table, np.int64(400), restart_delay_s=np.float32(5.0)),
            ModelledJob("b", np.int64(10), table, np.float32(100.0), restart_delay_s=5.0)]
    assert all(type(v) is float for j in jobs for v in (j.arrival_time, j.total_work, j.restart_delay_s))
    assert type(table.rates["fast"]) is float
    records = {r.job_id: r for r in simulate_modelled(cluster, make_policy("fifo"), jobs, 30.0)}
    assert records["a"].finish_time == pytest.approx(45.0) and records["b"].finish_time == pytest.approx(75.0)
    with pytest.raises(InputError, match=r"rates\[fast\]"):
        ThroughputTable({"fast": np.float32(-1)})


def test_run_config_and_emulation_store_python_floats() -> None:
    pytest.importorskip("torch", reason="heteroplan.runtime needs torch: pip install torch==2.13.0")
    from heteroplan.runtime.config import RunConfig, StepEmulation

    config = RunConfig(lr=np.float32(0.5))
    assert type(config.lr) is float and config.lr == 0.5
    emulation = StepEmulation({"a": np.float32(0.25)}, overhead_s=np.int64(1))
    assert type(emulation.seconds_per_sample["a"]) is float and type(emulation.overhead_s) is float
    assert math.isclose(emulation.seconds_per_sample["a"], 0.25)
    with pytest.raises(InputError, match="config.lr"):
        RunConfig(lr=np.float32("nan"))
