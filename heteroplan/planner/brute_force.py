"""Exhaustive enumeration of the search's plan space — the oracle the DP search is tested against.

Every microbatch size, data-parallel degree, pipeline depth, one- or two-block layout over
every (type, zone) pool and TP degree, every homogeneous pipeline whose replicas span a set of
two or more zones of one type (``span_zones``; replicas placed by
:func:`~heteroplan.planner.search.spread_replicas`), and every contiguous layer split is built as a
:class:`Plan` and scored by :func:`heteroplan.planner.simulator.simulate` (an independent
code path from the search's matrices). Exponential in the pipeline depth: small cases only.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator, Mapping

from heteroplan.cluster import GPUType
from heteroplan.errors import InfeasibleError
from heteroplan.perf.sailor_network import NetworkModel, load_network
from heteroplan.perf.sailor_profiles import ModelProfile
from heteroplan.planner.plan import Plan, ReplicaGroup, Stage
from heteroplan.planner.search import spread_replicas
from heteroplan.planner.simulator import (
    SHIPPED_PLATFORMS,
    PlatformConfigs,
    SimConfig,
    SimResult,
    simulate,
)

__all__ = ["enumerate_plans", "brute_force"]


def enumerate_plans(
    profile: ModelProfile,
    gbs: int,
    pool: Mapping[tuple[str, str], int],
    gpu_types: Mapping[str, GPUType],
    max_pp: int,
    microbatch_sizes: tuple[int, ...] | None = None,
    max_blocks: int = 2,
    span_zones: bool = True,
) -> Iterator[Plan]:
    """Every plan of the search space that respects GPU counts (memory is not checked here)."""
    L = profile.num_layers
    pools = sorted(k for k, v in pool.items() if v > 0 and k[0] in profile.gpu_types)
    total = sum(pool[p] for p in pools)
    mbs_all = sorted({m for t, _ in pools for m in profile.microbatch_sizes(t)})
    if microbatch_sizes:
        mbs_all = [m for m in mbs_all if m in microbatch_sizes]

    def tps(gpu: str, mbs: int) -> list[int]:
        return [t for t in profile.tp_degrees(gpu, mbs) if t <= gpu_types[gpu].gpus_per_node]

    for mbs in mbs_all:
        if gbs % mbs:
            continue
        per = gbs // mbs
        for dp in (d for d in range(1, min(per, total) + 1) if per % d == 0):
            for pp in range(1, min(max_pp, L) + 1):
                layouts: list[list[tuple[tuple[str, str], int, int]]] = []
                for p in pools:
                    layouts += [[(p, tp, pp)] for tp in tps(p[0], mbs) if pp * dp * tp <= pool[p]]
                for gpu in sorted({t for t, _ in pools}) if span_zones else ():
                    zones = [z for t, z in pools if t == gpu]
                    for tp in tps(gpu, mbs):
                        cap = {z: pool[(gpu, z)] // (pp * tp) for z in zones}
                        for k in range(2, len(zones) + 1):
                            for chosen in itertools.combinations(zones, k):
                                spread = spread_replicas(cap, chosen, dp)
                                if spread is None:
                                    continue
                                groups = tuple(ReplicaGroup(gpu, z, tp, n) for z, n in spread)
                                for cuts in itertools.combinations(range(1, L), pp - 1):
                                    bounds = (0, *cuts, L)
                                    yield Plan(profile.name, gbs, mbs, tuple(Stage(bounds[s], bounds[s + 1], groups) for s in range(pp)))
                if max_blocks >= 2:
                    for a, b in itertools.permutations(pools, 2):
                        for n1 in range(1, pp):
                            for ta in tps(a[0], mbs):
                                for tb in tps(b[0], mbs):
                                    if n1 * dp * ta <= pool[a] and (pp - n1) * dp * tb <= pool[b]:
                                        layouts.append([(a, ta, n1), (b, tb, pp - n1)])
                for layout in layouts:
                    hw = [(p, tp) for p, tp, n in layout for _ in range(n)]
                    for cuts in itertools.combinations(range(1, L), pp - 1):
                        bounds = (0, *cuts, L)
                        stages = tuple(
                            Stage(bounds[s], bounds[s + 1], (ReplicaGroup(hw[s][0][0], hw[s][0][1], hw[s][1], dp),))
                            for s in range(pp)
                        )
                        yield Plan(profile.name, gbs, mbs, stages)


def brute_force(
    profile: ModelProfile,
    gbs: int,
    pool: Mapping[tuple[str, str], int],
    gpu_types: Mapping[str, GPUType],
    objective: str = "throughput",
    budget: float | None = None,
    min_throughput: float | None = None,
    *,
    max_pp: int = 2,
    microbatch_sizes: tuple[int, ...] | None = None,
    max_blocks: int = 2,
    span_zones: bool = True,
    network: NetworkModel | None = None,
    config: SimConfig | PlatformConfigs = SHIPPED_PLATFORMS,
) -> tuple[Plan, SimResult]:
    """Best plan by exhaustive enumeration (same objective and constraints as the search)."""
    network = network or load_network()
    best: tuple[tuple[float, float], Plan, SimResult] | None = None
    for plan in enumerate_plans(profile, gbs, pool, gpu_types, max_pp, microbatch_sizes, max_blocks, span_zones):
        sim = simulate(plan, profile=profile, network=network, gpu_types=dict(gpu_types), config=config)
        fits = all(
            m <= gpu_types[s.replicas[0].gpu_type].memory_gb for m, s in zip(sim.memory_per_stage, plan.stages, strict=True)
        )
        if not fits:
            continue
        if objective == "throughput":
            if budget is not None and sim.cost_per_iteration > budget * (1 + 1e-12):
                continue
            key = (sim.iteration_time, sim.cost_per_iteration)
        else:
            if min_throughput is not None and sim.throughput < min_throughput * (1 - 1e-12):
                continue
            key = (sim.cost_per_iteration, sim.iteration_time)
        if best is None or key < best[0]:
            best = (key, plan, sim)
    if best is None:
        raise InfeasibleError("no feasible plan in the enumerated space")
    return best[1], best[2]
