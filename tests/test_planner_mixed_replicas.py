"""Mixed replicas (issue 50): stages whose data-parallel replicas differ in GPU type and TP degree,
searched with pruning; the exhaustive oracle (every sharing of the microbatches) agrees."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from heteroplan.perf.sailor_profiles import load_model_profile
from heteroplan.planner import SearchOptions, plan_job, simulate_plan
from heteroplan.planner.explain import FamilyKind, PlanFamily, PlanStructure, plan_structure
from heteroplan.planner.model.microbatches import water_fill
from heteroplan.planner.model.simulator import gpu_catalog
from heteroplan.planner.plan import Plan, ReplicaGroup, Stage
from heteroplan.planner.search.brute_force import brute_force

A, V, Z = "A100-40", "V100-16", "us-central1-a"
CATALOG = gpu_catalog()
OPT = load_model_profile("OPT-350")


def _mixes_tp(plan: Plan) -> bool:
    """Whether a stage of ``plan`` holds replicas of different GPU types and TP degrees."""
    return any(len({g.gpu_type for g in s.replicas}) > 1 and len({g.tp for g in s.replicas}) > 1 for s in plan.stages)


def _sailor_8_8() -> Plan:
    """Sailor's plan of OPT-350 on 8 A100 + 8 V100 (GBS 1024): one stage, 8 A100 at TP 1 and
    2 V100 at TP 4, microbatch 2, the microbatches shared so that the slowest replica finishes first."""
    stage = Stage(0, OPT.num_layers, (ReplicaGroup(A, Z, 1, 8), ReplicaGroup(V, Z, 4, 2)))
    even = Plan("OPT-350", 1024, 2, (stage,), (1,) * 9 + (503,))
    fb = simulate_plan(even).stage_times.compute[0]  # seconds per microbatch of each replica
    return Plan("OPT-350", 1024, 2, (stage,), water_fill(fb, fb, 512))


def test_issue_8_plus_8_finds_a_plan_at_least_as_good_as_sailors():
    """The issue's case: Sailor's one-stage mixed-TP plan rates 0.04472 iter/s under our simulator;
    the search used to choose 0.04328 (PP 2, V100 then A100). It now finds a plan at least as good."""
    sailor = simulate_plan(_sailor_8_8())
    assert sailor.fits and sailor.throughput_iter_s == pytest.approx(0.04472, abs=5e-6)
    res = plan_job("OPT-350", 1024, {(A, Z): 8, (V, Z): 8})
    assert res.throughput_iter_s >= sailor.throughput_iter_s * (1 - 1e-9)
    assert res.throughput_iter_s > 0.04328 * 1.01
    assert _mixes_tp(res.plan)
    # the search's own pricing is the simulator's
    assert res.search_iteration_time_s == pytest.approx(res.iteration_time_s, rel=1e-9)
    assert simulate_plan(res.plan).iteration_time_s == pytest.approx(res.iteration_time_s, rel=1e-9)


def test_issue_8_plus_8_one_stage_equals_the_exhaustive_search():
    """At one stage and microbatch 2 the pruned search (its mixed-replica pass) finds the optimum
    of the exact scan over every pair of pipeline kinds and replica counts."""
    opts = SearchOptions(max_pp=1, microbatch_sizes=(2,))
    pool = {(A, Z): 8, (V, Z): 8}
    exact = plan_job("OPT-350", 1024, pool, options=SearchOptions(max_pp=1, microbatch_sizes=(2,), prune=False))
    pruned = plan_job("OPT-350", 1024, pool, options=opts)
    assert pruned.iteration_time_s == pytest.approx(exact.iteration_time_s, rel=1e-12)
    assert pruned.iteration_time_s == pytest.approx(simulate_plan(_sailor_8_8()).iteration_time_s, rel=1e-12)


# pools where the optimum mixes GPU types and TP degrees in one stage (the oracle says so)
EVERY_SHARE_CASES = [
    ({(A, Z): 1, (V, Z): 4}, 12),
    ({(A, Z): 1, (V, Z): 5}, 16),
]


@pytest.mark.parametrize("pool,gbs", EVERY_SHARE_CASES)
def test_search_equals_oracle_over_every_microbatch_sharing(pool, gbs):
    """The oracle scores every sharing of the microbatches among the replicas with ``simulate_plan``
    (not the search's two-class rule): the exact and the pruned search both reach its optimum."""
    plan, sim = brute_force(OPT, gbs, pool, CATALOG, max_pp=1, microbatch_sizes=(2,), mixed=True, every_share=True)
    assert _mixes_tp(plan)
    for prune in (False, True):
        res = plan_job("OPT-350", gbs, pool, options=SearchOptions(max_pp=1, microbatch_sizes=(2,), prune=prune))
        assert res.iteration_time_s == pytest.approx(sim.iteration_time_s, rel=1e-12)


MIXED_TP_CASES = [  # pool, gbs: the two-kind oracle's optimum mixes types and TP degrees in a stage
    ({(A, Z): 1, (V, Z): 8}, 64),
    ({(A, Z): 2, (V, Z): 8}, 64),
]


@pytest.mark.parametrize("pool,gbs", MIXED_TP_CASES)
def test_pruned_search_finds_mixed_tp_optimum(pool, gbs):
    """One stage, microbatch 2: the oracle's best plan mixes A100 at TP 1 with V100 at TP 4, and
    the pruned search finds its time; every replica fits its own GPU's memory."""
    plan, sim = brute_force(OPT, gbs, pool, CATALOG, max_pp=1, microbatch_sizes=(2,), mixed=True)
    assert _mixes_tp(plan)
    res = plan_job("OPT-350", gbs, pool, options=SearchOptions(max_pp=1, microbatch_sizes=(2,)))
    assert res.iteration_time_s == pytest.approx(sim.iteration_time_s, rel=1e-12)
    mem = simulate_plan(res.plan).stage_memory.total
    cap = np.array([[CATALOG[r.gpu_type].memory_gb for r in s.replica_list()] for s in res.plan.stages])
    assert (mem <= cap).all()


def test_exact_search_equals_oracle_on_a_two_stage_mixed_tp_optimum():
    """Two stages, microbatch 2, 1 A100 + 8 V100: the oracle's optimum mixes GPU types and TP
    degrees within a stage at depth 2 (A100 TP 1 beside V100 TP 2, then V100 TP 2 beside V100 TP 4);
    the exact scan reaches its time and the pruned one never beats it (it claims no exactness)."""
    pool, gbs, opts = {(A, Z): 1, (V, Z): 8}, 32, {"max_pp": 2, "microbatch_sizes": (2,)}
    plan, sim = brute_force(OPT, gbs, pool, CATALOG, mixed=True, **opts)
    assert plan.pp == 2 and _mixes_tp(plan)
    assert any(len({g.tp for g in s.replicas}) > 1 and len({g.gpu_type for g in s.replicas}) == 1 for s in plan.stages)
    exact = plan_job("OPT-350", gbs, pool, options=SearchOptions(prune=False, **opts))
    assert exact.iteration_time_s == pytest.approx(sim.iteration_time_s, rel=1e-12)
    pruned = plan_job("OPT-350", gbs, pool, options=SearchOptions(**opts))
    assert pruned.iteration_time_s >= sim.iteration_time_s * (1 - 1e-12)


@settings(max_examples=4, deadline=None)
@given(a100=st.integers(1, 2), v100=st.integers(2, 6), gbs=st.sampled_from((16, 32)))
def test_exact_search_equals_the_mixed_oracle_on_random_pools(a100, v100, gbs):
    """On random tiny A100 + V100 pools (up to two stages, microbatch 2) the exact scan equals the
    oracle over every plan of two pipeline kinds (mixed types and TP degrees per stage included),
    and the pruned search is never better than that optimum."""
    pool, opts = {(A, Z): a100, (V, Z): v100}, {"max_pp": 2, "microbatch_sizes": (2,)}
    _, sim = brute_force(OPT, gbs, pool, CATALOG, mixed=True, **opts)
    exact = plan_job("OPT-350", gbs, pool, options=SearchOptions(prune=False, **opts))
    assert exact.iteration_time_s == pytest.approx(sim.iteration_time_s, rel=1e-12)
    pruned = plan_job("OPT-350", gbs, pool, options=SearchOptions(**opts))
    assert pruned.iteration_time_s >= sim.iteration_time_s * (1 - 1e-12)


def test_result_names_its_layout_and_the_best_plan_of_the_other():
    """8+8: the chosen plan is of the mixed-replica layout; the best uniform pipeline it reports
    is the plan of the search without mixed stages, priced as ``simulate_plan`` prices it."""
    pool = {(A, Z): 8, (V, Z): 8}
    res = plan_job("OPT-350", 1024, pool)
    assert res.structure is PlanStructure.MIXED_REPLICAS and plan_structure(res.plan) is res.structure
    assert res.to_dict()["structure"] == "mixed replicas"
    assert res.best_of(PlanStructure.MIXED_REPLICAS) is None  # the chosen plan is that family's best
    uniform = res.best_of(PlanStructure.UNIFORM_PIPELINE)
    assert uniform is not None and uniform.family == PlanFamily.layout(PlanStructure.UNIFORM_PIPELINE)
    assert plan_structure(uniform.plan) is PlanStructure.UNIFORM_PIPELINE
    assert uniform.family.kind is FamilyKind.STRUCTURE and str(uniform.family) == "layout uniform pipeline"
    without = plan_job("OPT-350", 1024, pool, options=SearchOptions(mixed_stages=False))
    assert without.structure is PlanStructure.UNIFORM_PIPELINE
    assert uniform.iteration_time_s == pytest.approx(without.iteration_time_s, rel=1e-9)
    assert res.simulate(uniform.plan).iteration_time_s == pytest.approx(uniform.iteration_time_s, rel=1e-9)
    assert uniform.iteration_time_s > res.iteration_time_s
    assert "layout: mixed replicas; best uniform pipeline: " in res.describe()


def test_plan_structure_of_hand_built_plans():
    """Types or TP degrees differing within a stage make mixed replicas; across stages or zones do not."""
    def plan(*stages):
        bounds = np.linspace(0, OPT.num_layers, len(stages) + 1).astype(int)
        return Plan("OPT-350", 64, 4, tuple(Stage(int(a), int(b), g) for a, b, g in zip(bounds[:-1], bounds[1:], stages, strict=True)))

    one_a, one_v = (ReplicaGroup(A, Z, 1, 2),), (ReplicaGroup(V, Z, 1, 2),)
    zones = (ReplicaGroup(A, Z, 2, 1), ReplicaGroup(A, "us-central1-b", 2, 1))
    assert plan_structure(plan(one_v, one_a)) is PlanStructure.UNIFORM_PIPELINE
    assert plan_structure(plan(zones)) is PlanStructure.UNIFORM_PIPELINE
    assert plan_structure(plan((ReplicaGroup(A, Z, 1, 1), ReplicaGroup(A, Z, 2, 1)))) is PlanStructure.MIXED_REPLICAS
    assert plan_structure(plan(one_a, (ReplicaGroup(A, Z, 1, 1), ReplicaGroup(V, Z, 1, 1)))) is PlanStructure.MIXED_REPLICAS
