"""Baseline planners to compare the Sailor search against.

- :func:`homogeneous_plan`: the best plan on a single GPU type (the search restricted to
  one-block layouts over the pools of one type, best type kept).
- :func:`uniform_split_plan`: a heterogeneous planner in the style of AMP / Metis — the same
  layouts (up to two (type, zone) blocks), but every stage gets the same number of layers and
  plans are ranked by a heterogeneity-unaware estimate in which every stage runs at the pace of
  the slowest GPU type of the plan; the chosen plan is then scored by the full simulator.
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Mapping
from dataclasses import replace

import numpy as np

from heteroplan.errors import InfeasibleError, InputError
from heteroplan.planner.api import PlanResult, plan
from heteroplan.planner.model.simulator import simulate_plan
from heteroplan.planner.model.terms import rental_usd_per_s
from heteroplan.planner.plan import PipelineBlock, Plan, ReplicaGroup, Stage
from heteroplan.planner.request import PlanRequest
from heteroplan.planner.search.layouts import layouts
from heteroplan.planner.search.searcher import Searcher

__all__ = ["homogeneous_plan", "uniform_split_plan"]


def homogeneous_plan(request: PlanRequest) -> PlanResult:
    """Best plan of ``request`` using one GPU type only: the search restricted to one-block layouts
    (``max_blocks=1``) over the pools of each type of ``request.pool``, the best by the request's goal kept."""
    options = replace(request.options, max_blocks=1)
    t0 = time.perf_counter()
    results: list[PlanResult] = []
    reasons: list[str] = []
    for gpu in sorted({t for t, _ in request.pool}):
        sub = {k: v for k, v in request.pool.items() if k[0] == gpu}
        try:
            results.append(plan(replace(request, pool=sub, options=options)))
        except (InfeasibleError, InputError) as exc:
            reasons.append(f"{gpu}: {exc}")
    if not results:
        raise InfeasibleError("no feasible plan on any single GPU type — " + "; ".join(reasons))
    goal = request.goal
    best = min(results, key=lambda r: goal.key(r.iteration_time_s, r.cost_per_iteration_usd))
    return replace(best, search_time_s=time.perf_counter() - t0)


def _uniform_bounds(L: int, pp: int) -> list[int]:
    return [int(round(x)) for x in np.linspace(0, L, pp + 1)]


def uniform_split_plan(request: PlanRequest, *, max_pp: int = 8) -> PlanResult:
    """AMP/Metis-style baseline for ``request``: uniform layer split over up to ``max_pp`` stages,
    slowest-GPU estimate, full-simulator score (the request's search options apart from pruning,
    which this scan does not use, and its ``max_pp``, which ``max_pp`` replaces)."""
    profile, network, types, usable = request.profile, request.network, dict(request.gpu_types), request.pool
    model, gbs, goal = profile.name, request.gbs, request.goal
    searcher = Searcher(replace(request, options=replace(request.options, prune=False)))
    speed = {}
    for t in {k[0] for k in usable}:
        m = min(profile.microbatch_sizes(t))
        speed[t] = float(searcher.table(t, 1, m).fb[0, profile.num_layers]) if profile.has(t, m, 1) else np.inf
    t0 = time.perf_counter()
    best: tuple[tuple[float, float], Plan] | None = None
    for mbs, dp, bounds, blocks in _uniform_layouts(searcher, gbs, usable, max_pp):
        hw = [b for b in blocks for _ in range(b.stages)]
        slow = max((b.pool[0] for b in blocks), key=lambda t: speed[t])
        real = _uniform_plan(model, gbs, mbs, bounds, hw, dp)
        pess = _uniform_plan(model, gbs, mbs, bounds, hw, dp, gpu=slow)
        try:
            est = simulate_plan(pess, profile=profile, network=network, gpu_types=types)
        except InputError:
            continue
        rate = rental_usd_per_s(sum(n * types[t].price_per_hour for (t, _), n in real.gpus_by_type_zone().items()))
        cost_est = rate * est.iteration_time_s + est.cost_per_iteration_usd - est.iteration_time_s * rental_usd_per_s(sum(
            n * types[t].price_per_hour for (t, _), n in pess.gpus_by_type_zone().items()
        ))
        if not goal.meets(est.iteration_time_s, cost_est, tolerance=0.0):
            continue
        key = goal.key(est.iteration_time_s, cost_est)
        if best is not None and key >= best[0]:
            continue
        try:
            sim = simulate_plan(real, profile=profile, network=network, gpu_types=types)
        except InputError:
            continue
        if any(
            m > types[s.replicas[0].gpu_type].memory_gb
            for m, s in zip(sim.memory_per_stage_gb, real.stages, strict=True)
        ):
            continue
        if best is None or key < best[0]:
            best = (key, real)
    if best is None:
        raise InfeasibleError("no feasible plan for the uniform-split baseline")
    sim = simulate_plan(best[1], profile=profile, network=network, gpu_types=types)
    return PlanResult(
        best[1], sim.iteration_time_s, sim.throughput_iter_s, sim.cost_per_iteration_usd, sim.memory_per_stage_gb, time.perf_counter() - t0
    )


def _uniform_layouts(searcher: Searcher, gbs: int, usable: Mapping[tuple[str, str], int],
                     max_pp: int) -> Iterator[tuple[int, int, list[int], list[PipelineBlock]]]:
    """``(mbs, dp, uniform bounds, blocks)`` of every layout of one or two blocks whose stages keep
    their replicas in one zone, by microbatch size, ``dp`` and depth, over the pool ``usable``."""
    profile = searcher.profile
    L = profile.num_layers
    total = sum(usable.values())
    mbs_all = sorted({m for t, _ in usable for m in profile.microbatch_sizes(t)})
    for mbs in (m for m in mbs_all if gbs % m == 0):
        per = gbs // mbs
        for dp in (d for d in range(1, min(per, total) + 1) if per % d == 0):
            for pp in range(1, min(max_pp, L) + 1):
                if pp * dp > total:
                    break
                bounds = _uniform_bounds(L, pp)
                for max_blocks in (1, 2):
                    for rows in layouts(searcher, pp, mbs, dp, max_blocks):
                        for row in rows:
                            for blocks, spread in row:
                                if spread is None:  # the baseline keeps each stage's replicas in one zone
                                    yield mbs, dp, bounds, blocks


def _uniform_plan(model: str, gbs: int, mbs: int, bounds: list[int], stages: list[PipelineBlock], dp: int,
                  gpu: str | None = None) -> Plan:
    """The plan of ``stages`` split at ``bounds``, ``dp`` replicas each; with ``gpu``, every stage on
    that GPU type instead of its own (the baseline's slowest-GPU estimate)."""
    return Plan(model, gbs, mbs, tuple(
        Stage(bounds[s], bounds[s + 1], (ReplicaGroup(gpu or h.pool[0], h.pool[1], h.tp, dp),)) for s, h in enumerate(stages)
    ))
