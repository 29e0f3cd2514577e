"""The planner's use of the resource MILP (:mod:`heteroplan.formulations.sailor`).

:func:`replica_kinds` simulates each homogeneous replica kind, :func:`choose_resources` solves
the MILP (a Dinkelbach loop for the cost objective) and :func:`narrow_pool` turns the choice
into a smaller pool for the plan search (``SearchOptions(narrow_with_milp=True)``).
"""

from __future__ import annotations

import math
from collections.abc import Mapping

import numpy as np

from heteroplan.errors import InfeasibleError
from heteroplan.formulations.sailor import (
    ReplicaKind,
    ResourceChoice,
    build_resource_model,
    decode_resource_choice,
)
from heteroplan.planner.model.terms import rental_usd_per_s
from heteroplan.planner.plan import PipelineBlock
from heteroplan.planner.request import PlanRequest, SearchOptions
from heteroplan.planner.search.searcher import Searcher
from heteroplan.solvers import solve

__all__ = ["replica_kinds", "choose_resources", "narrow_pool"]


def replica_kinds(request: PlanRequest, *, max_pp: int = 8) -> list[ReplicaKind]:
    """Simulated replica kinds per (type, zone) of the request's pool: every (mbs, tp, pp) that
    fits memory, keeping for each (type, GPUs per replica) the fastest, with the simulator
    constants of ``request.options.config``."""
    profile, pool, gbs, gpu_types = request.profile, request.pool, request.gbs, request.gpu_types
    kinds: list[ReplicaKind] = []
    types = sorted({t for t, _ in pool if t in profile.gpu_types})
    for gpu in types:
        zones = sorted(z for t, z in pool if t == gpu and pool[(t, z)] > 0)
        if not zones:
            continue
        one_pool = PlanRequest(profile, request.network, gpu_types, {(gpu, zones[0]): 10**9}, gbs,
                               options=SearchOptions(config=request.options.config))
        searcher = Searcher(one_pool)
        best: dict[int, tuple[float, int, int, int]] = {}
        for mbs in profile.microbatch_sizes(gpu):
            if gbs % mbs:
                continue
            for tp in (t for t in profile.tp_degrees(gpu, mbs) if t <= gpu_types[gpu].gpus_per_node):
                for pp in range(1, min(max_pp, profile.num_layers) + 1):
                    # the closed form's split (priced on the replay where sends are buffered): a rate
                    # for choosing GPUs; the search on the narrowed pool splits exactly
                    cand = searcher.evaluate([PipelineBlock((gpu, zones[0]), tp, pp)], mbs, 1, resplit=False)
                    if cand is None:
                        continue
                    rate = gbs / cand.iteration_time
                    g = tp * pp
                    if g not in best or rate > best[g][0]:
                        best[g] = (rate, tp, pp, mbs)
        price = rental_usd_per_s(gpu_types[gpu].price_per_hour)
        for rate, tp, pp, mbs in best.values():
            for z in zones:
                kinds.append(ReplicaKind(gpu, z, tp, pp, mbs, rate, tp * pp * price))
    if not kinds:
        raise InfeasibleError(f"no feasible plan: {profile.name} fits no replica of the pool's GPUs")
    return kinds


def choose_resources(
    kinds: list[ReplicaKind],
    request: PlanRequest,
    *,
    time_limit: float = 10.0,
    mip_gap: float = 1e-6,
    max_iterations: int = 20,
) -> ResourceChoice:
    """Solve the resource MILP for the request's pool, batch, objective and constraint
    (Dinkelbach loop for the cost objective); ``time_limit`` in seconds per MILP."""
    pool, gbs, objective = request.pool, request.gbs, request.goal.objective
    budget, min_throughput = request.goal.budget, request.goal.min_throughput
    total_time = 0.0
    if request.goal.wants_throughput:
        sol = solve(build_resource_model(kinds, pool, gbs, objective, budget), time_limit=time_limit, mip_gap=mip_gap)
        if not sol.has_solution:
            raise InfeasibleError(f"no feasible resource choice: {sol.status.name.lower()} (budget {budget})")
        return decode_resource_choice(kinds, sol["x"], gbs, sol.solve_time, 1)
    # cost: Dinkelbach, starting from the cheapest-per-iteration single replica
    r = np.array([k.samples_per_s for k in kinds]) / gbs
    c = np.array([k.price_per_s for k in kinds])
    lam = float(np.min(c / r))
    xs = None
    for it in range(1, max_iterations + 1):
        sol = solve(
            build_resource_model(kinds, pool, gbs, "cost", None, min_throughput, lam), time_limit=time_limit, mip_gap=mip_gap
        )
        total_time += sol.solve_time
        if not sol.has_solution:
            raise InfeasibleError(
                f"no feasible resource choice: throughput floor {min_throughput} iter/s is out of reach of the pool"
            )
        xs = np.rint(sol["x"])
        ratio = float(c @ xs / (r @ xs))
        if sol.objective >= -1e-12 * max(1.0, abs(lam)) or math.isclose(ratio, lam, rel_tol=1e-9):
            return decode_resource_choice(kinds, xs, gbs, total_time, it)
        lam = ratio
    assert xs is not None
    return decode_resource_choice(kinds, xs, gbs, total_time, max_iterations)


def narrow_pool(choice: ResourceChoice, pool: Mapping[tuple[str, str], int], slack: float = 1.0) -> dict[tuple[str, str], int]:
    """The pool restricted to the (type, zone) pairs the MILP rents, each with ``slack`` extra
    (capped at availability): the DP search then runs on far fewer options."""
    return {p: min(pool[p], int(math.ceil(n * (1 + slack)))) for p, n in choice.gpus.items()}
