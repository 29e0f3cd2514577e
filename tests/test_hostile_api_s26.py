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
    ([_node(Alive="false")], r"ray node abababab\.Alive='false'"),  # a truthy string: a live node
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


# -- the round executor's jobs, options and helpers ------------------------------------------

def _job(rt, **kw):
    rounds, _, _ = rt
    from heteroplan.runtime import TinyGPTTask

    return rounds.RuntimeJob(**{"job_id": "a", "task": TinyGPTTask(n_layers=1, dtype="float64"), "steps": 5,
                                "global_batch_size": 4} | kw)


def _cluster():
    from heteroplan.cluster import Cluster, GPUType

    return Cluster.from_counts((GPUType("cpu-a", 16, 2, 1.0),), {"cpu-a": 2}, name="local")


@pytest.mark.parametrize(("kwargs", "field"), [
    ({"task": "tiny"}, r"job\[a\]\.task"),  # was taken: failed in every rank at the first round
    ({"config": {"lr": 0.1}}, r"job\[a\]\.config"),  # was taken: a TypeError from dataclasses.replace at launch
    ({"adaptive_batch": "no"}, r"job\[a\]\.adaptive_batch"),  # a truthy string: adaptive batches on
    ({"application": 5}, r"job\[a\]\.application"),
    ({"arrival_time": math.inf}, r"job\[a\]\.arrival_time"),  # was taken: a job that never arrives
    ({"arrival_time": 10**400}, r"job\[a\]\.arrival_time"),  # was taken: an OverflowError in the executor
    ({"steps": 2.5}, r"job\[a\]\.steps"),  # still refused: counts take 5.0 and np.int64(5), not 2.5
])
def test_a_runtime_job_of_the_wrong_kind_is_named(rt, kwargs, field) -> None:
    with pytest.raises(InputError, match=f"^{field}="):
        _job(rt, **kwargs)


def test_a_runtime_job_takes_numpy_numbers(rt) -> None:
    """Steps, batch and GPU counts from numpy arrays (np.int64) were refused as 'must be an integer';
    np.float32 delays too. They are taken as Python numbers: the same job."""
    job = _job(rt, steps=np.int64(5), global_batch_size=np.int32(4), max_gpus=np.int64(8),
               arrival_time=np.float32(2), restart_delay_s=np.float32(1))
    assert job == _job(rt, arrival_time=2.0, restart_delay_s=1.0)
    assert (type(job.steps), type(job.arrival_time)) == (int, float)


@pytest.mark.parametrize(("kwargs", "field"), [
    ({"max_rounds": 2.5}, "max_rounds"),  # was taken: a TypeError from range() when run
    ({"max_rounds": -1}, "max_rounds"),  # was taken: a run of no rounds
    ({"max_rounds": "x"}, "max_rounds"),
    ({"progress": 5}, "progress"),  # was taken: a TypeError after the first round had trained
    ({"resume": "no"}, "resume"),  # a truthy string: the saved run resumed
    ({"workdir": 5}, "workdir"),  # a TypeError from pathlib
    ({"jobs": ["a"]}, "jobs"),  # AttributeError: 'str' object has no attribute 'job_id'
    ({"jobs": "ab"}, "jobs"),
])
def test_round_executor_options_of_the_wrong_kind_are_named(rt, tmp_path, kwargs, field) -> None:
    rounds, _, _ = rt
    args = {"cluster": _cluster(), "policy": "fifo", "jobs": [_job(rt)], "workdir": tmp_path} | kwargs
    with pytest.raises(InputError, match=f"^{field}="):
        rounds.RoundExecutor(**args)


def test_round_executor_refuses_a_workdir_that_is_a_file(rt, tmp_path) -> None:
    """Was a FileExistsError from pathlib when run() began."""
    rounds, _, _ = rt
    (tmp_path / "file").write_text("")
    with pytest.raises(InputError, match=r"^workdir=.*file.*is a file"):
        rounds.RoundExecutor(_cluster(), "fifo", [_job(rt)], tmp_path / "file")
    executor = rounds.RoundExecutor(_cluster(), "fifo", [_job(rt)], tmp_path / "file" / "below", max_rounds=np.int64(1))
    with pytest.raises(InputError, match=r"^workdir=.*below.*cannot create it"):  # a NotADirectoryError
        executor.run()
    assert executor.max_rounds == 1 and type(executor.max_rounds) is int


@pytest.mark.parametrize(("call", "field"), [
    (lambda r, t: r.data_parallel_plan("m", "4", 1, 2, "cpu-a"), "global_batch_size"),  # a TypeError from '>'
    (lambda r, t: r.data_parallel_plan("m", 4, 1.5, 2, "cpu-a"), "num_gpus"),
    (lambda r, t: r.measure_single_gpu(t, [2], steps=0), "steps"),  # a StatisticsError: no median of no data
    (lambda r, t: r.measure_single_gpu(t, [2], steps=1.5), "steps"),  # a TypeError from range()
    (lambda r, t: r.measure_single_gpu(t, 2), "local_batch_sizes"),  # 'int' object is not iterable
    (lambda r, t: r.measure_single_gpu(t, []), "local_batch_sizes"),  # was empty measurements
    (lambda r, t: r.measure_single_gpu(t, [2.5]), "local_batch_sizes"),  # was run at 2, recorded as 2.5
    (lambda r, t: r.measure_single_gpu(t, [2], config={"lr": 0.1}), "config"),  # AttributeError in make_optimizer
    (lambda r, t: r.measure_single_gpu("tiny", [2]), "task"),  # AttributeError: build_model
])
def test_round_helpers_name_an_argument_of_the_wrong_kind(rt, call, field) -> None:
    from heteroplan.runtime import TinyGPTTask

    rounds, _, _ = rt
    with pytest.raises(InputError, match=f"^{field}="):
        call(rounds, TinyGPTTask(n_layers=1, dtype="float64"))


def test_job_plan_names_an_allocation_and_progress_of_the_wrong_kind(rt) -> None:
    from heteroplan.policies.base import Allocation

    rounds, _, _ = rt
    with pytest.raises(InputError, match="^alloc='str'"):  # an AttributeError: num_gpus
        rounds.job_plan(_job(rt), "cpu-a", 1, 0.0)
    with pytest.raises(InputError, match="^progress=nan"):
        rounds.job_plan(_job(rt), Allocation("cpu-a", 2, (("cpu-a-0", 2),)), 1, math.nan)
    plan = rounds.data_parallel_plan("m", np.int64(7), np.int64(3), 1, "cpu-a")
    assert plan.microbatches() == (3, 2, 2) and plan == rounds.data_parallel_plan("m", 7, 3, 1, "cpu-a")


# -- the run configuration -------------------------------------------------------------------

@pytest.mark.parametrize(("kwargs", "field"), [
    ({"resume": "no"}, "resume"),  # a truthy string: the run resumed from its checkpoint
    ({"checkpoint_dir": 5}, "checkpoint_dir"),  # a TypeError from pathlib at launch
    ({"max_seconds": True}, "max_seconds"),  # was one second
    ({"max_seconds": 10**400}, "max_seconds"),  # an OverflowError in every rank
    ({"fault": ("exit", "x", 1)}, r"fault\[1\]"),  # a fault that never came: the test it serves passed
    ({"fault": ("hang", 0, -1)}, r"fault\[2\]"),
    ({"fault": ("exit", 1.5, 3)}, r"fault\[1\]"),
    ({"momentum": False}, "momentum"),  # was momentum 0
])
def test_run_config_fields_of_the_wrong_kind_are_named(rt, kwargs, field) -> None:
    _, config, _ = rt
    with pytest.raises(InputError, match=f"^config.{field}="):
        config.RunConfig(**kwargs)


def test_run_config_takes_numpy_numbers(rt, tmp_path) -> None:
    """``steps=np.int64(10)``, ``lr=np.float32(...)`` were refused ('must be an integer', 'must be a
    number'); they are taken as Python numbers, the same configuration."""
    _, config, _ = rt
    got = config.RunConfig(steps=np.int64(10), lr=np.float64(0.05), momentum=np.float32(0.5), threads_per_rank=np.int32(1),
                           checkpoint_every=np.int64(2), memory_step=np.int64(1), max_seconds=np.float32(2),
                           peak_tflops=np.float64(3), fault=("exit", np.int64(0), np.int64(3)), checkpoint_dir=tmp_path)
    want = config.RunConfig(steps=10, lr=0.05, momentum=0.5, checkpoint_every=2, memory_step=1, max_seconds=2.0,
                            peak_tflops=3.0, fault=("exit", 0, 3), checkpoint_dir=str(tmp_path))
    assert got == want
    assert {type(getattr(got, f)) for f in ("steps", "checkpoint_every", "memory_step")} == {int}
    assert {type(getattr(got, f)) for f in ("lr", "momentum", "max_seconds", "peak_tflops")} == {float}


# -- the sweep API, comparisons and workloads, from Python -----------------------------------

_SWEEP = {"workloads": [{"bundled": "philly/workload-1"}], "clusters": [{"preset": "sia-64"}],
          "policies": [{"name": "fifo"}], "jobs": 2, "max_hours": 0.5}


def test_parse_sweep_names_a_scale_beyond_a_float_and_a_base_that_is_no_path() -> None:
    from heteroplan.sim.sweep import parse_sweep

    with pytest.raises(InputError, match=r"^clusters\[0\]\.scale=1000.*must be a number > 0"):  # an OverflowError
        parse_sweep(_SWEEP | {"clusters": [{"preset": "sia-64", "scale": 10**400}]})
    with pytest.raises(InputError, match="^base=5: must be a path"):  # a TypeError from pathlib
        parse_sweep(_SWEEP, base=5)
    spec = parse_sweep(_SWEEP | {"clusters": [{"preset": "sia-64", "scale": np.float64(2)}]})
    assert spec.clusters[0].scale == 2.0


@pytest.mark.parametrize(("kwargs", "field"), [
    ({"progress": "no"}, "progress"),  # a truthy string: a progress bar
    ({"retry_failed": "no"}, "retry_failed"),  # truthy: failed cells rerun
    ({"plots": "no"}, "plots"),  # truthy: plots written
    ({"cell_fn": 5}, "cell_fn"),  # every cell stored as failed: "'int' object is not callable"
    ({"executor": 5}, "executor"),  # AttributeError: 'int' object has no attribute 'run'
    ({"out": 5}, "out"),  # TypeError from pathlib
    ({"sweep": 5}, "sweep"),
])
def test_run_sweep_names_an_argument_of_the_wrong_kind_before_any_cell(tmp_path, kwargs, field) -> None:
    from heteroplan.sim.sweep import run_sweep

    args = {"sweep": _SWEEP, "out": tmp_path / "out", "executor": "inprocess"} | kwargs
    with pytest.raises(InputError, match=f"^{field}="):
        run_sweep(**args)
    assert not (tmp_path / "out" / "cells").exists() or not any((tmp_path / "out" / "cells").iterdir())


def test_sweep_results_name_what_is_no_record_or_table(tmp_path) -> None:
    from heteroplan.sim.sweep import ResultStore, results_table, summarize

    (tmp_path / "f").write_text("")
    with pytest.raises(InputError, match="^records='.*f': must be cell records"):  # string indices must be integers
        results_table(str(tmp_path / "f"))
    with pytest.raises(InputError, match="^records=5"):
        results_table([5])
    with pytest.raises(InputError, match="^table='int'"):  # argument of type 'int' is not iterable
        summarize(5)
    with pytest.raises(InputError, match="^confidence='0.9'"):  # a TypeError from '<'
        summarize(results_table([]), confidence="0.9")
    with pytest.raises(InputError, match="^out=5: must be a path"):
        ResultStore(5)
    assert list(results_table([]).columns[:2]) == ["simulator", "workload"]


def test_comparisons_name_a_policy_string_and_results_of_the_wrong_kind() -> None:
    from heteroplan import bundled_workload, compare_policies, compare_table, preset

    jobs = bundled_workload()[:2]
    with pytest.raises(InputError, match="^policies='fifo': must be a list"):  # was the policies 'f', 'i', 'f', 'o'
        compare_policies(jobs, preset("sia-64"), "fifo")
    for results in (5, [5]):  # TypeError: 'int' object is not iterable; AttributeError: summary
        with pytest.raises(InputError, match="^results=5"):
            compare_table(results)
    header = compare_table([])  # no results: the header (was a TypeError from max())
    assert header.splitlines()[0].split()[:2] == ["policy", "finished"] and len(header.splitlines()) == 2


def test_workload_readers_name_a_path_that_is_no_path_and_an_overlong_seed() -> None:
    from heteroplan import bundled_workload, read_sia_workload

    with pytest.raises(InputError, match="^workload=5: must be a path"):  # a TypeError from pathlib
        read_sia_workload(5)
    with pytest.raises(InputError, match="^workload='newtrace/seed-9999.*unknown bundled workload"):  # int() refused 5000 digits
        bundled_workload("newtrace/seed-" + "9" * 5000)


# -- the MILP layer --------------------------------------------------------------------------

@pytest.mark.parametrize(("kwargs", "field"), [({"lb": math.inf}, "lb"), ({"ub": -math.inf}, "ub"),
                                               ({"lb": [0.0, math.inf]}, "lb")])
def test_matrix_rows_bounded_the_wrong_way_are_named(kwargs, field) -> None:
    """A row lower bound of +inf (or upper of -inf) was taken and HiGHS rejected the whole model at
    solve time (SolverError 'passModel error'); variables refused such bounds already."""
    from heteroplan.milp import Model
    from heteroplan.solvers import solve

    model = Model("t")
    model.continuous("x", 3, lb=0, ub=5)
    with pytest.raises(InputError, match=rf"^constraints\[r\]\.{field}=.*leaves no value"):
        model.add_matrix_constraints("r", np.ones((2, 3)), **{"lb": -math.inf, "ub": math.inf} | kwargs)
    model.add_matrix_constraints("r", np.ones((2, 3)), lb=-math.inf, ub=[1.0, math.inf])  # infinite on its own side
    model.maximize(model.variables["x"].sum())
    solution = solve(model)
    assert solution.objective == pytest.approx(1.0)
    with pytest.raises(InputError, match=r"^block=\['x'\]"):  # a TypeError: unhashable list
        solution[["x"]]


def test_ray_backend_refuses_bad_options_before_joining_ray(rt) -> None:
    """``cpus_per_rank=True`` was one CPU; ``gpu_types=5`` a TypeError from tuple() after Ray had
    been joined. Refused first (no Ray is started by this test)."""
    pytest.importorskip("ray", reason="Ray is optional: pip install 'heteroplan[ray]'")
    from heteroplan.runtime.ray_backend import RayBackend

    for kwargs, field in (({"cpus_per_rank": True}, "cpus_per_rank"), ({"gpu_types": 5}, "gpu_types"),
                          ({"type_labels": ["A100"]}, "type_labels")):
        with pytest.raises(InputError, match=f"^{field}="):
            RayBackend(address="127.0.0.1:1", **kwargs)


# -- the network topology --------------------------------------------------------------------

def test_topology_names_a_bandwidth_beyond_a_float_and_a_switch_named_like_a_node() -> None:
    import networkx as nx

    from heteroplan import preset
    from heteroplan.topology import Topology

    cluster = preset("sia-64")
    with pytest.raises(InputError, match="^intra_gbps=1000"):  # an OverflowError from float()
        Topology.from_cluster(cluster, intra_gbps=10**400)
    graph = nx.Graph()
    graph.add_node("a", kind="node", intra_gbps=10**400)
    with pytest.raises(InputError, match=r"^graph\.nodes\['a'\]\.intra_gbps=1000"):
        Topology.from_graph(graph)
    first = cluster.nodes[0].name
    with pytest.raises(InputError, match="^switch_of="):  # was taken: node `first` became a switch in the graph
        Topology.from_cluster(cluster, switch_of={n.name: first for n in cluster.nodes})
    with pytest.raises(InputError, match="^switch_of=5"):  # a TypeError: 'int' is not iterable
        Topology.from_cluster(cluster, switch_of=5)
    numpy_args = Topology.from_cluster(cluster, nodes_per_switch=np.int64(2), node_gbps=np.float32(100))
    assert numpy_args.graph.edges == Topology.from_cluster(cluster, nodes_per_switch=2).graph.edges


# -- the formulations, called directly -------------------------------------------------------

_T, _S, _CAP = np.array([[2.0, 1.0], [1.0, 3.0]]), np.ones(2), np.array([2.0, 2.0])


@pytest.mark.parametrize(("kwargs", "field"), [
    ({"throughputs": np.array([[1 + 1j, 1], [1, 1]])}, "throughputs"),  # was cast to 1.0 with a ComplexWarning
    ({"throughputs": np.array([["a", "b"], ["c", "d"]], object)}, "throughputs"),  # a ValueError from float()
    ({"capacity": "a"}, "capacity"),
    ({"capacity": np.array([np.inf, 1.0])}, "capacity"),  # was named 'constant' by the model
    ({"scale_factors": np.array([np.nan, 1.0])}, "scale_factors"),  # was 'job cannot run on any GPU type'
    ({"min_level": "x"}, "min_level"),  # a ValueError from float()
    ({"heterogeneity_aware": "no"}, "heterogeneity_aware"),  # taken as True
    ({"weights": ["a", "b"]}, "weights"),
])
def test_gavel_max_min_fairness_names_a_bad_array(kwargs, field) -> None:
    from heteroplan.formulations.gavel import max_min_fairness_model

    with pytest.raises(InputError, match=f"^{field}="):
        max_min_fairness_model(**{"throughputs": _T, "scale_factors": _S, "capacity": _CAP} | kwargs)


def test_gavel_finish_time_fairness_names_a_level_that_is_no_number() -> None:
    from heteroplan.formulations.gavel import finish_time_fairness_model
    from heteroplan.solvers import solve

    args = {"throughputs": _T, "scale_factors": _S, "capacity": _CAP, "remaining_steps": [10.0, 10.0],
            "isolated_time": [5.0, 5.0]}
    with pytest.raises(InputError, match="^rho='x'"):  # a TypeError from np.isfinite
        finish_time_fairness_model(**args, rho="x")
    assert solve(finish_time_fairness_model(**args, rho=np.float32(1))).objective == pytest.approx(5.0)


def _hadar(**kw):
    from heteroplan.formulations.hadar import HadarInstance

    return HadarInstance(**{"arrival": np.array([0, 0]), "tasks": np.array([1, 2]), "steps": np.array([100.0, 100.0]),
                            "rates": np.array([[1.0, 2.0], [1.0, 1.0]]), "capacity": np.array([2, 2]),
                            "node_type": np.array([0, 1]), "slots": 4, "slot": 360.0} | kw)


@pytest.mark.parametrize(("kwargs", "field"), [
    ({"arrival": np.array([np.nan, 0])}, "arrival"),  # the instance was taken; the job never lived
    ({"arrival": np.array([-1, 0])}, "arrival"),
    ({"tasks": np.array([0, 1])}, "tasks"),  # a job of no tasks: finished for free
    ({"tasks": np.array([1.5, 1])}, "tasks"),
    ({"steps": np.array([np.nan, 1.0])}, "steps"),  # was named 'constant' by the model
    ({"rates": np.array([[np.nan, 1.0], [1.0, 1.0]])}, "rates"),
    ({"capacity": np.array([1.5, 2])}, "capacity"),  # 1.5 GPUs on a node
    ({"node_type": np.array([0.0, 1.0])}, "node_type"),  # a TypeError from np.bincount
    ({"slots": 2.5}, "slots"),  # was 'utility.shape=(2, 3): must be (2, 2)'
    ({"slots": 10**7}, "slots"),  # dense slots x slots blocks: no answer
    ({"slot": math.nan}, "slot"),
])
def test_hadar_instance_names_a_bad_array(kwargs, field) -> None:
    with pytest.raises(InputError, match=rf"^instance\.{field}="):
        _hadar(**kwargs)


def test_hadar_instance_and_bound_still_take_what_they_took() -> None:
    from heteroplan.formulations.hadar import hadar_milp, makespan_bound_lp
    from heteroplan.solvers import solve

    assert solve(hadar_milp(_hadar(slots=np.int64(4)))).objective == pytest.approx(2.0)
    args = {"work": np.array([10.0, 10.0]), "rates": np.array([[1.0, 2.0], [1.0, 1.0]]), "tasks": np.array([1, 1]),
            "capacity": np.array([2, 2])}
    assert solve(makespan_bound_lp(**args)).objective == pytest.approx(3.75)
    for name, value in (("work", np.array([-1.0, 1.0])), ("tasks", np.array([0, 1]))):  # a bound below every schedule
        with pytest.raises(InputError, match=f"^{name}="):
            makespan_bound_lp(**args | {name: value})


def _sia_args():
    from heteroplan import preset
    from heteroplan.formulations.sia import ConfigSet

    cluster = preset("sia-64")
    configs = ConfigSet.from_cluster(cluster)
    return {"goodput": np.ones((2, len(configs))), "configs": configs,
            "capacity": [cluster.capacity()[t] for t in cluster.type_names]}


@pytest.mark.parametrize(("kwargs", "field"), [
    ({"current": np.array([0, 10**6])}, "current"),  # was taken: a configuration that does not exist
    ({"current": np.array([np.nan, 0.0])}, "current"),  # cast to a garbage index with a RuntimeWarning
    ({"current": np.array([0.5, 0.0])}, "current"),  # cast to configuration 0
    ({"current": np.array([0])}, r"current\.shape"),  # an IndexError
    ({"restart": np.array([np.nan, 1.0])}, "restart"),  # silently dropped every other configuration
    ({"restart": np.ones(3)}, r"restart\.shape"),
    ({"pinned": "x"}, r"pinned\.shape"),  # cast to True: every running job pinned
    ({"pinned": np.array([5, 0])}, "pinned"),
    ({"goodput": np.ones((2, 19)) * (1 + 0j)}, "goodput"),  # was cast with a ComplexWarning
    ({"capacity": "a"}, "capacity"),  # a ValueError from float()
    ({"configs": "x"}, "configs"),  # was named as a goodput of the wrong shape
])
def test_sia_model_names_job_state_of_the_wrong_kind(kwargs, field) -> None:
    from heteroplan.formulations.sia import build_sia_model

    with pytest.raises(InputError, match=f"^{field}="):
        build_sia_model(**_sia_args() | kwargs)


def test_sia_model_takes_the_job_state_policies_give() -> None:
    """Integer configuration indices, factors in [0, 1] and booleans (lists too) build the same model."""
    from heteroplan.formulations.sia import ConfigSet, build_sia_model
    from heteroplan.solvers import solve

    args = _sia_args()
    as_lists = build_sia_model(**args, current=[0, -1], restart=[0.5, 1], pinned=[False, False])
    as_arrays = build_sia_model(**args, current=np.array([0, -1]), restart=np.array([0.5, 1.0]),
                                pinned=np.zeros(2, dtype=bool))
    assert solve(as_lists.model).objective == pytest.approx(solve(as_arrays.model).objective)
    with pytest.raises(InputError, match="^max_gpus='x'"):  # a TypeError from '<='
        ConfigSet.from_cluster(_sia_cluster(), max_gpus="x")
    assert args["configs"].index_of("aws", math.nan) == -1  # was a ValueError from int()


def _sia_cluster():
    from heteroplan import preset

    return preset("sia-64")


def _kind(**kw):
    from heteroplan.formulations.sailor import ReplicaKind

    return ReplicaKind(**{"gpu_type": "A", "zone": "z", "tp": 1, "pp": 2, "mbs": 1, "samples_per_s": 10.0,
                          "price_per_s": 0.01} | kw)


@pytest.mark.parametrize(("kwargs", "field"), [
    ({"tp": 0}, r"kind\.tp"),  # a division by zero: an infeasible model
    ({"pp": 1.5}, r"kind\.pp"),  # 3 GPUs a replica: taken
    ({"samples_per_s": -1.0}, r"kind\.samples_per_s"),  # a negative throughput: taken
    ({"price_per_s": math.nan}, r"kind\.price_per_s"),  # taken: the cost objective NaN
])
def test_sailor_replica_kinds_of_the_wrong_kind_are_named(kwargs, field) -> None:
    with pytest.raises(InputError, match=f"^{field}="):
        _kind(**kwargs)


@pytest.mark.parametrize(("kwargs", "field"), [
    ({"pool": {}}, "pool"),  # a KeyError
    ({"pool": {("A", "z"): 1.5}}, "pool"),  # 1.5 GPUs: taken
    ({"gbs": "64"}, "gbs"),  # a TypeError from numpy
    ({"kinds": ["x"]}, "kinds"),  # an AttributeError
    ({"budget": math.nan}, "budget"),  # was named 'constant' by the model
])
def test_sailor_resource_model_names_a_bad_argument(kwargs, field) -> None:
    from heteroplan.formulations.sailor import build_resource_model
    from heteroplan.solvers import solve

    args = {"kinds": [_kind()], "pool": {("A", "z"): 8}, "gbs": 64}
    with pytest.raises(InputError, match=f"^{field}="):
        build_resource_model(**args | kwargs)
    assert solve(build_resource_model(**args | {"gbs": np.int64(64)})).objective == pytest.approx(0.625)


# -- the profiler and the FLOP counter -------------------------------------------------------

@pytest.mark.parametrize(("kwargs", "field"), [
    ({"repeats": 10**12}, "repeats"),  # a profile that never answered
    ({"warmup": 10**12}, "warmup"),
    ({"sweeps": 1001}, "sweeps"),  # the command line takes at most 1000 already
    ({"time_recomputed": "no"}, "time_recomputed"),  # taken as True: recomputation timed
])
def test_profile_layers_refuses_endless_or_misread_options(rt, kwargs, field) -> None:
    import torch

    from heteroplan.runtime.profiler import profile_layers

    model = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.Linear(4, 2))
    with pytest.raises(InputError, match=f"^{field}="):
        profile_layers(model, lambda b: torch.randn(b, 4), (1, 2), **{"warmup": 0, "repeats": 1} | kwargs)


def test_forward_flops_names_what_is_no_callable(rt) -> None:
    import torch

    from heteroplan.runtime.flops import forward_flops

    layer = torch.nn.Linear(4, 2, bias=False)
    with pytest.raises(InputError, match="^fn='Tensor'"):  # a TypeError from inside torch's counter
        forward_flops(layer(torch.randn(3, 4)))
    assert forward_flops(lambda: layer(torch.randn(3, 4))) == 2 * 3 * 4 * 2


def test_solve_takes_numpy_options_as_numbers() -> None:
    """``time_limit=np.float32(10)`` and ``threads=np.int64(1)`` (read from arrays) were refused as
    'must be a positive number' / 'a positive integer'; taken, every backend gets Python numbers."""
    from heteroplan.milp import Model
    from heteroplan.solvers import solve
    from heteroplan.solvers.registry import SolveOptions

    model = Model("t")
    x = model.continuous("x", 3, lb=0, ub=5)
    model.maximize(x.sum())
    assert solve(model, time_limit=np.float32(10), mip_gap=np.float64(0.1), threads=np.int64(1)).objective == 15.0
    options = SolveOptions(np.float32(10), np.float64(0.1), np.int64(1))
    assert (type(options.time_limit), type(options.mip_gap), type(options.threads)) == (float, float, int)
    with pytest.raises(InputError, match="^threads=True"):
        SolveOptions(threads=True)


def test_a_cell_made_by_hand_names_its_job_count_and_seed() -> None:
    """``replace(cell, jobs=2.5)`` failed inside the cell with a TypeError from slicing the workload."""
    import dataclasses

    from heteroplan.sim.sweep import parse_sweep

    cell = parse_sweep(_SWEEP).cells()[0]
    for field, value in (("jobs", 2.5), ("jobs", 0), ("seed", -1), ("seed", "x")):
        with pytest.raises(InputError, match=f"^{field}="):
            dataclasses.replace(cell, **{field: value})
    assert dataclasses.replace(cell, jobs=np.int64(2), seed=np.int64(0)).key == cell.key


def test_a_policy_object_with_a_flag_of_the_wrong_kind_is_named(rt, tmp_path) -> None:
    """A policy with only ``allocate`` gets the loop's defaults; its own ``elastic = "no"`` was taken
    as True (jobs rescaled)."""
    rounds, _, _ = rt

    class Mine:
        elastic = "no"

        def allocate(self, cluster, jobs, now):
            return {}

    with pytest.raises(InputError, match="^policy.elastic='no'"):
        rounds.RoundExecutor(_cluster(), Mine(), [_job(rt)], tmp_path)
    Mine.elastic = np.bool_(False)
    assert rounds.RoundExecutor(_cluster(), Mine(), [_job(rt)], tmp_path).policy.elastic is False


def test_topology_queries_name_a_group_that_is_no_list_of_nodes() -> None:
    from heteroplan import preset
    from heteroplan.topology import Topology

    topology = Topology.from_cluster(preset("sia-64"))
    node = topology.machines[0]
    with pytest.raises(InputError, match="^group_a="):  # a name alone was read as its characters
        topology.bandwidth(node)
    with pytest.raises(InputError, match="^group_b=5"):  # a TypeError: 'int' is not iterable
        topology.bandwidth([node], 5)
    with pytest.raises(InputError, match=r"^node=\["):  # a TypeError: unhashable list
        topology.switch_of([node])
    assert topology.bandwidth([node]) == topology.path_bandwidth(node, node)


# -- the training entry points ---------------------------------------------------------------

@pytest.mark.parametrize(("kwargs", "field"), [
    ({"n_layers": 0}, "n_layers"),  # was taken: failed in every rank that built the model
    ({"dtype": "x"}, "dtype"),
    ({"vocab": math.nan}, "vocab"),
    ({"n_heads": 3}, "d_model"),  # 32 is no multiple of 3 heads
    ({"seed": 0.5}, "seed"),  # torch.manual_seed refused it in the rank
])
def test_tiny_gpt_task_is_checked_when_made(rt, kwargs, field) -> None:
    from heteroplan.runtime import TinyGPTTask

    with pytest.raises(InputError, match=f"^{field}="):
        TinyGPTTask(**kwargs)


def test_tiny_gpt_task_takes_numpy_sizes(rt) -> None:
    from heteroplan.runtime import TinyGPTTask

    task = TinyGPTTask(seq_len=np.int64(16), n_layers=np.int32(1), seed=np.int64(3))
    assert task == TinyGPTTask(seq_len=16, n_layers=1, seed=3) and type(task.seq_len) is int


def test_training_entry_points_name_an_argument_of_the_wrong_kind(rt, tmp_path) -> None:
    from heteroplan.runtime import (
        RunConfig,
        TinyGPTTask,
        latest_checkpoint,
        run_plan,
        train_reference,
    )

    rounds, _, _ = rt
    task = TinyGPTTask(n_layers=1, dtype="float64")
    with pytest.raises(InputError, match="^task='str'"):  # an AttributeError: build_model
        train_reference("tiny", 4, RunConfig(steps=1))
    with pytest.raises(InputError, match="^config='dict'"):  # an AttributeError in make_optimizer
        train_reference(task, 4, {"steps": 1})
    with pytest.raises(InputError, match="^checkpoint_dir=5"):  # a TypeError from pathlib
        latest_checkpoint(5)
    with pytest.raises(InputError, match="^progress='int'"):  # a TypeError mid-run, the ranks left unwatched
        run_plan(rounds.data_parallel_plan("m", 4, 1, 3, "cpu"), task, RunConfig(steps=1), progress=5)
    assert latest_checkpoint(tmp_path) is None


# -- the lead's additions: registry, seconds, paths -----------------------------------------------

def test_register_policy_checks_what_it_stores_and_make_policy_what_the_factory_returns() -> None:
    from heteroplan.policies.registry import POLICIES, make_policy, register_policy

    with pytest.raises(InputError, match="summary"):  # was stored as is
        register_policy("s26-summary", lambda **options: make_policy("fifo"), summary=5)
    with pytest.raises(InputError, match="restart_delay_s"):  # was refused only by make_policy
        register_policy("s26-delay", lambda **options: make_policy("fifo"), restart_delay_s=math.nan)
    assert "s26-summary" not in POLICIES and "s26-delay" not in POLICIES
    register_policy("s26-five", lambda **options: 5)
    try:
        with pytest.raises(InputError, match=r"policy\[s26-five\].*returned no policy"):  # make_policy returned 5
            make_policy("s26-five")
    finally:
        POLICIES._added.pop("s26-five")


def test_seconds_and_waits_take_numpy_numbers_and_readers_name_a_path_that_is_none() -> None:
    from heteroplan.errors import check_seconds
    from heteroplan.inputs import check_wait, read_text

    assert check_seconds("round_length", np.float32(2.5)) == 2.5 and type(check_wait("timeout", np.int64(5))) is float
    for bad in (np.float32("nan"), np.bool_(True), -np.float64(1)):
        with pytest.raises(InputError, match="round_length"):
            check_seconds("round_length", bad)
    with pytest.raises(InputError, match="cluster=5: must be a path"):  # was a TypeError from pathlib
        read_text(5, "cluster")
