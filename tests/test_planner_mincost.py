"""Min $/iteration under a throughput floor: Sailor's published case (OPT-350, >= 0.2 iter/s, 64 A100 TP4 x DP16).

Sailor's OPT-350 training config has a global batch of 1024 (docs/sailor.md). The search must
return the enumeration optimum on a 64-A100 pool, never a plan dearer than the published one,
the published plan itself when it is the optimum, and a clear infeasibility at GBS 2048, where
no 64-A100 plan can reach 0.2 iter/s on profiled compute alone.
"""

from __future__ import annotations

import pytest

from heteroplan.cluster import preset
from heteroplan.errors import InfeasibleError
from heteroplan.perf.sailor_profiles import load_model_profile
from heteroplan.planner import SearchOptions, plan_job, simulate_plan
from heteroplan.planner.model.simulator import DEFAULT_CONFIG, gpu_catalog
from heteroplan.planner.plan import Plan, ReplicaGroup, Stage
from heteroplan.planner.search.brute_force import brute_force

A, Z = "A100-40", "us-central1-a"
OPT = load_model_profile("OPT-350")
POOL64 = {(A, Z): 64}
FLOOR = 0.2


def published(gbs: int) -> Plan:
    """Sailor's answer: one stage, 16 replicas of TP4 on A100-40 in one zone (mbs 8, the largest profiled size; 33 GB at TP4)."""
    return Plan("OPT-350", gbs, 8, (Stage(0, OPT.num_layers, (ReplicaGroup(A, Z, 4, 16),)),))


def test_published_plan_is_feasible_at_gbs_1024():
    sim = simulate_plan(published(1024))
    assert sim.throughput_iter_s >= FLOOR
    assert sim.peak_memory_gb <= 40


def test_min_cost_on_64_a100_equals_enumeration_and_beats_published():
    res = plan_job("OPT-350", 1024, POOL64, "cost", min_throughput=FLOOR)
    plan, sim = brute_force(OPT, 1024, POOL64, gpu_catalog(), "cost", min_throughput=FLOOR, max_pp=2, max_blocks=1)
    assert res.cost_per_iteration_usd == pytest.approx(sim.cost_per_iteration_usd, rel=1e-9)
    assert res.cost_per_iteration_usd <= simulate_plan(published(1024)).cost_per_iteration_usd
    assert res.throughput_iter_s >= FLOOR and res.plan.num_gpus <= 64 and res.peak_memory_gb <= 40


def test_search_returns_published_plan_when_it_is_the_optimum():
    """At mbs 8 only TP4 fits in 40 GB and PP 2 misses the floor: TP4 x DP16 is the only, hence best, plan."""
    opts = SearchOptions(microbatch_sizes=(8,))
    res = plan_job("OPT-350", 1024, POOL64, "cost", min_throughput=FLOOR, options=opts)
    plan, sim = brute_force(OPT, 1024, POOL64, gpu_catalog(), "cost", min_throughput=FLOOR, max_pp=2, microbatch_sizes=(8,), max_blocks=1)
    assert (res.plan.pp, res.plan.dp, res.plan.stages[0].replicas[0].tp, res.plan.num_gpus) == (1, 16, 4, 64)
    assert (plan.pp, plan.dp, plan.stages[0].replicas[0].tp) == (1, 16, 4)
    assert res.cost_per_iteration_usd == pytest.approx(simulate_plan(published(1024)).cost_per_iteration_usd, rel=1e-9)


def test_sailor_gcp_pool_picks_64_a100_in_one_zone_at_gbs_1024():
    res = plan_job("OPT-350", 1024, preset("sailor-gcp"), "cost", min_throughput=FLOOR)
    by_type_zone = res.plan.gpus_by_type_zone()
    assert list(by_type_zone) == [(A, next(iter(by_type_zone))[1])]  # A100 only, one zone
    assert res.plan.num_gpus == 64 and res.plan.pp == 1
    assert res.cost_per_iteration_usd <= simulate_plan(published(1024)).cost_per_iteration_usd


def compute_bound(gbs: int, gpus: int) -> float:
    """iter/s of ``gpus`` A100s with the best profiled GPU-seconds per sample, no bubble, no sync."""
    best = min(
        tp * (DEFAULT_CONFIG.compute_scale * sum(OPT.stage_compute(A, mbs, tp, 0, OPT.num_layers)[:2])
              + DEFAULT_CONFIG.microbatch_overhead_s) / mbs
        for mbs in OPT.microbatch_sizes(A)
        for tp in OPT.tp_degrees(A, mbs)
    )
    return gpus / (gbs * best)


def test_gbs_2048_is_out_of_reach_of_64_a100():
    assert compute_bound(2048, 64) < FLOOR
    with pytest.raises(InfeasibleError, match="throughput floor too high"):
        plan_job("OPT-350", 2048, POOL64, "cost", min_throughput=FLOOR)
    fastest = plan_job("OPT-350", 2048, POOL64, "throughput")
    _, sim = brute_force(OPT, 2048, POOL64, gpu_catalog(), "throughput", max_pp=2, max_blocks=1)
    assert sim.throughput_iter_s * (1 - 1e-9) <= fastest.throughput_iter_s <= compute_bound(2048, 64)
