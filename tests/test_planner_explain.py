"""Explanations: runner-up plans per GPU-type mix and pipeline depth, and term-by-term diffs."""

from __future__ import annotations

import pytest

from heteroplan.planner import SearchOptions, plan_job
from heteroplan.planner.explain import (
    FamilyKind,
    PlanFamily,
    TermKind,
    diff_plans,
    gpu_mix,
    plan_families,
)

A, V, Z = "A100-40", "V100-16", "us-central1-a"


@pytest.fixture(scope="module")
def result():
    return plan_job("OPT-350", 256, {(A, Z): 8, (V, Z): 16}, options=SearchOptions(max_pp=4))


def test_runner_ups_are_worse_than_the_plan_and_priced_as_simulate_prices_them(result):
    assert result.runner_ups, "a two-type pool has plans of other mixes and depths"
    key = result.request.goal.key
    for r in result.runner_ups:
        assert r.plan != result.plan
        assert r.family in plan_families(r.plan)
        assert key(r.iteration_time_s, r.cost_per_iteration_usd) >= key(result.iteration_time_s, result.cost_per_iteration_usd)
        est = result.simulate(r.plan)
        assert est.fits
        assert est.iteration_time_s == pytest.approx(r.iteration_time_s, rel=1e-9)
        assert est.cost_per_iteration_usd == pytest.approx(r.cost_per_iteration_usd, rel=1e-9)
    families = {r.family for r in result.runner_ups} | set(plan_families(result.plan))
    assert {PlanFamily.depth(p) for p in range(1, 5)} <= families
    assert PlanFamily.mix((A,)) in families and PlanFamily.mix((V,)) in families
    # typed families print as the former labels, in the order explain() lists them
    assert {str(f) for f in families} >= {"PP 1", "PP 4", f"GPU types {A}", f"GPU types {V}"}
    assert str(PlanFamily.mix((V, A))) == f"GPU types {A}+{V}" and PlanFamily.depth(4).kind is FamilyKind.DEPTH
    labels = [r.family.label for r in result.runner_ups]
    assert labels == sorted(labels)
    for line, r in zip(result.explain().splitlines()[1:], result.runner_ups, strict=True):
        assert line.startswith(f"best of {r.family}: PP{r.plan.pp} x DP{r.plan.dp}")


def test_diff_with_itself_is_zero_and_terms_add_up(result):
    same = result.diff(result.plan)
    assert all(row.delta == 0 for row in same.rows)
    other = result.runner_ups[0].plan
    d = result.diff(other, ("chosen", "other"))
    time_rows = [r for r in d.rows if r.kind is TermKind.TIME]
    assert all(r.unit == "s/iteration" for r in time_rows)
    total = next(r for r in time_rows if r.term == "total")
    assert sum(r.delta for r in time_rows if r.term != "total") == pytest.approx(total.delta, rel=1e-9, abs=1e-12)
    assert total.b == pytest.approx(result.simulate(other).iteration_time_s)
    biggest = d.largest(TermKind.TIME, 1)[0]
    assert d.largest("time", 1) == [biggest]  # the former spelling of the kind
    assert abs(biggest.delta) == max(abs(r.delta) for r in time_rows if r.term != "total")
    assert biggest.term in d.describe().splitlines()[-1]


def test_diff_of_two_estimates_names_the_mix():
    res = plan_job("OPT-350", 64, {(A, Z): 8}, options=SearchOptions(max_pp=2))
    assert gpu_mix(res.plan) == A
    est = res.estimate
    d = diff_plans(est, est, ("x", "y"))
    assert {r.kind for r in d.rows} == set(TermKind)
    assert {r.unit for r in d.rows if r.kind is TermKind.COST} == {"$/iteration"}
    assert next(r for r in d.rows if r.kind is TermKind.MEMORY and r.term == "total").a == pytest.approx(res.memory_fit.need_gb)
