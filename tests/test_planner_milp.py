"""Resource MILP: optimal against exhaustive enumeration of replica counts; Dinkelbach ratio."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from heteroplan.errors import InfeasibleError
from heteroplan.formulations.sailor import ReplicaKind
from heteroplan.planner import SearchOptions, plan_job
from heteroplan.planner.goal import Goal
from heteroplan.planner.request import PlanRequest
from heteroplan.planner.search.resources import choose_resources, narrow_pool, replica_kinds

A, V, Z, W = "A100-40", "V100-16", "us-central1-a", "us-west1-b"
GBS = 512
POOL = {(A, Z): 8, (V, Z): 8, (A, W): 4}
KINDS = [
    ReplicaKind(A, Z, 1, 1, 4, 30.0, 3.673 / 3600),
    ReplicaKind(A, Z, 2, 1, 4, 50.0, 2 * 3.673 / 3600),
    ReplicaKind(V, Z, 2, 2, 4, 20.0, 4 * 2.860 / 3600),
    ReplicaKind(V, Z, 4, 1, 4, 18.0, 4 * 2.860 / 3600),
    ReplicaKind(A, W, 1, 1, 4, 30.0, 3.673 / 3600),
]


def _enumerate():
    """Every feasible integer vector of replica counts."""
    ranges = [range(POOL[(k.gpu_type, k.zone)] // k.gpus + 1) for k in KINDS]
    for xs in itertools.product(*ranges):
        used: dict = {}
        for k, n in zip(KINDS, xs, strict=True):
            used[(k.gpu_type, k.zone)] = used.get((k.gpu_type, k.zone), 0) + n * k.gpus
        if sum(xs) and all(used[p] <= POOL[p] for p in used):
            x = np.array(xs)
            thr = x @ [k.samples_per_s for k in KINDS] / GBS
            rate = x @ [k.price_per_s for k in KINDS]
            yield x, thr, rate / thr


@pytest.mark.parametrize("budget", [None, 0.02, 0.01, 0.006])
def test_max_throughput_under_budget_matches_enumeration(budget):
    best = max((thr for _, thr, cost in _enumerate() if budget is None or cost <= budget + 1e-12), default=None)
    if best is None:
        with pytest.raises(InfeasibleError):
            choose_resources(KINDS, PlanRequest.build("OPT-350", GBS, POOL, Goal("throughput", budget)))
        return
    choice = choose_resources(KINDS, PlanRequest.build("OPT-350", GBS, POOL, Goal("throughput", budget)))
    assert choice.throughput == pytest.approx(best, rel=1e-6)
    if budget is not None:
        assert choice.cost_per_iteration <= budget * (1 + 1e-9)
    for (t, z), n in choice.gpus.items():
        assert n <= POOL[(t, z)]


@pytest.mark.parametrize("floor", [None, 0.1, 0.3, 0.45])
def test_min_cost_under_floor_matches_enumeration(floor):
    best = min(cost for _, thr, cost in _enumerate() if floor is None or thr >= floor - 1e-12)
    choice = choose_resources(KINDS, PlanRequest.build("OPT-350", GBS, POOL, Goal("cost", min_throughput=floor)))
    assert choice.cost_per_iteration == pytest.approx(best, rel=1e-6)
    if floor is not None:
        assert choice.throughput >= floor * (1 - 1e-9)


def test_unreachable_floor_is_infeasible():
    with pytest.raises(InfeasibleError, match="throughput floor"):
        choose_resources(KINDS, PlanRequest.build("OPT-350", GBS, POOL, Goal("cost", min_throughput=100.0)))


def test_simulated_kinds_and_narrowed_search():
    pool = {(A, Z): 16, (V, Z): 16}
    request = PlanRequest.build("OPT-350", 256, pool, Goal("cost", min_throughput=0.05))
    kinds = replica_kinds(request, max_pp=2)
    assert {k.gpu_type for k in kinds} == {A, V}
    a1 = [k for k in kinds if k.gpu_type == A and k.gpus == 1]
    v1 = [k for k in kinds if k.gpu_type == V and k.gpus == 1]
    assert a1 and (not v1 or a1[0].samples_per_s > v1[0].samples_per_s)  # A100 beats V100
    choice = choose_resources(kinds, request)
    narrowed = narrow_pool(choice, pool)
    assert all(narrowed[p] <= pool[p] for p in narrowed)
    res = plan_job("OPT-350", 256, pool, "cost", min_throughput=0.05, options=SearchOptions(max_pp=2, narrow_with_milp=True))
    assert res.throughput_iter_s >= 0.05
    for key, n in res.plan.gpus_by_type_zone().items():
        assert n <= pool[key]
