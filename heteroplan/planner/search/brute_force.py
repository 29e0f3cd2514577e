"""Exhaustive enumeration of the search's plan space — the oracle the DP search is tested against.

Every microbatch size, data-parallel degree, pipeline depth, layout of up to ``max_blocks`` blocks over
every (type, zone) pool and TP degree, every homogeneous pipeline whose replicas span a set of
two or more zones of one type (``span_zones``; replicas placed by
:func:`~heteroplan.planner.search.searcher.spread_replicas`), and every contiguous layer split (and, with
``sharding``, every choice of ZeRO-1 for the stages with several replicas and ``tp == 1``) is built as a
:class:`Plan` and scored by :func:`heteroplan.planner.model.simulator.simulate_plan` (an independent
code path from the search's matrices). Exponential in the pipeline depth: small cases only.
:func:`brute_force_pipeline_set` does the same for sets of two independent pipelines
(:func:`~heteroplan.planner.model.pipeline_set.simulate_pipeline_set`).
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, replace
from typing import TypeVar

from heteroplan.cluster import GPUType
from heteroplan.errors import InfeasibleError, InputError
from heteroplan.perf.sailor_network import NetworkModel, load_network
from heteroplan.perf.sailor_profiles import ModelProfile
from heteroplan.planner.goal import Goal
from heteroplan.planner.model.microbatches import class_microbatches, two_class_totals
from heteroplan.planner.model.pipeline_set import PipelineSetEstimate, simulate_pipeline_set
from heteroplan.planner.model.simulator import (
    SHIPPED_PLATFORMS,
    PlanEstimate,
    PlatformConfigs,
    SimConfig,
    simulate_plan,
)
from heteroplan.planner.pipeline_set import PipelineSet
from heteroplan.planner.plan import OptimizerSharding, Plan, ReplicaGroup, Stage
from heteroplan.planner.request import PlanRequest
from heteroplan.planner.search.context import spread_replicas

__all__ = ["PlanSpace", "enumerate_plans", "enumerate_mixed_plans", "brute_force", "sharding_variants", "enumerate_pipeline_sets",
           "brute_force_pipeline_set"]

C = TypeVar("C", Plan, PipelineSet)
E = TypeVar("E", PlanEstimate, PipelineSetEstimate)


@dataclass(frozen=True)
class PlanSpace:
    """What every enumeration ranges over: a model's profile, the global batch (samples), the pool
    ``{(type, zone): GPUs}`` and GPU catalog, the deepest pipeline and the microbatch sizes (None: all
    profiled); the pools, microbatch sizes and TP degrees the enumerations loop over follow from them."""

    profile: ModelProfile
    gbs: int
    pool: Mapping[tuple[str, str], int]
    gpu_types: Mapping[str, GPUType]
    max_pp: int
    microbatch_sizes: tuple[int, ...] | None = None

    @property
    def pools(self) -> list[tuple[str, str]]:
        """The pools with GPUs of a profiled type, sorted."""
        return sorted(k for k, v in self.pool.items() if v > 0 and k[0] in self.profile.gpu_types)

    @property
    def total(self) -> int:
        """GPUs of :attr:`pools`."""
        return sum(self.pool[p] for p in self.pools)

    @property
    def mbs_all(self) -> list[int]:
        """The profiled microbatch sizes (of :attr:`microbatch_sizes` if given) that divide ``gbs``, sorted."""
        sizes = sorted({m for t, _ in self.pools for m in self.profile.microbatch_sizes(t)})
        return [m for m in sizes if (not self.microbatch_sizes or m in self.microbatch_sizes) and self.gbs % m == 0]

    def tps(self, gpu: str, mbs: int) -> list[int]:
        """The profiled TP degrees of ``gpu`` at microbatch size ``mbs`` that fit in one node."""
        return [t for t in self.profile.tp_degrees(gpu, mbs) if t <= self.gpu_types[gpu].gpus_per_node]


def enumerate_plans(
    profile: ModelProfile,
    gbs: int,
    pool: Mapping[tuple[str, str], int],
    gpu_types: Mapping[str, GPUType],
    max_pp: int,
    microbatch_sizes: tuple[int, ...] | None = None,
    max_blocks: int = 3,
    span_zones: bool = True,
    sharding: bool = False,
) -> Iterator[Plan]:
    """Every plan of the search space that respects GPU counts (memory is not checked here);
    ``sharding``: each also with every subset of its shardable stages under ZeRO-1 (:func:`sharding_variants`)."""
    plans = _enumerate_plans(PlanSpace(profile, gbs, pool, gpu_types, max_pp, microbatch_sizes), max_blocks, span_zones)
    if not sharding:
        yield from plans
        return
    for plan in plans:
        yield from sharding_variants(plan)


def sharding_variants(plan: Plan) -> Iterator[Plan]:
    """``plan`` with every subset of its stages that have several replicas, all of TP 1, sharding
    their optimizer state (ZeRO-1); the stages' other sharding as in ``plan``."""
    shardable = [s for s, st in enumerate(plan.stages) if plan.dp > 1 and all(g.tp == 1 for g in st.replicas)]
    for chosen in itertools.product((False, True), repeat=len(shardable)):
        on = {s for s, c in zip(shardable, chosen, strict=True) if c}
        yield replace(plan, stages=tuple(
            replace(st, optimizer_sharding=OptimizerSharding.ZERO1) if s in on else st for s, st in enumerate(plan.stages)))


def _enumerate_plans(space: PlanSpace, max_blocks: int, span_zones: bool) -> Iterator[Plan]:
    profile, gbs, pool, max_pp, tps = space.profile, space.gbs, space.pool, space.max_pp, space.tps
    L = profile.num_layers
    pools, total, mbs_all = space.pools, space.total, space.mbs_all
    for mbs in mbs_all:
        per = gbs // mbs
        for dp in (d for d in range(1, min(per, total) + 1) if per % d == 0):
            for pp in range(1, min(max_pp, L) + 1):
                layouts = [k for k in _kinds(pools, tps, mbs, pp, max_blocks) if _fits(pool, ((k, dp),))]
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
                for layout in layouts:
                    hw = [(p, tp) for p, tp, n in layout for _ in range(n)]
                    for cuts in itertools.combinations(range(1, L), pp - 1):
                        bounds = (0, *cuts, L)
                        stages = tuple(
                            Stage(bounds[s], bounds[s + 1], (ReplicaGroup(hw[s][0][0], hw[s][0][1], hw[s][1], dp),))
                            for s in range(pp)
                        )
                        yield Plan(profile.name, gbs, mbs, stages)


Kind = tuple[tuple[tuple[str, str], int, int], ...]  # ((pool, tp, stages), ...): one pipeline replica's blocks


def _kinds(pools: list[tuple[str, str]], tps, mbs: int, pp: int, max_blocks: int) -> list[Kind]:
    """Every pipeline of ``pp`` stages in up to ``max_blocks`` (<= 3) blocks whose neighbouring
    pools differ (capacity not checked)."""
    out: list[Kind] = [((p, tp, pp),) for p in pools for tp in tps(p[0], mbs)]
    if max_blocks >= 2:
        for a, b in itertools.permutations(pools, 2):
            for n1 in range(1, pp):
                out += [((a, ta, n1), (b, tb, pp - n1)) for ta in tps(a[0], mbs) for tb in tps(b[0], mbs)]
    if max_blocks >= 3:
        for a, b, c in itertools.product(pools, repeat=3):
            if a == b or b == c:
                continue
            for n1, n2 in ((i, j) for i in range(1, pp - 1) for j in range(1, pp - i)):
                out += [((a, ta, n1), (b, tb, n2), (c, tc, pp - n1 - n2))
                        for ta in tps(a[0], mbs) for tb in tps(b[0], mbs) for tc in tps(c[0], mbs)]
    return out


def _fits(pool: Mapping[tuple[str, str], int], kinds: tuple[tuple[Kind, int], ...]) -> bool:
    """Whether ``count`` replicas of each kind fit the pool together."""
    used: dict[tuple[str, str], int] = {}
    for kind, count in kinds:
        for p, tp, n in kind:
            used[p] = used.get(p, 0) + n * tp * count
    return all(n <= pool.get(p, 0) for p, n in used.items())


def enumerate_mixed_plans(
    space: PlanSpace,
    max_blocks: int = 3,
    *,
    network: NetworkModel | None = None,
    config: SimConfig | PlatformConfigs = SHIPPED_PLATFORMS,
    every_share: bool = False,
) -> Iterator[Plan]:
    """Every plan whose stages mix two pipeline kinds (``d1 + d2`` replicas, any ``dp``, one
    shared split), microbatches shared by :func:`~heteroplan.planner.model.microbatches.two_class_totals`
    on the per-replica times that :func:`simulate_plan` reports (capacity checked, memory not);
    ``every_share``: instead each with every way to share the iteration's microbatches among its
    replicas (each at least one; an oracle for the shares the search chooses, tiny cases only)."""
    network = network or load_network()
    profile, gbs, pool, gpu_types, max_pp, tps = space.profile, space.gbs, space.pool, space.gpu_types, space.max_pp, space.tps
    L = profile.num_layers
    pools, total, mbs_all = space.pools, space.total, space.mbs_all
    for mbs in mbs_all:
        M = gbs // mbs
        for pp in range(1, min(max_pp, L) + 1):
            kinds = _kinds(pools, tps, mbs, pp, min(max_blocks, 2))
            for k1, k2 in itertools.combinations(kinds, 2):
                for dp in range(2, min(M, total) + 1):
                    for d1 in range(1, dp):
                        if not _fits(pool, ((k1, d1), (k2, dp - d1))):
                            continue
                        for cuts in itertools.combinations(range(1, L), pp - 1):
                            plan = _mixed_plan(profile, gbs, mbs, (0, *cuts, L), (k1, k2), (d1, dp - d1), network, gpu_types, config)
                            yield from _every_share(plan) if every_share else (plan,)


def _every_share(plan: Plan) -> Iterator[Plan]:
    """``plan`` with every sharing of its microbatches among its replicas (each at least one)."""
    total, D = sum(plan.microbatches()), plan.dp
    for cuts in itertools.combinations(range(1, total), D - 1):
        yield replace(plan, microbatches_per_replica=tuple(b - a for a, b in zip((0, *cuts), (*cuts, total), strict=True)))


def _mixed_plan(profile, gbs, mbs, bounds, kinds, counts, network, gpu_types, config) -> Plan:
    """The mixed plan with its microbatches shared on the per-replica times ``simulate`` gives."""
    hw = [[(p, tp) for p, tp, n in kind for _ in range(n)] for kind in kinds]
    d1, d2 = counts
    stages = []
    for s in range(len(bounds) - 1):
        (p1, t1), (p2, t2) = hw[0][s], hw[1][s]
        groups = (ReplicaGroup(p1[0], p1[1], t1, d1), ReplicaGroup(p2[0], p2[1], t2, d2))
        if (p1, t1) == (p2, t2):
            groups = (ReplicaGroup(p1[0], p1[1], t1, d1 + d2),)
        stages.append(Stage(bounds[s], bounds[s + 1], groups))
    M = gbs // mbs
    trial = Plan(profile.name, gbs, mbs, tuple(stages), (1,) * (d1 + d2 - 1) + (M - d1 - d2 + 1,))
    times = simulate_plan(trial, profile=profile, network=network, gpu_types=dict(gpu_types), config=config).stage_times
    fb, comm = times.compute, times.pipeline_send
    step = (fb + 2 * (comm[:-1] + comm[1:])).max(axis=0)
    fixed = fb.sum(axis=0) + 2 * comm.sum(axis=0)
    big1, _ = two_class_totals(step[0], fixed[0], d1, step[d1], fixed[d1], d2, M)
    return replace(trial, microbatches_per_replica=class_microbatches(counts, (int(big1), M - int(big1))))


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
    max_blocks: int = 3,
    span_zones: bool = True,
    mixed: bool = False,
    sharding: bool = False,
    network: NetworkModel | None = None,
    config: SimConfig | PlatformConfigs = SHIPPED_PLATFORMS,
    every_share: bool = False,
) -> tuple[Plan, PlanEstimate]:
    """Best plan by exhaustive enumeration (same objective and constraints as the search);
    ``mixed`` adds the plans whose stages mix two pipeline kinds (:func:`enumerate_mixed_plans`;
    ``every_share``: with every sharing of the microbatches among their replicas);
    ``sharding`` every choice of ZeRO-1 for the stages with several replicas and TP 1 (not of the
    mixed plans)."""
    network = network or load_network()
    goal = Goal(objective, budget, min_throughput)
    plans = enumerate_plans(profile, gbs, pool, gpu_types, max_pp, microbatch_sizes, max_blocks, span_zones, sharding)
    if mixed:
        plans = itertools.chain(plans, enumerate_mixed_plans(
            PlanSpace(profile, gbs, pool, gpu_types, max_pp, microbatch_sizes), max_blocks, network=network, config=config,
            every_share=every_share))

    def fitting(plan: Plan) -> PlanEstimate | None:
        sim = simulate_plan(plan, profile=profile, network=network, gpu_types=dict(gpu_types), config=config)
        limit = [[gpu_types[r.gpu_type].memory_gb for r in s.replica_list()] for s in plan.stages]
        return sim if (sim.stage_memory.total <= limit).all() else None

    return _best_by_goal(plans, fitting, goal, "no feasible plan in the enumerated space")


def enumerate_pipeline_sets(space: PlanSpace) -> Iterator[PipelineSet]:
    """Every set of two independent one-block pipelines on two different pools: each any TP,
    depth up to ``max_pp``, layer split, ``dp`` and microbatch size, the two fitting the pool
    together, with every sharing of the global batch (each replica at least one microbatch, spread
    evenly over a pipeline's replicas). Memory is not checked here."""
    profile, gbs, pool, max_pp, tps = space.profile, space.gbs, space.pool, space.max_pp, space.tps
    L = profile.num_layers
    pools, mbs_all = space.pools, space.mbs_all
    pipes: list[tuple[tuple[str, str], int, int, int, tuple[int, ...], int]] = []  # pool, tp, pp, dp, bounds, mbs
    for p in pools:
        for mbs in mbs_all:
            for tp in tps(p[0], mbs):
                for pp in range(1, min(max_pp, L) + 1):
                    for dp in range(1, pool[p] // (tp * pp) + 1):
                        for cuts in itertools.combinations(range(1, L), pp - 1):
                            pipes.append((p, tp, pp, dp, (0, *cuts, L), mbs))
    for one, two in itertools.combinations(pipes, 2):
        if one[0] == two[0]:
            continue
        (p1, t1, _, d1, b1, m1), (p2, t2, _, d2, b2, m2) = one, two
        for n1 in range(d1, gbs // m1 + 1):
            rest = gbs - n1 * m1
            if rest % m2 or rest // m2 < d2:
                continue
            yield PipelineSet((_one_block(profile, n1, m1, b1, p1, t1, d1), _one_block(profile, rest // m2, m2, b2, p2, t2, d2)))


def _one_block(profile: ModelProfile, micro: int, mbs: int, bounds: tuple[int, ...], pool: tuple[str, str], tp: int,
               dp: int) -> Plan:
    """A one-block pipeline running ``micro`` microbatches of ``mbs`` spread evenly over ``dp`` replicas."""
    groups = (ReplicaGroup(pool[0], pool[1], tp, dp),)
    return Plan(profile.name, micro * mbs, mbs, tuple(Stage(a, b, groups) for a, b in zip(bounds[:-1], bounds[1:], strict=True)),
                class_microbatches((dp,), (micro,)))


def brute_force_pipeline_set(request: PlanRequest) -> tuple[PipelineSet, PipelineSetEstimate]:
    """The best set of :func:`enumerate_pipeline_sets` (depth up to ``request.options.max_pp``, which
    the oracle needs set; its ``microbatch_sizes``) that fits memory and meets the request's goal,
    priced by :func:`~heteroplan.planner.model.pipeline_set.simulate_pipeline_set` with the request's
    network and ``options.config``; tiny pools only."""
    if not isinstance(request, PlanRequest):
        raise InputError("request", type(request).__name__, "must be a PlanRequest (PlanRequest.build(model, gbs, pool))")
    options = request.options
    if options.max_pp is None:
        raise InputError("options.max_pp", None, "the pipeline-set oracle needs a depth bound (tiny pools only)")
    gpu_types = dict(request.gpu_types)

    def fitting(pset: PipelineSet) -> PipelineSetEstimate | None:
        est = simulate_pipeline_set(pset, profile=request.profile, network=request.network, gpu_types=gpu_types,
                                    config=options.config)
        return est if est.fits else None

    psets = enumerate_pipeline_sets(PlanSpace(request.profile, request.gbs, request.pool, gpu_types, options.max_pp,
                                              options.microbatch_sizes))
    return _best_by_goal(psets, fitting, request.goal, "no feasible set of independent pipelines in the enumerated space")


def _best_by_goal(candidates: Iterable[C], fitting: Callable[[C], E | None], goal: Goal,
                  none_found: str) -> tuple[C, E]:
    """The candidate whose estimate (``fitting``'s; None: it does not fit memory) meets ``goal`` with
    the least :meth:`Goal.key`, the first of ties; :class:`InfeasibleError` saying ``none_found`` if none."""
    best: tuple[tuple[float, float], C, E] | None = None
    for candidate in candidates:
        est = fitting(candidate)
        if est is None or not goal.meets(est.iteration_time_s, est.cost_per_iteration_usd):
            continue
        key = goal.key(est.iteration_time_s, est.cost_per_iteration_usd)
        if best is None or key < best[0]:
            best = (key, candidate, est)
    if best is None:
        raise InfeasibleError(none_found)
    return best[1], best[2]
