"""Independent pipelines (:class:`~heteroplan.planner.pipeline_set.PipelineSet`) from the search's
single-type plans: a heuristic pass after the search (issue 50).

For every pair of GPU types, the best plan the search priced on each type alone (its runner-up of
family ``GPU types T``, or the chosen plan) keeps its depth, split, ``dp`` and microbatch size
and becomes one pipeline of a set; the global batch is re-shared between the two: pipeline ``i``
runs ``M_i`` microbatches of ``m_i`` samples (``M_1 m_1 + M_2 m_2 = gbs``, each replica at least
one, spread evenly over its replicas), ``M_1`` chosen to minimize the slower pipeline's closed-form
1F1B time (every ``M_1`` scored at once). The set is then priced by
:func:`~heteroplan.planner.model.pipeline_set.simulate_pipeline_set` (the ranges' all-reduce over
both pipelines' replicas included) and kept if it fits memory and meets the goal. Not exact: the
depths and splits are those each type's plan chose for the whole batch alone.
"""

from __future__ import annotations

from dataclasses import replace
from itertools import combinations

import numpy as np

from heteroplan.planner.explain import FamilyKind, PipelineSetRunnerUp
from heteroplan.planner.model.microbatches import class_microbatches
from heteroplan.planner.model.pipeline_set import simulate_pipeline_set
from heteroplan.planner.model.simulator import simulate_plan
from heteroplan.planner.model.terms import pipeline_step_s
from heteroplan.planner.pipeline_set import PipelineSet
from heteroplan.planner.plan import OptimizerSharding, Plan
from heteroplan.planner.search.context import SearchContext

__all__ = ["best_pipeline_set"]


def best_pipeline_set(ctx: SearchContext) -> PipelineSetRunnerUp | None:
    """The best set of two single-type pipelines (module docstring), or None: fewer than two GPU
    types priced, or no set fits memory and meets the goal."""
    singles: dict[str, Plan] = {}
    for family, cand in ctx.runner_ups.items():
        if family.kind is FamilyKind.GPU_MIX and len(family.gpu_types) == 1:
            singles[family.gpu_types[0]] = cand.plan
    inc = ctx.incumbent
    if inc is not None:
        types = {g.gpu_type for s in inc.plan.stages for g in s.replicas}
        if len(types) == 1:
            singles.setdefault(types.pop(), inc.plan)
    best: PipelineSetRunnerUp | None = None
    for a, b in combinations(sorted(singles), 2):
        priced = _pair(ctx, _unsharded(singles[a]), _unsharded(singles[b]))
        if priced is not None and (best is None or _key(ctx, priced) < _key(ctx, best)):
            best = priced
    return best


def _key(ctx: SearchContext, priced: PipelineSetRunnerUp) -> tuple[float, float]:
    return ctx.goal.key(priced.estimate.iteration_time_s, priced.estimate.cost_per_iteration_usd)


def _unsharded(plan: Plan) -> Plan:
    """``plan`` without ZeRO-1 (a set's pipelines keep their whole optimizer state)."""
    return replace(plan, stages=tuple(replace(s, optimizer_sharding=OptimizerSharding.NONE) for s in plan.stages))


def _closed_form(ctx: SearchContext, plan: Plan) -> tuple[float, float]:
    """The slowest replica's 1F1B step and fill-and-drain seconds (closed form)."""
    times = simulate_plan(plan, profile=ctx.profile, network=ctx.network, gpu_types=ctx.gpu_types, config=ctx.cfg).stage_times
    fb, comm = times.compute, times.pipeline_send
    step = pipeline_step_s(fb, comm[:-1], comm[1:]).max(axis=0)
    fixed = fb.sum(axis=0) + 2 * comm.sum(axis=0)
    return float(step.max()), float(fixed.max())


def _pair(ctx: SearchContext, p1: Plan, p2: Plan) -> PipelineSetRunnerUp | None:
    """The two pipelines over the batch shared so the slower finishes first (closed form), priced."""
    (s1, f1), (s2, f2) = _closed_form(ctx, p1), _closed_form(ctx, p2)
    m1, m2, d1, d2 = p1.microbatch_size, p2.microbatch_size, p1.dp, p2.dp
    big1 = np.arange(d1, ctx.gbs // m1 + 1)
    rest = ctx.gbs - big1 * m1
    ok = (rest % m2 == 0) & (rest // m2 >= d2)
    if not ok.any():
        return None
    big1, big2 = big1[ok], rest[ok] // m2
    t = np.maximum((-(-big1 // d1) - 1) * s1 + f1, (-(-big2 // d2) - 1) * s2 + f2)
    k = int(np.argmin(t))
    n1, n2 = int(big1[k]), int(big2[k])
    pset = PipelineSet((
        replace(p1, global_batch_size=n1 * m1, microbatches_per_replica=class_microbatches((d1,), (n1,))),
        replace(p2, global_batch_size=n2 * m2, microbatches_per_replica=class_microbatches((d2,), (n2,))),
    ))
    est = simulate_pipeline_set(pset, profile=ctx.profile, network=ctx.network, gpu_types=ctx.gpu_types, config=ctx.cfg)
    if not est.fits or not ctx.goal.meets(est.iteration_time_s, est.cost_per_iteration_usd):
        return None
    return PipelineSetRunnerUp(pset, est)

