"""Audit (issue 36): the Python API refuses, where the input enters, what the CLI refuses, and
warns where the solver would silently read a model differently from how it was written."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from heteroplan.errors import InputError, ModelError, ModelWarning
from heteroplan.milp import Model
from heteroplan.planner.model.sim_config import SimConfig, load_platforms
from heteroplan.planner.plan import Plan
from heteroplan.planner.request import SearchOptions
from heteroplan.workload.sia import JobSpec

PLAN = {"model": "m", "global_batch_size": 8, "microbatch_size": 1,
        "stages": [{"first_layer": 0, "last_layer": 4, "replicas": [{"gpu_type": "a", "zone": "z", "tp": 1}]}]}


# ------------------------------------------------------------------ planner
@pytest.mark.parametrize(("options", "field"), [
    ({"max_pp": 0}, "max_pp"), ({"max_blocks": 0}, "max_blocks"), ({"max_blocks": 4}, "max_blocks"),
    ({"patience": -1}, "patience"), ({"microbatch_sizes": (4, 0)}, "microbatch_sizes"), ({"prune": "no"}, "prune"),
])
def test_search_options_are_refused_as_the_cli_refuses_them(options, field) -> None:
    with pytest.raises(InputError, match=field):
        SearchOptions(**options)


def test_plan_job_refuses_a_budget_it_would_ignore() -> None:
    from heteroplan.planner.api import plan_job

    with pytest.raises(InputError, match="budget"):
        plan_job("OPT-350", 64, {("A100-40", "us-central1-a"): 8}, objective="cost", budget=5.0)
    with pytest.raises(InputError, match="min_throughput"):
        plan_job("OPT-350", 64, {("A100-40", "us-central1-a"): 8}, objective="throughput", min_throughput=1.0)
    with pytest.raises(InputError, match="budget"):
        plan_job("OPT-350", 64, {("A100-40", "us-central1-a"): 8}, budget=math.inf)


def test_a_typo_in_a_plan_key_is_an_error_naming_it() -> None:
    with pytest.raises(InputError, match="microbatches_per_replicas"):
        Plan.from_dict(PLAN | {"microbatches_per_replicas": [8]})
    stages = [PLAN["stages"][0] | {"lastlayer": 4}]
    with pytest.raises(InputError, match="lastlayer"):
        Plan.from_dict(PLAN | {"stages": stages})
    assert Plan.from_dict(PLAN).global_batch_size == 8


@pytest.mark.parametrize("name", ["overhead_gb", "working_layers", "bytes_per_param", "logits_factor"])
def test_negative_memory_or_time_constants_are_refused(tmp_path, name) -> None:
    with pytest.raises(InputError, match=name):
        SimConfig(**{name: -1.0})
    (tmp_path / "sim_config.json").write_text(json.dumps({name: -4.5}))
    with pytest.raises(InputError, match=name):
        load_platforms(tmp_path)


# ------------------------------------------------------------------ solver models
def small_model(coefficient: float = 1.0, ub: float = 10.0) -> Model:
    m = Model("small")
    x = m.add_variables("x", 3, ub=ub, integer=True)
    m.add_constraints(x * coefficient <= 5, "cap")
    m.maximize(x.sum())
    return m


def test_relax_must_be_a_boolean() -> None:
    from heteroplan.solvers import solve

    with pytest.raises(ModelError, match="relax"):
        solve(small_model(), relax="no")


def test_a_billion_threads_is_refused_before_highs_allocates_them() -> None:
    from heteroplan.solvers import solve

    with pytest.raises(ModelError, match="threads"):
        solve(small_model(), threads=10**9)


@pytest.mark.parametrize(("bounds", "field"), [({"lb": math.inf}, "lb"), ({"ub": -math.inf}, "ub"),
                                               ({"lb": "zero"}, "lb"), ({"ub": ["a", "b"]}, "ub")])
def test_variable_bounds_that_leave_no_value_or_are_not_numbers(bounds, field) -> None:
    with pytest.raises(ModelError, match=f"variables\\[x\\].{field}"):
        Model().add_variables("x", 2, **bounds)


def test_coefficients_and_bounds_highs_would_change_are_warned() -> None:
    from heteroplan.solvers import solve

    with pytest.warns(ModelWarning, match="treats them as 0"):
        sol = solve(small_model(coefficient=1e-10))
    assert sol.objective == pytest.approx(30)  # HiGHS dropped the constraint: x at its bound 10
    with pytest.warns(ModelWarning, match="infinite"):
        solve(small_model(ub=1e30))


# ------------------------------------------------------------------ simulations
@pytest.mark.parametrize(("kwargs", "field"), [
    ({"arrival_time": math.nan}, "arrival_time"), ({"arrival_time": -1.0}, "arrival_time"),
    ({"num_replicas": 0}, "num_replicas"), ({"num_replicas": 2.5}, "num_replicas"),
    ({"batch_size": 0}, "batch_size"), ({"name": ""}, "name"),
])
def test_job_specs_are_checked_when_built(kwargs, field) -> None:
    with pytest.raises(InputError, match=field):
        JobSpec(**({"name": "j", "arrival_time": 0.0, "application": "cifar10", "num_replicas": 1,
                    "batch_size": 128} | kwargs))
    assert JobSpec("j", np.float64(3.0), "cifar10", np.int64(2), 128).num_replicas == 2


def test_simulate_needs_a_cluster_object() -> None:
    from heteroplan.policies.registry import make_policy
    from heteroplan.sim.loop import simulate

    with pytest.raises(InputError, match="cluster='x'"):
        simulate([JobSpec("j", 0.0, "cifar10", 1, 128)], "x", make_policy("fifo"), progress=False)


# ------------------------------------------------------------------ the second pass over the API
def test_more_api_inputs_are_clear_errors() -> None:
    from heteroplan.cluster import Cluster, preset
    from heteroplan.policies.registry import make_policy
    from heteroplan.sim.loop import simulate
    from heteroplan.sim.sweep import parse_sweep
    from heteroplan.workload.gavel import generate_workload

    with pytest.raises(InputError, match="counts"):
        Cluster.from_dict({"gpu_types": [{"name": "a", "memory_gb": 16, "gpus_per_node": 4}], "counts": {1: 4}})
    with pytest.raises(ModelError, match="32-bit"):
        Model().add_variables("x", 10**12)  # was a MemoryError for 7 TiB
    with pytest.raises(InputError, match="lam"):
        make_policy("sia", lam=math.nan)
    with pytest.raises(InputError, match="p="):
        make_policy("sia", p="x")
    with pytest.raises(InputError, match="max_time"):
        simulate([JobSpec("j", 0.0, "cifar10", 1, 128)], preset("sia-64"), make_policy("fifo"), max_time="1",
                 progress=False)
    with pytest.raises(InputError, match="num_jobs"):
        generate_workload("2", 1.0)
    with pytest.raises(InputError, match="duration_scale"):
        generate_workload(2, 1.0, duration_scale=math.inf)
    with pytest.raises(InputError, match="seeds"):
        parse_sweep({"seeds": [-1], "workloads": [{"bundled": "philly/workload-1"}],
                     "clusters": [{"preset": "sia-64"}], "policies": [{"name": "fifo"}]})


@pytest.mark.parametrize("round_length", [0.001, 9.99])
def test_simulate_refuses_rounds_shorter_than_a_scheduling_round(round_length) -> None:
    """``simulate(round_length=0.001)`` used to loop for ~10^8 rounds; the API now refuses it as
    the CLI's ``--round`` and sweep files do."""
    from heteroplan.cluster import preset
    from heteroplan.sim.compare import make_policy
    from heteroplan.sim.loop import simulate
    from heteroplan.workload.sia import bundled_workload

    jobs = bundled_workload("philly/workload-1")[:2]
    with pytest.raises(InputError, match="round_length"):
        simulate(jobs, preset("sia-64"), make_policy("fifo"), round_length=round_length)
