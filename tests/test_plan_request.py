"""PlanRequest: one frozen, validated request behind plan_job, plan, the baselines and the CLI."""

from __future__ import annotations

import dataclasses
import math

import pytest

from heteroplan.errors import InputError
from heteroplan.planner import PlanRequest, SearchOptions, plan_job
from heteroplan.planner.api import plan
from heteroplan.planner.goal import Goal, Objective

A, Z = "A100-40", "us-central1-a"


def test_goal_is_checked_when_made_and_names_the_field() -> None:
    for kwargs, field in (
        ({"objective": "speed"}, "objective"),
        ({"budget": -1.0}, "budget"),
        ({"budget": math.inf}, "budget"),
        ({"min_throughput": True}, "min_throughput"),
        ({"objective": "cost", "budget": 1.0}, "budget"),  # a bound the objective would ignore
        ({"min_throughput": 1.0}, "min_throughput"),
    ):
        with pytest.raises(InputError, match=f"^{field}="):
            Goal(**kwargs)
        with pytest.raises(InputError, match=f"^{field}="):  # plan_job's arguments, before any loading
            plan_job("no-such-model", 64, {(A, Z): 8}, **kwargs)
    assert Goal("cost", min_throughput=2).objective is Objective.COST


def test_build_validates_before_loading_and_names_the_field() -> None:
    with pytest.raises(InputError, match="^objective=.*speed"):
        PlanRequest.build("no-such-model", 64, {(A, Z): 8}, "speed")  # the model is never loaded
    with pytest.raises(InputError, match="^goal="):
        PlanRequest.build("no-such-model", 64, {(A, Z): 8}, 3.0)
    with pytest.raises(InputError, match="gbs"):
        PlanRequest.build("OPT-350", 0, {(A, Z): 8})
    # a batch no plan file holds (it would be planned, written and refused by `run --plan`)
    with pytest.raises(InputError, match=r"gbs=.*at most 100,000,000 samples"):
        PlanRequest.build("no-such-model", 10**23, {(A, Z): 8})
    with pytest.raises(InputError, match="pool.gpu_type"):
        PlanRequest.build("OPT-350", 64, {("H900", Z): 8})


def test_request_is_frozen_and_variants_are_validated() -> None:
    request = PlanRequest.build("OPT-350", 64, {(A, Z): 8, ("V100-16", Z): 0})
    assert dict(request.pool) == {(A, Z): 8}  # empty pools dropped
    with pytest.raises(dataclasses.FrozenInstanceError):
        request.gbs = 128  # type: ignore[misc]
    with pytest.raises(InputError, match="^goal="):
        dataclasses.replace(request, goal="cost")
    with pytest.raises(InputError, match="^budget="):
        dataclasses.replace(request.goal, budget=0.0)
    capped = dataclasses.replace(request, goal=Goal("throughput", budget=1.0))
    assert capped.goal.budget == 1.0 and capped.pool == request.pool
    cost = capped.unconstrained("cost")
    assert (cost.goal, cost.pool) == (Goal(Objective.COST, None, None), request.pool)


def test_plan_job_is_plan_of_the_built_request() -> None:
    opts = SearchOptions(max_pp=2)
    by_args = plan_job("OPT-350", 64, {(A, Z): 8}, "cost", options=opts)
    by_request = plan(PlanRequest.build("OPT-350", 64, {(A, Z): 8}, "cost", options=opts))
    assert by_args.plan == by_request.plan and by_args.cost_per_iteration_usd == by_request.cost_per_iteration_usd
