"""Stages that mix GPU types: the microbatch split is min-max optimal, the search equals exhaustive
enumeration of the mixed space, and every mixed plan keeps capacity and each replica's memory."""

from __future__ import annotations

import itertools
from dataclasses import replace

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from heteroplan.perf.sailor_profiles import load_model_profile
from heteroplan.planner import SearchOptions, plan_job
from heteroplan.planner.model.microbatches import (
    class_microbatches,
    finish_s,
    two_class_totals,
    water_fill,
)
from heteroplan.planner.model.simulator import gpu_catalog
from heteroplan.planner.search.brute_force import brute_force

A, V = "A100-40", "V100-16"
ZA, ZB = "us-central1-a", "us-central1-b"
CATALOG = gpu_catalog()
OPT = load_model_profile("OPT-350")


def _best_allocation(step, fixed, total):
    """min over every allocation (m_d >= 1, sum = total) of the slowest replica's seconds."""
    D = len(step)
    best = np.inf
    for cuts in itertools.combinations(range(1, total), D - 1):
        m = np.diff((0, *cuts, total))
        best = min(best, float(np.max(finish_s(m, step, fixed))))
    return best


@settings(max_examples=60, deadline=None)
@given(
    d1=st.integers(1, 3), d2=st.integers(1, 3), extra=st.integers(0, 7),
    s1=st.floats(0.1, 3.0), s2=st.floats(0.1, 3.0), f1=st.floats(0.0, 5.0), f2=st.floats(0.0, 5.0),
)
def test_microbatch_split_is_min_max_optimal(d1, d2, extra, s1, s2, f1, f2):
    total = d1 + d2 + extra
    step = np.array([s1] * d1 + [s2] * d2)
    fixed = np.array([f1] * d1 + [f2] * d2)
    want = _best_allocation(step, fixed, total)
    greedy = water_fill(step, fixed, total)
    assert sum(greedy) == total and min(greedy) >= 1
    assert float(np.max(finish_s(np.array(greedy), step, fixed))) == pytest.approx(want, rel=1e-12)
    big1, t = two_class_totals(np.array([s1]), np.array([f1]), d1, np.array([s2]), np.array([f2]), d2, total)
    assert float(t[0]) == pytest.approx(want, rel=1e-12)
    micro = class_microbatches((d1, d2), (int(big1[0]), total - int(big1[0])))
    assert sum(micro) == total and min(micro) >= 1
    assert float(np.max(finish_s(np.array(micro), step, fixed))) == pytest.approx(want, rel=1e-12)


MIXED_CASES = [
    # objective, pool, budget, floor, gbs, mbs, max_pp, whether the optimum mixes a stage
    ("throughput", {(A, ZA): 3, (V, ZA): 4}, None, None, 32, (4,), 2, True),  # A100 and V100 in one stage
    ("throughput", {(A, ZA): 5, (A, ZB): 3}, None, None, 32, (4,), 2, True),  # replicas in two zones
    ("cost", {(A, ZA): 3, (V, ZA): 8}, None, 0.2, 32, (4,), 2, False),
    ("throughput", {(A, ZA): 6, (V, ZA): 4}, 0.02, None, 32, (4,), 2, True),
    ("throughput", {(A, ZA): 3, (V, ZA): 4}, None, None, 16, (4,), 2, False),
]


@pytest.mark.parametrize("objective,pool,budget,floor,gbs,mbs,max_pp,mixes", MIXED_CASES)
def test_search_with_mixed_stages_equals_exhaustive_enumeration(objective, pool, budget, floor, gbs, mbs, max_pp, mixes):
    plan, sim = brute_force(OPT, gbs, pool, CATALOG, objective, budget, floor, max_pp=max_pp, microbatch_sizes=mbs, mixed=True)
    assert any(len(s.replicas) > 1 for s in plan.stages) == mixes
    opts = SearchOptions(max_pp=max_pp, microbatch_sizes=mbs, prune=False)
    res = plan_job("OPT-350", gbs, pool, objective, budget, floor, options=opts)
    key = (lambda r: r.iteration_time_s) if objective == "throughput" else (lambda r: r.cost_per_iteration_usd)
    assert key(res) == pytest.approx(key(sim), rel=1e-9)
    # the search's matrices price the mixed plan exactly as the simulator does
    assert res.search_iteration_time_s == pytest.approx(res.iteration_time_s, rel=1e-9)
    assert res.search_cost_per_iteration_usd == pytest.approx(res.cost_per_iteration_usd, rel=1e-9)


def test_mixed_stages_pay_on_a_pool_with_idle_gpus():
    """6 A100 hold one TP4 and one TP2 replica: mixing them in one stage beats every unmixed plan
    (the oracle agrees), and the faster replica runs more microbatches."""
    pool = {(A, ZA): 6}
    opts = SearchOptions(max_pp=2, microbatch_sizes=(4,))
    res = plan_job("OPT-350", 32, pool, options=opts)
    plain = plan_job("OPT-350", 32, pool, options=SearchOptions(max_pp=2, microbatch_sizes=(4,), mixed_stages=False))
    _, oracle = brute_force(OPT, 32, pool, CATALOG, max_pp=2, microbatch_sizes=(4,), mixed=True)
    assert res.iteration_time_s < plain.iteration_time_s
    assert res.iteration_time_s == pytest.approx(oracle.iteration_time_s, rel=1e-9)
    assert any(len(s.replicas) > 1 for s in res.plan.stages)
    micro = res.plan.microbatches()
    assert len(set(micro)) > 1 and sum(micro) * 4 == 32


THREE_BLOCK_CASES = [
    # pool, gbs, mbs: the optimum is a three-block pipeline (V100, A100 in one zone, A100 in another)
    ({(A, ZA): 1, (V, ZA): 2, (A, ZB): 1}, 16, (2,)),
    ({(A, ZA): 1, (V, ZA): 4, (A, ZB): 2}, 32, (4,)),
]


@pytest.mark.parametrize("pool,gbs,mbs", THREE_BLOCK_CASES)
def test_three_block_search_equals_exhaustive_enumeration(pool, gbs, mbs):
    plan, sim = brute_force(OPT, gbs, pool, CATALOG, max_pp=3, microbatch_sizes=mbs, max_blocks=3)
    assert len({(s.replicas[0].gpu_type, s.replicas[0].zone) for s in plan.stages}) == 3
    opts = SearchOptions(max_pp=3, microbatch_sizes=mbs, max_blocks=3, mixed_stages=False)
    exact = plan_job("OPT-350", gbs, pool, options=replace(opts, prune=False))
    assert exact.iteration_time_s == pytest.approx(sim.iteration_time_s, rel=1e-9)
    assert exact.search_iteration_time_s == pytest.approx(exact.iteration_time_s, rel=1e-9)
    # the pruned search finds three blocks too, and they beat every two-block plan
    pruned = plan_job("OPT-350", gbs, pool, options=opts)
    two = plan_job("OPT-350", gbs, pool, options=replace(opts, max_blocks=2))
    assert pruned.iteration_time_s < two.iteration_time_s


def test_a_mixed_split_with_buffered_sends_is_priced_as_simulate_replays_it():
    """Two TP-8 RTX kinds, 3 stages, microbatch 2: 2 MiB per rank, buffered. The closed form
    put this split at 39.85 s; simulate replays both replicas (shared NICs): 39.77 s."""
    from heteroplan.planner import simulate_plan
    from heteroplan.planner.plan import PipelineBlock
    from heteroplan.planner.request import PlanRequest
    from heteroplan.planner.search.mixed_stages import evaluate_mixed
    from heteroplan.planner.search.searcher import Searcher
    from heteroplan.planner.search.split_dp import _all_splits

    pool = {("RTX-2080", ZA): 48, ("RTX-3090", ZA): 48}
    searcher = Searcher(PlanRequest.build("OPT-350", 256, pool, "throughput"))
    kinds = ((PipelineBlock(("RTX-2080", ZA), 8, 3),), (PipelineBlock(("RTX-3090", ZA), 8, 3),))
    cand = evaluate_mixed(searcher, kinds, (1, 1), 2, _all_splits(3, OPT.num_layers))
    sim = simulate_plan(cand.plan)
    assert cand.iteration_time == pytest.approx(sim.iteration_time_s, rel=1e-9)
    assert cand.cost_per_iteration == pytest.approx(sim.cost_per_iteration_usd, rel=1e-9, abs=1e-12)
