"""Plans whose stages mix GPU types: two kinds of pipeline replica over one layer split.

A *mixed layout* is two pipeline kinds (each a list of :class:`PipelineBlock`, same depth) with
``d1`` and ``d2`` replicas: stage ``s`` then holds ``d1`` replicas on kind 1's stage-``s`` hardware
and ``d2`` on kind 2's (e.g. Sailor's A100+V100 plan whose last stage mixes both types). Both
kinds share the layer split. Priced exactly as :func:`~heteroplan.planner.model.simulator.simulate_plan`
prices the plan (the split and the sharing are chosen on the closed form; a chosen split with a
buffered pipeline send is then priced by ``simulate`` itself, which replays that replica):

- the iteration's microbatches are shared so that the slowest replica finishes first
  (:func:`~heteroplan.planner.model.microbatches.two_class_totals`; faster replicas run more);
- a stage's all-reduce ring runs over its replicas in plan order (kind 1, then kind 2), at the
  slowest link of the ring, over the smallest TP degree's gradient shard; cross-zone ring edges
  pay egress;
- each replica must fit its own GPU's memory, with the microbatches it holds in flight.

:func:`evaluate_mixed` scores every split it is given at once (vectorized) and keeps the best.
"""

from __future__ import annotations

import numpy as np

from heteroplan.planner.model import sync
from heteroplan.planner.model.microbatches import class_microbatches, two_class_totals
from heteroplan.planner.model.simulator import simulate_plan
from heteroplan.planner.model.terms import (
    pipeline_fill_s,
    pipeline_step_s,
)
from heteroplan.planner.plan import PipelineBlock, Plan, ReplicaGroup, Stage
from heteroplan.planner.search.context import Candidate, SearchContext

__all__ = ["Kind", "stage_hardware", "evaluate_mixed", "mixed_lower_bound", "mixed_groups"]

Kind = tuple[PipelineBlock, ...]  # one pipeline replica's blocks


def _buffers(searcher: SearchContext, hw1: list[PipelineBlock], hw2: list[PipelineBlock], mbs: int, bounds: np.ndarray) -> bool:
    """Whether a pipeline send of either kind is buffered under the split ``bounds``."""
    ends = np.asarray(bounds)[1:-1]
    return any(bool(searcher.buffered(hw, mbs)[np.arange(len(ends)), ends].any()) for hw in (hw1, hw2))


def stage_hardware(kind: Kind) -> list[PipelineBlock]:
    """The block of each stage of a pipeline kind (blocks expanded, one entry per stage)."""
    return [b for b in kind for _ in range(b.stages)]


def mixed_groups(h1: PipelineBlock, d1: int, h2: PipelineBlock, d2: int) -> tuple[ReplicaGroup, ...]:
    """A mixed stage's replica groups in plan order (kind 1 first; one group when both agree)."""
    if (h1.pool, h1.tp) == (h2.pool, h2.tp):
        return (ReplicaGroup(h1.pool[0], h1.pool[1], h1.tp, d1 + d2),)
    return (ReplicaGroup(h1.pool[0], h1.pool[1], h1.tp, d1), ReplicaGroup(h2.pool[0], h2.pool[1], h2.tp, d2))


def mixed_lower_bound(searcher: SearchContext, kinds: tuple[Kind, Kind], counts: tuple[int, int], mbs: int,
                      bnd: np.ndarray | None = None) -> tuple[float, float]:
    """Lower bounds (iteration seconds, $/iteration) of any split of a mixed layout (of the splits
    ``bnd``, when given).

    Kind ``c``'s slowest replica runs ``m_c`` microbatches, ``sum_c d_c m_c >= M``, and takes at
    least ``(m_c - 1) beta_c + F`` (``beta_c``: :meth:`Searcher.lower_bound`'s bottleneck bound,
    ``F`` the least whole-model compute of any block); so
    ``T >= F + (M - D) / sum_c (d_c / beta_c)``. With ``bnd``, plus the least over those splits of
    the slowest stage's all-reduce and update (the time is the pipeline's plus that sync, so the
    least of each part bounds their sum)."""
    M = searcher.gbs // mbs
    speed, least = 0.0, np.inf
    for kind, d in zip(kinds, counts, strict=True):
        full = [float(searcher.table(b.pool[0], b.tp, mbs).fb[0, searcher.L]) for b in kind]
        speed += d * sum(b.stages / max(f, 1e-12) for b, f in zip(kind, full, strict=True))
        least = min(least, *full)
    t_lb = least + (M - sum(counts)) / speed
    if bnd is not None:
        t_lb += _least_sync(searcher, kinds, counts, mbs, bnd)
    return t_lb, mixed_rate(searcher, kinds, counts) * t_lb


def _least_sync(searcher: SearchContext, kinds: tuple[Kind, Kind], counts: tuple[int, int], mbs: int,
                bnd: np.ndarray) -> float:
    """The least over the splits ``bnd`` of the slowest stage's all-reduce + update seconds."""
    hw1, hw2 = stage_hardware(kinds[0]), stage_hardware(kinds[1])
    sync = np.zeros(len(bnd))
    for s in range(len(hw1)):
        y, _ = _ring(searcher, hw1[s], counts[0], hw2[s], counts[1], mbs)
        sync = np.maximum(sync, y[bnd[:, s], bnd[:, s + 1]])
    return float(sync.min())


def mixed_rate(searcher: SearchContext, kinds: tuple[Kind, Kind], counts: tuple[int, int]) -> float:
    """$/s of a mixed layout's GPUs."""
    return sum(searcher.rate(list(k), d) for k, d in zip(kinds, counts, strict=True))


def _pipeline_parts(searcher: SearchContext, kind: Kind, mbs: int, bnd: np.ndarray) -> tuple[np.ndarray, ...]:
    """Per split (rows of ``bnd``): step seconds, fill-and-drain seconds, egress $ per microbatch of
    one replica of ``kind``, and (stages, K) memory GB at 1 and per extra in-flight microbatch."""
    stages = stage_hardware(kind)
    K, pp = len(bnd), len(stages)
    step = np.zeros(K)
    fixed = np.zeros(K)
    egress = np.zeros(K)
    mem0 = np.zeros((pp, K))
    mem1 = np.zeros((pp, K))
    floor = np.zeros((pp, K))  # the optimizer step's and the all-reduce's peak (a stage has >= 2 replicas)
    c_in = np.zeros(K)
    for s, blk in enumerate(stages):
        a, b = bnd[:, s], bnd[:, s + 1]
        tab = searcher.table(blk.pool[0], blk.tp, mbs)
        c_out = np.zeros(K)
        if s + 1 < pp:
            nxt = stages[s + 1]
            c_out = searcher.send_s(blk, nxt, mbs)[b]
            egress += sync.boundary_egress(searcher.network, blk.pool[1], nxt.pool[1], tab.out_bytes[b], blk.tp, 1,
                                           searcher.cfg.for_gpu(blk.pool[0]))[1]
        fb = tab.fb[a, b]
        step = np.maximum(step, pipeline_step_s(fb, c_in, c_out))
        fixed += pipeline_fill_s(fb, c_out)
        mem0[s], mem1[s], floor[s] = tab.mem_static[a, b], tab.mem_per_inflight[a, b], tab.floor(2)[a, b]
        c_in = c_out
    return step, fixed, egress, mem0, mem1, floor


def _ring(searcher: SearchContext, h1: PipelineBlock, d1: int, h2: PipelineBlock, d2: int, mbs: int) -> tuple[np.ndarray, np.ndarray]:
    """``(L+1, L+1)`` matrices by layer range of a stage whose replicas are ``d1`` on ``h1`` then
    ``d2`` on ``h2``: seconds of all-reduce + update, and the ring's egress $ (the ring as
    ``simulate`` walks it). Cached on the searcher."""
    edges = sync.ring_edges([h1.pool] * d1 + [h2.pool] * d2)
    links = set(edges)
    key = ("mixed", h1.pool, h1.tp, h2.pool, h2.tp, d1 + d2, frozenset((e, edges.count(e)) for e in links), mbs)
    if key not in searcher.cache:
        D = d1 + d2
        cfgs = [searcher.cfg.for_gpu(h1.pool[0]), searcher.cfg.for_gpu(h2.pool[0])]
        ring_cfg = max(cfgs, key=lambda c: c.allreduce_latency_s)
        tp = min(h1.tp, h2.tp)
        params = searcher.profile.size_prefix(tp)[0]
        grad = ring_cfg.grad_bytes_per_param * (params[None, :] - params[:, None])
        finite = np.triu(np.ones(grad.shape, dtype=bool), 1)
        ar = sync.ring_sync_s(searcher.network, links, tp, D, np.where(finite, grad, np.inf), ring_cfg)
        update = np.maximum(searcher.table(h1.pool[0], h1.tp, mbs).update, searcher.table(h2.pool[0], h2.tp, mbs).update)
        egress = sync.ring_egress(searcher.network, edges, D, tp, np.where(finite, grad, 1.0))[1] + np.zeros(grad.shape)
        searcher.cache[key] = (sync.stage_sync_s(ar, update), egress)
    return searcher.cache[key]


def evaluate_mixed(
    searcher: SearchContext, kinds: tuple[Kind, Kind], counts: tuple[int, int], mbs: int, bnd: np.ndarray,
    incumbent: Candidate | None = None,
) -> Candidate | None:
    """Best of the splits ``bnd`` (K, pp+1) for ``counts[c]`` replicas of ``kinds[c]``; None if no
    split fits memory, meets the budget / throughput floor and beats ``incumbent``. Assumes no
    rank speed noise."""

    d1, d2 = counts
    M = searcher.gbs // mbs
    if M < d1 + d2:
        return None
    searcher.evaluated += 1
    st1, fx1, eg1, m0a, m1a, fla = _pipeline_parts(searcher, kinds[0], mbs, bnd)
    st2, fx2, eg2, m0b, m1b, flb = _pipeline_parts(searcher, kinds[1], mbs, bnd)
    big1, pipe = two_class_totals(st1, fx1, d1, st2, fx2, d2, M)
    big2 = M - big1
    hw1, hw2 = stage_hardware(kinds[0]), stage_hardware(kinds[1])
    pp = len(hw1)
    inflight1 = np.minimum(np.arange(pp, 0, -1)[:, None], -(-big1 // d1)[None, :])
    inflight2 = np.minimum(np.arange(pp, 0, -1)[:, None], -(-big2 // d2)[None, :])
    mem1 = np.maximum(m0a + m1a * inflight1, fla)
    mem2 = np.maximum(m0b + m1b * inflight2, flb)
    cap1 = np.array([searcher.gpu_types[h.pool[0]].memory_gb for h in hw1])[:, None]
    cap2 = np.array([searcher.gpu_types[h.pool[0]].memory_gb for h in hw2])[:, None]
    ok = np.all(mem1 <= cap1, axis=0) & np.all(mem2 <= cap2, axis=0)
    sync = np.zeros(len(bnd))
    egress = eg1 * big1 + eg2 * big2
    for s in range(pp):
        y, e = _ring(searcher, hw1[s], d1, hw2[s], d2, mbs)
        a, b = bnd[:, s], bnd[:, s + 1]
        sync = np.maximum(sync, y[a, b])
        egress = egress + e[a, b]
    t_iter = pipe + sync
    cost = mixed_rate(searcher, kinds, counts) * t_iter + egress
    goal = searcher.goal
    ok &= goal.meets(t_iter, cost)
    k = int(goal.order(t_iter, cost, ok)[0])
    t, c = float(t_iter[k]), float(cost[k])
    key = goal.key(t, c)
    bounds = bnd[k]
    replayed = _buffers(searcher, hw1, hw2, mbs, bounds)
    if not ok[k] or (incumbent is not None and key >= incumbent.key and not replayed):
        return None
    stages = tuple(
        Stage(int(bounds[s]), int(bounds[s + 1]), mixed_groups(hw1[s], d1, hw2[s], d2), searcher.recompute)
        for s in range(pp)
    )
    micro = class_microbatches(counts, (int(big1[k]), int(big2[k])))
    plan = Plan(searcher.profile.name, searcher.gbs, mbs, stages, micro, searcher.precision)
    if replayed:
        # simulate replays a replica with buffered sends: the split and the sharing stay the
        # closed form's, the time and cost are simulate's
        sim = simulate_plan(plan, profile=searcher.profile, network=searcher.network, gpu_types=searcher.gpu_types,
                       config=searcher.cfg)
        t, c = sim.iteration_time_s, sim.cost_per_iteration_usd
        key = goal.key(t, c)
        if not goal.meets(t, c):
            return None
        if incumbent is not None and key >= incumbent.key:
            return None
    mems = tuple(float(max(mem1[s, k], mem2[s, k])) for s in range(pp))
    return searcher.remember(Candidate(key, t, c, mems, plan))

