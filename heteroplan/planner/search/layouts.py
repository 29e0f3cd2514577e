"""The layout strategies of the search: which block layouts it prices for a pipeline depth,
microbatch size and data-parallel degree. Each reads only the search context.

- :func:`one_block`: one (GPU type, zone) pool, TP rising;
- :func:`spanning_zones`: one GPU type whose replicas span zones;
- :func:`two_blocks`: two pools, the split of stages between them;
- :func:`three_blocks`: three pools.

:func:`layouts` yields them as groups of rows (first block's TP) of layouts (second block's TP).
"""

from __future__ import annotations

from collections.abc import Iterator
from itertools import combinations

from heteroplan.planner.plan import PipelineBlock
from heteroplan.planner.search.context import (
    Pool,
    SearchContext,
    Spread,
    ring_links,
    spread_replicas,
)

__all__ = ["Layout", "layouts", "one_block", "spanning_zones", "two_blocks", "three_blocks", "single_pools", "pairs", "triples"]

Layout = tuple[list[PipelineBlock], Spread | None]


def single_pools(ctx: SearchContext) -> list[Pool]:
    """Pools of one-block pipelines: all, or with pruning the largest pool of each GPU type."""
    pools = sorted(ctx.pool, key=lambda p: (p[0], -ctx.pool[p], p[1]))
    if not ctx.options.prune:
        return pools
    seen: dict[str, Pool] = {}
    for p in pools:
        seen.setdefault(p[0], p)
    return list(seen.values())


def pairs(ctx: SearchContext) -> list[tuple[Pool, Pool]]:
    """Pool pairs of two-block pipelines: all ordered pairs, or with pruning one per pair of GPU
    types (the largest pools, then the cheapest egress)."""
    pools = sorted(ctx.pool, key=lambda p: (p[0], -ctx.pool[p], p[1]))
    pairs = [(a, b) for a in pools for b in pools if a != b]
    if not ctx.options.prune:
        return pairs
    chosen: dict[tuple[str, str], tuple[Pool, Pool]] = {}
    for a, b in sorted(
        pairs,
        key=lambda ab: (
            -ctx.pool[ab[0]],
            -ctx.pool[ab[1]],
            ctx.network.egress_per_gb(ab[0][1], ab[1][1]),
            ab,
        ),
    ):
        chosen.setdefault((a[0], b[0]), (a, b))
    return list(chosen.values())


def layouts(ctx: SearchContext, pp: int, mbs: int, dp: int, max_blocks: int) -> Iterator[list[list[Layout]]]:
    """Groups of layouts of ``max_blocks`` blocks (one block: also spanning zones) as rows (first
    block's TP) of columns (second block's TP), TP rising."""
    if max_blocks == 1:
        yield from one_block(ctx, pp, mbs, dp)
        if ctx.options.span_zones:
            yield from spanning_zones(ctx, pp, mbs, dp)
    if max_blocks == 3 and pp >= 3:
        yield from three_blocks(ctx, pp, mbs, dp)
    if max_blocks == 2 and pp >= 2:
        yield from two_blocks(ctx, pp, mbs, dp)


def one_block(ctx: SearchContext, pp: int, mbs: int, dp: int) -> Iterator[list[list[Layout]]]:
    """Homogeneous pipelines on one pool (with pruning, the largest pool of each GPU type): a group
    per pool, a row per TP degree."""
    for pool in single_pools(ctx):
        rows = [[([PipelineBlock(pool, tp, pp)], None)] for tp in ctx.tps(pool[0], mbs) if pp * dp * tp <= ctx.pool[pool]]
        if rows:
            yield rows


def two_blocks(ctx: SearchContext, pp: int, mbs: int, dp: int) -> Iterator[list[list[Layout]]]:
    """Two-block pipelines: a group per (pool pair, stages of the first block), rows by the first
    block's TP, columns by the second's."""
    for a, b in pairs(ctx):
        for n1 in range(1, pp):
            rows = []
            for ta in ctx.tps(a[0], mbs):
                if n1 * dp * ta > ctx.pool[a]:
                    continue
                row: list[Layout] = [
                    ([PipelineBlock(a, ta, n1), PipelineBlock(b, tb, pp - n1)], None)
                    for tb in ctx.tps(b[0], mbs)
                    if (pp - n1) * dp * tb <= ctx.pool[b]
                    # same type in two zones only when one zone cannot hold the pipeline
                    and not (ctx.options.prune and a[0] == b[0] and (n1 * ta + (pp - n1) * tb) * dp <= ctx.pool[a])
                ]
                if row:
                    rows.append(row)
            if rows:
                yield rows


def triples(ctx: SearchContext) -> list[tuple[Pool, Pool, Pool]]:
    """Pool chains of three-block pipelines (neighbours differ). With pruning: three distinct
    pools, not all of one type (zone-spanning covers that), one chain per sequence of types
    (the largest pools, then the cheapest egress)."""
    pools = sorted(ctx.pool)
    chains = [(a, b, c) for a in pools for b in pools for c in pools if a != b and b != c]
    if not ctx.options.prune:
        return chains
    chosen: dict[tuple[str, str, str], tuple[Pool, Pool, Pool]] = {}
    for ch in sorted(
        (ch for ch in chains if len(set(ch)) == 3 and len({p[0] for p in ch}) > 1),
        key=lambda ch: (
            -min(ctx.pool[p] for p in ch),
            -sum(ctx.pool[p] for p in ch),
            sum(ctx.network.egress_per_gb(x[1], y[1]) for x, y in zip(ch, ch[1:], strict=False)),
            ch,
        ),
    ):
        chosen.setdefault(tuple(p[0] for p in ch), ch)
    return list(chosen.values())


def three_blocks(ctx: SearchContext, pp: int, mbs: int, dp: int) -> Iterator[list[list[Layout]]]:
    """Three-block pipelines: a group per (chain, stages per block), rows by the first two
    blocks' TP, columns by the third's (TP rising)."""
    for chain in triples(ctx):
        for n1 in range(1, pp - 1):
            for n2 in range(1, pp - n1):
                counts = (n1, n2, pp - n1 - n2)
                rows: list[list[Layout]] = []
                for ta in ctx.tps(chain[0][0], mbs):
                    for tb in ctx.tps(chain[1][0], mbs):
                        row: list[Layout] = []
                        for tc in ctx.tps(chain[2][0], mbs):
                            blocks = [PipelineBlock(p, t, n) for p, t, n in zip(chain, (ta, tb, tc), counts, strict=True)]
                            used: dict[Pool, int] = {}
                            for blk in blocks:
                                used[blk.pool] = used.get(blk.pool, 0) + blk.stages * blk.tp * dp
                            if all(n <= ctx.pool[p] for p, n in used.items()):
                                row.append((blocks, None))
                        if row:
                            rows.append(row)
                if rows:
                    yield rows


def spanning_zones(ctx: SearchContext, pp: int, mbs: int, dp: int) -> Iterator[list[list[Layout]]]:
    """Homogeneous pipelines whose ``dp`` replicas span two or more zones of one GPU type.

    Without pruning: every set of zones that holds the replicas. With pruning: only when no
    zone holds them alone, the fewest zones that do, and of those the set whose ring is
    fastest (then cheapest in egress)."""
    for gpu in sorted({t for t, _ in ctx.pool}):
        zones = sorted(z for t, z in ctx.pool if t == gpu)
        if len(zones) < 2:
            continue
        groups: dict[tuple[str, ...], list[list[Layout]]] = {}
        for tp in ctx.tps(gpu, mbs):
            cap = {z: ctx.pool[(gpu, z)] // (pp * tp) for z in zones}
            if ctx.options.prune and max(cap.values()) >= dp:
                continue
            sets = [c for k in range(2, len(zones) + 1) for c in combinations(zones, k)]
            spreads = [sp for c in sets if (sp := spread_replicas(cap, c, dp)) is not None]
            if ctx.options.prune and spreads:
                fewest = min(len(sp) for sp in spreads)
                spreads = [min((sp for sp in spreads if len(sp) == fewest), key=lambda sp: ring_rank(ctx, gpu, sp, tp, mbs))]
            for sp in spreads:
                key = () if ctx.options.prune else tuple(z for z, _ in sp)
                groups.setdefault(key, []).append([([PipelineBlock((gpu, sp[0][0]), tp, pp)], sp)])
        yield from groups.values()


def ring_rank(ctx: SearchContext, gpu: str, spread: Spread, tp: int, mbs: int) -> tuple[float, float]:
    """(seconds of the ring's slowest link for the whole model's gradient, egress $/GB summed
    over the ring's edges): how good a zone-spanning ring is, for choosing among zone sets."""
    links = ring_links(gpu, spread)
    return max(ctx.link_s(link, tp, mbs) for link in links), sum(ctx.network.egress_per_gb(a[1], b[1]) for a, b in links)
