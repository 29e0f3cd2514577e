"""Which mixed-type layouts the search prices (:mod:`heteroplan.planner.search.mixed_stages`).

- Without pruning (``SearchOptions(prune=False)``): every pair of distinct pipeline kinds (one or
  two blocks, each block one (type, zone) and TP degree), every ``dp`` up to the microbatches,
  every ``d1 + d2 = dp`` that fits the pool, every layer split: the space of
  :func:`~heteroplan.planner.search.brute_force.enumerate_mixed_plans`, exactly.
- With pruning, two passes:

  1. the best plan found so far keeps its kind and ``dp``; a second kind (one or two
     blocks, per GPU type the pool with the most idle GPUs) is added on the GPUs it leaves idle,
     ``d2`` from the most that fit downwards while it improves (``patience``). The split is exact
     (every split scored) where the splits are few (``PRUNED_ENUMERATE_UP_TO``), else the incumbent's.
  2. *mixed replicas* (Metis-style stages whose replicas differ in GPU type or TP degree): every
     pair of one-block kinds of the same depth that differ in GPU type or TP (both in one zone
     unless ``SearchOptions.span_zones``), for every
     microbatch size and every depth whose splits are few (``PRUNED_ENUMERATE_UP_TO``: every split
     scored, with the microbatch shares, :func:`~heteroplan.planner.model.microbatches.two_class_totals`,
     chosen jointly per split); the counts walk the two edges of the corner of the most replicas
     that fit: ``d1`` from its most downwards with ``d2`` the most that fits beside it, and
     ``d2`` downwards beside the most ``d1`` (``patience`` each). E.g. OPT-350 on 8 A100 + 8
     V100: one stage of 8 A100 at TP 1 and 2 V100 at TP 4 (Sailor's plan of that pool).

Both skip a layout whose lower bound (:func:`~heteroplan.planner.search.mixed_stages.mixed_lower_bound`)
cannot beat the incumbent, exceeds the budget or misses the throughput floor. Depth is limited
to pipelines whose splits can all be scored (``ENUMERATE_UP_TO``) unless a split is given.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from itertools import combinations, permutations
from math import comb

import numpy as np

from heteroplan.planner.plan import PipelineBlock, Plan
from heteroplan.planner.search.context import Candidate, SearchContext
from heteroplan.planner.search.mixed_stages import Kind, evaluate_mixed, mixed_lower_bound
from heteroplan.planner.search.split_dp import _all_splits

__all__ = ["scan_mixed", "pipeline_kinds", "kind_of", "ENUMERATE_UP_TO", "PRUNED_ENUMERATE_UP_TO"]

ENUMERATE_UP_TO = 200_000  # splits x stages scored at once per mixed layout (exact scan)
PRUNED_ENUMERATE_UP_TO = 20_000  # the same with pruning; deeper pipelines keep the incumbent's split


def pipeline_kinds(searcher: SearchContext, pp: int, mbs: int, capacity: dict[tuple[str, str], int]) -> list[Kind]:
    """One- and two-block pipelines of ``pp`` stages of which one replica fits ``capacity``."""
    pools = sorted(p for p, n in capacity.items() if n > 0)
    kinds: list[Kind] = [(PipelineBlock(p, tp, pp),) for p in pools for tp in searcher.tps(p[0], mbs)]
    if searcher.options.max_blocks >= 2:
        for a in pools:
            for b in pools:
                if a == b:
                    continue
                for n1 in range(1, pp):
                    kinds += [
                        (PipelineBlock(a, ta, n1), PipelineBlock(b, tb, pp - n1))
                        for ta in searcher.tps(a[0], mbs)
                        for tb in searcher.tps(b[0], mbs)
                    ]
    return [k for k in kinds if fits(capacity, ((k, 1),))]


def fits(capacity: dict[tuple[str, str], int], kinds: tuple[tuple[Kind, int], ...]) -> bool:
    """Whether ``count`` replicas of each kind fit ``capacity`` together."""
    used: dict[tuple[str, str], int] = {}
    for kind, count in kinds:
        for b in kind:
            used[b.pool] = used.get(b.pool, 0) + b.stages * b.tp * count
    return all(n <= capacity.get(p, 0) for p, n in used.items())


def kind_of(plan: Plan) -> Kind | None:
    """The pipeline kind of a plan whose every stage has one replica group (None otherwise)."""
    if any(len(s.replicas) != 1 for s in plan.stages):
        return None
    blocks: list[PipelineBlock] = []
    for s in plan.stages:
        g = s.replicas[0]
        if blocks and (blocks[-1].pool, blocks[-1].tp) == ((g.gpu_type, g.zone), g.tp):
            blocks[-1] = PipelineBlock(blocks[-1].pool, g.tp, blocks[-1].stages + 1)
        else:
            blocks.append(PipelineBlock((g.gpu_type, g.zone), g.tp, 1))
    return tuple(blocks)


def _splits(searcher: SearchContext, pp: int, up_to: int = ENUMERATE_UP_TO) -> np.ndarray | None:
    if comb(searcher.L - 1, pp - 1) * pp > up_to:
        return None
    return _all_splits(pp, searcher.L)


Layout = tuple[tuple[Kind, Kind], tuple[int, int], int, np.ndarray]  # kinds, counts, mbs, splits


def _groups(searcher: SearchContext) -> Iterator[Iterable[Layout]]:
    """Groups of mixed layouts to price, in the order described in the module docstring; with
    pruning a group is one second kind with ``d2`` falling from the most that fit (pass 1), or one
    edge of one pair of one-block kinds' replica counts (pass 2)."""
    if not searcher.options.prune:
        yield from _exhaustive_groups(searcher)
        return
    yield from _incumbent_groups(searcher)
    yield from _replica_mix_groups(searcher)


def _exhaustive_groups(searcher: SearchContext) -> Iterator[list[Layout]]:
    """Without pruning: every pair of kinds, ``dp`` and ``d1 + d2 = dp`` (one layout per group)."""
    pool = dict(searcher.pool)
    total = sum(pool.values())
    max_pp = searcher.options.max_pp or min(searcher.L, 16)
    for mbs in searcher.microbatch_sizes():
        M = searcher.gbs // mbs
        for pp in range(1, min(max_pp, searcher.L) + 1):
            bnd = _splits(searcher, pp)
            if bnd is None:
                continue
            for k1, k2 in combinations(pipeline_kinds(searcher, pp, mbs, pool), 2):
                for dp in range(2, min(M, total) + 1):
                    for d1 in range(1, dp):
                        if fits(pool, ((k1, d1), (k2, dp - d1))):
                            yield [((k1, k2), (d1, dp - d1), mbs, bnd)]


def _incumbent_groups(searcher: SearchContext) -> Iterator[list[Layout]]:
    """Pass 1: a second kind on the GPUs the best plan so far leaves idle."""
    pool = dict(searcher.pool)
    inc = searcher.incumbent
    kind = kind_of(inc.plan) if inc is not None else None
    if inc is None or kind is None:
        return
    plan = inc.plan
    left = {p: n - plan.gpus_by_type_zone().get(p, 0) for p, n in pool.items()}
    bnd = _splits(searcher, plan.pp, PRUNED_ENUMERATE_UP_TO)
    if bnd is None:
        bnd = np.array([[s.first_layer for s in plan.stages] + [searcher.L]], dtype=np.int64)
    M = searcher.gbs // plan.microbatch_size
    roomiest: dict[str, tuple[str, str]] = {}  # per GPU type, the pool with the most idle GPUs
    for p in sorted(left, key=lambda p: (-left[p], p)):
        if left[p] > 0:
            roomiest.setdefault(p[0], p)
    allowed = set(roomiest.values())
    for k2 in pipeline_kinds(searcher, plan.pp, plan.microbatch_size, {p: left[p] for p in allowed}):
        if k2 == kind:
            continue
        most = 0
        while plan.dp + most + 1 <= M and fits(left, ((k2, most + 1),)):
            most += 1
        yield [((kind, k2), (plan.dp, d2), plan.microbatch_size, bnd) for d2 in range(most, 0, -1)]


def scan_mixed(searcher: SearchContext) -> None:
    """Price the mixed layouts and offer each to the searcher's incumbent (with pruning, a group
    stops after ``patience`` layouts that do not improve on the group's best)."""
    patience = searcher.options.patience if searcher.options.prune else np.inf
    for group in _groups(searcher):
        best, stale = None, 0
        for layout in group:
            cand = _price(searcher, *layout)
            if cand is not None and (best is None or cand < best):
                best, stale = cand, 0
                searcher.offer(cand)
            else:
                stale += 1
                if stale >= patience:
                    break


def _price(searcher: SearchContext, kinds: tuple[Kind, Kind], counts: tuple[int, int], mbs: int, bnd: np.ndarray) -> Candidate | None:
    """The mixed layout's best candidate, or None (skipped by its bounds, or nothing fits)."""
    t_lb, c_lb = mixed_lower_bound(searcher, kinds, counts, mbs, bnd)
    if searcher.goal.bounds_fail(t_lb, c_lb):
        searcher.skipped += 1
        return None
    inc = searcher.incumbent
    if inc is not None and searcher.goal.primary(t_lb, c_lb) >= inc.key[0]:
        searcher.skipped += 1
        return None
    return evaluate_mixed(searcher, kinds, counts, mbs, bnd, inc)


def _most(capacity: dict[tuple[str, str], int], kind: Kind, limit: int) -> int:
    """The most replicas of ``kind`` (at most ``limit``) that fit ``capacity``."""
    per: dict[tuple[str, str], int] = {}
    for b in kind:
        per[b.pool] = per.get(b.pool, 0) + b.stages * b.tp
    return max(0, min([limit, *(capacity.get(p, 0) // n for p, n in per.items())]))


def _left(capacity: dict[tuple[str, str], int], kind: Kind, count: int) -> dict[tuple[str, str], int]:
    """``capacity`` less ``count`` replicas of ``kind``."""
    out = dict(capacity)
    for b in kind:
        out[b.pool] -= b.stages * b.tp * count
    return out


def _replica_mix_groups(searcher: SearchContext) -> Iterator[Iterable[Layout]]:
    """Pass 2 (mixed replicas): pairs of one-block kinds that differ in GPU type or TP degree
    (in one zone unless ``span_zones``), every microbatch
    size, depths from 1 whose splits can all be scored, stopping after ``patience`` depths that
    do not improve the best plan; two groups per pair, the edges of the corner of the most
    replicas that fit (kind 1 first; both orders where the kinds share a pool, since they then
    compete for its GPUs). Lazy: the scan prices a group before the next is made."""
    pool = dict(searcher.pool)
    pools = sorted(p for p, n in pool.items() if n > 0)
    max_pp = min(searcher.options.max_pp or min(searcher.L, 16), searcher.L)
    for mbs in searcher.microbatch_sizes():
        M = searcher.gbs // mbs
        stale = 0
        for pp in range(1, max_pp + 1):
            bnd = _splits(searcher, pp, PRUNED_ENUMERATE_UP_TO)
            if bnd is None or stale >= searcher.options.patience:
                break
            before = searcher.incumbent
            kinds = [k for k in ((PipelineBlock(p, tp, pp),) for p in pools for tp in searcher.tps(p[0], mbs))
                     if fits(pool, ((k, 1),))]
            for (i, k1), (j, k2) in permutations(enumerate(kinds), 2):
                b1, b2 = k1[0], k2[0]
                shared = b1.pool == b2.pool
                if not shared and j < i:
                    continue  # disjoint pools: the counts do not compete, one order is enough
                if (b1.pool[0], b1.tp) == (b2.pool[0], b2.tp) or (b1.pool[1] != b2.pool[1] and not searcher.options.span_zones):
                    continue  # same hardware in two zones: the zone-spanning family's (span_zones)
                d1_top = _most(pool, k1, M - 1)
                d2_top = _most(_left(pool, k1, d1_top), k2, M - d1_top) if d1_top else 0
                if d2_top < 1:
                    continue
                if not shared and _corner_fails(searcher, (k1, k2), (d1_top, d2_top), mbs):
                    searcher.skipped += 1
                    continue
                yield [((k1, k2), (d1_top, d2), mbs, bnd) for d2 in range(d2_top, 0, -1)]  # d2 falling
                yield _d1_edge(pool, (k1, k2), d1_top, M, mbs, bnd)
            stale = 0 if searcher.incumbent is not before else stale + 1


def _d1_edge(pool: dict[tuple[str, str], int], kinds: tuple[Kind, Kind], d1_top: int, M: int, mbs: int,
             bnd: np.ndarray) -> Iterator[Layout]:
    """``d1`` falling from below ``d1_top``, ``d2`` the most that fits beside it (lazily: the scan stops early)."""
    k1, k2 = kinds
    for d1 in range(d1_top - 1, 0, -1):
        d2 = _most(_left(pool, k1, d1), k2, M - d1)
        if d2 >= 1:
            yield (kinds, (d1, d2), mbs, bnd)


def _corner_fails(searcher: SearchContext, kinds: tuple[Kind, Kind], counts: tuple[int, int], mbs: int) -> bool:
    """Whether no count at or below ``counts`` can beat the incumbent: for the throughput objective
    the compute part of the time bound (:func:`~heteroplan.planner.search.mixed_stages.mixed_lower_bound`)
    only falls as replicas are added, so the corner's bounds every layout below it (the sync part
    does not fall: it is left out here)."""
    inc = searcher.incumbent
    if inc is None or not searcher.goal.wants_throughput:
        return False
    t_lb, _ = mixed_lower_bound(searcher, kinds, counts, mbs)
    return t_lb >= inc.key[0]
