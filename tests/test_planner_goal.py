"""The search's goal: ranking, constraint, pruning bounds and the reasons it gives."""

from __future__ import annotations

import numpy as np
import pytest

from heteroplan.errors import InputError
from heteroplan.planner.goal import Goal, Objective, Shortfall


def test_keys_rank_by_time_then_cost_or_cost_then_time():
    fast, cheap = (1.0, 9.0), (2.0, 3.0)  # (seconds, $) per iteration
    thr, cost = Goal("throughput"), Goal("cost")
    assert min((fast, cheap), key=lambda p: thr.key(*p)) == fast
    assert min((fast, cheap), key=lambda p: cost.key(*p)) == cheap
    assert thr.primary(*fast) == 1.0 and cost.primary(*fast) == 9.0
    t, c = np.array([2.0, 1.0, 1.0]), np.array([1.0, 5.0, 4.0])
    assert list(thr.order(t, c, np.array([True, True, True]))) == [2, 1, 0]
    assert list(thr.order(t, c, np.array([True, False, True]))) == [2, 0, 1]
    assert list(cost.order(t, c, np.array([True, True, True]))) == [0, 2, 1]


def test_constraint_is_met_at_its_limit_and_missed_past_it():
    budget = Goal("throughput", budget=2.0)
    assert budget.meets(5.0, 2.0) and not budget.meets(5.0, 2.0001)
    np.testing.assert_array_equal(budget.meets(np.ones(3), np.array([1.0, 2.0, 3.0])), [True, True, False])
    floor = Goal(Objective.COST, min_throughput=0.5)
    assert floor.meets(2.0, 99.0) and not floor.meets(2.0001, 0.0)
    assert Goal("cost").meets(1e9, 1e9) and Goal("throughput").meets(1e9, 1e9)


def test_bounds_prune_only_what_cannot_meet_the_constraint():
    assert Goal("throughput", budget=2.0).bounds_fail(1.0, 2.5)
    assert not Goal("throughput", budget=2.0).bounds_fail(100.0, 2.0)
    assert Goal("cost", min_throughput=0.5).bounds_fail(2.5, 0.0)
    assert not Goal("cost", min_throughput=0.5).bounds_fail(2.0, 1e9)
    assert not Goal("cost").bounds_fail(1e9, 1e9)


def test_split_cutoff_subtracts_the_fixed_egress_for_cost_and_gives_up_across_zones_for_time():
    assert Goal("cost").split_cutoff(10.0, 2.0, 4.0, crosses_zones=True) == 3.0
    assert Goal("throughput").split_cutoff(10.0, 2.0, 4.0, crosses_zones=False) == 10.0
    assert Goal("throughput").split_cutoff(10.0, 2.0, 4.0, crosses_zones=True) == np.inf


def test_reasons_name_the_closest_miss():
    g = Goal("throughput", budget=1.0)
    miss = Shortfall()
    assert g.why_infeasible(miss) is None
    g.note_miss(miss, 1.0, 3.0)
    g.note_miss(miss, 1.0, 2.0, bound=True)
    assert "at least $2/iteration > budget $1" in g.why_infeasible(miss)
    f = Goal("cost", min_throughput=1.0)
    miss = Shortfall()
    f.note_miss(miss, 4.0, 1.0)
    assert "more than 0.25 iter/s < 1" in f.why_infeasible(miss)
    assert f.relaxed() is Objective.THROUGHPUT and g.relaxed() is Objective.COST and Goal("cost").relaxed() is None
    assert "the fastest plan reaches 0.5 iter/s" in f.out_of_reach(2.0, 1.0)


def test_objective_names_are_the_requests():
    from heteroplan.planner.request import PlanRequest

    assert PlanRequest.build("OPT-350", 64, {("A100-40", "us-central1-a"): 8}, "cost").goal == Goal(Objective.COST)
    with pytest.raises(InputError, match=r"objective.*speed.*\['throughput', 'cost'\]"):
        PlanRequest.build("OPT-350", 64, {("A100-40", "us-central1-a"): 8}, "speed")
    with pytest.raises(ValueError):
        Goal("speed")
