"""Sailor-style plan search: DP over pipeline stages with pruning.

Plan space searched (see docs/sailor.md):

- microbatch size ``mbs`` among the profiled ones; data-parallel degree ``dp`` with
  ``gbs % (mbs * dp) == 0`` (each ``dp`` gives a different number of microbatches ``M``);
  pipeline depth ``pp``;
- the stages form at most two *blocks*; a block is a run of consecutive stages on one
  (GPU type, zone) pool with one TP degree (TP within a node); all ``dp`` replicas of a stage
  live in the block's zone (replicas of a stage in one region);
- any contiguous, non-uniform split of the layers into stages, chosen exactly by
  :func:`heteroplan.planner.search.split_dp.best_split`;
- block ``k`` uses ``n_k * dp * tp_k`` GPUs of its pool, at most the pool's count.

With ``SimConfig.straggler_cv > 0`` the split is chosen on the noise-free times, then the chosen
split is priced with the ranks' speed noise exactly as :func:`~heteroplan.planner.model.simulator.simulate_plan`
prices it (the noise only adds time, so the lower bounds below stay valid).

Structure: :class:`Searcher` scans and prices; it is a
:class:`~heteroplan.planner.search.context.SearchContext` (request, cost tables, caches, incumbent)
that the layout strategies (:mod:`heteroplan.planner.search.layouts`) and the mixed-kind search
(:mod:`heteroplan.planner.search.mixed_scan`) read; the goal (objective, budget, floor) is a
:class:`~heteroplan.planner.goal.Goal`, every cost term the machine model's
(:mod:`heteroplan.planner.model`).

Pruning (``SearchOptions.prune``): one pool per GPU type for single-block plans and one zone
pair per type pair for two-block plans; two zones of one type only when one zone cannot hold
the pipeline; TP from the smallest that fits memory, raised only
while the objective improves; ``dp`` and ``pp`` scanned in increasing order, stopping after
``patience`` values without improvement (:class:`~heteroplan.planner.search.patience.Patience`).
"""

from __future__ import annotations

import math
import time

import numpy as np

from heteroplan.errors import InfeasibleError
from heteroplan.planner.model import sync
from heteroplan.planner.model.terms import (
    balanced_step_lower_bound_s,
    one_f_one_b_s,
    pipeline_fill_s,
    pipeline_step_s,
)
from heteroplan.planner.plan import OptimizerSharding, PipelineBlock, Plan, ReplicaGroup, Stage
from heteroplan.planner.request import SearchOptions
from heteroplan.planner.search.context import (
    Candidate,
    SearchContext,
    Spread,
    ring_links,
    spread_replicas,
)
from heteroplan.planner.search.layouts import Layout, layouts, single_pools
from heteroplan.planner.search.mixed_scan import scan_mixed
from heteroplan.planner.search.patience import Patience
from heteroplan.planner.search.replay_split import pipeline_egress_usd, replay_split, split_time_s
from heteroplan.planner.search.split_dp import best_split

__all__ = ["SearchOptions", "Candidate", "Searcher", "spread_replicas", "ring_links"]  # SearchOptions lives in planner.request


class Searcher(SearchContext):
    """Search the best plan of one job over a pool of GPUs."""


    # ------------------------------------------------------------- tables


    # ---------------------------------------------------------- evaluate
    def lower_bound(self, blocks: list[PipelineBlock], mbs: int, dp: int) -> tuple[float, float]:
        """Lower bounds (iteration time s, $/iteration) of any split of this layout.

        ``T >= (M-1) max_s fb_s + sum_s fb_s`` (the closed form; ``M max_s fb_s`` where a send may be
        buffered and the replay prices it); the bottleneck is at least ``1 / sum_k n_k / F_k``
        and the sum at least ``min_k F_k``, ``F_k`` the whole model's compute on block ``k``'s hardware.
        """
        M = self.gbs // (mbs * dp)
        full = [float(self.table(b.pool[0], b.tp, mbs).fb[0, self.L]) for b in blocks]
        # stage k covers a fraction x_k of the model's compute, x_k * F_k <= max sigma, sum x = 1
        bottleneck = balanced_step_lower_bound_s([b.stages for b in blocks], full)
        t_lb = one_f_one_b_s(M, bottleneck, min(full))
        if self.buffered([blk for blk in blocks for _ in range(blk.stages)], mbs).any():
            t_lb = M * bottleneck  # the replay's 1F1B can beat the closed form's fill and drain, not the busiest stage
        return t_lb, self.rate(blocks, dp) * t_lb


    def evaluate(
        self, blocks: list[PipelineBlock], mbs: int, dp: int, spread: Spread | None = None, incumbent: Candidate | None = None,
        resplit: bool = True,
    ) -> Candidate | None:
        """Best layer split for a block layout; None if nothing fits memory or nothing beats
        ``incumbent`` (whose key the split search then prunes against). With ``spread`` (one
        block) the stages' replicas span the zones of ``spread`` instead of the block's zone.
        ``resplit=False``: a layout with buffered sends keeps the closed form's split (priced on
        the replay all the same), a quick estimate for ranking layouts."""
        stages = [b for b in blocks for _ in range(b.stages)]
        pp = len(stages)
        M = self.gbs // (mbs * dp)
        rate = self.rate(blocks, dp)
        ring = self.ring_sync(blocks[0].pool[0], spread, blocks[0].tp, mbs, dp) if spread is not None else (None, 0.0)
        sigma, w, y, links, mem, sharded, gathers_across = self._stage_matrices(stages, mbs, dp, spread, rate)
        self.evaluated += 1
        buffered = self.buffered(stages, mbs)
        cutoff = self._cutoff(incumbent, rate, ring[1], crosses=gathers_across or any(a.pool[1] != b.pool[1] for a, b in zip(stages, stages[1:], strict=False)))
        if buffered.any() and resplit:
            # the closed form prices a buffered send as blocking: split on the replay's times (what simulate charges)
            b = replay_split(self, stages, sigma, w, y, links, buffered, mbs, dp, M, rate, cutoff)
            if b is None:
                return None
        else:
            if buffered.any():
                cutoff = np.inf  # the closed form overestimates a buffered layout: no cut on it
            res = best_split(sigma, w, y, M, self.options.max_split_dp_calls, cutoff=cutoff)
            if res is None:
                if not np.isfinite(cutoff):
                    self.memory_misses += 1
                return None
            b = np.asarray(res.bounds)
        # w carries egress as its time-equivalent ($ / rate); take it out of the iteration time
        egress_cost = ring[1] + pipeline_egress_usd(self, stages, b, mbs, dp, M)  # the ring's does not depend on the split
        if spread is not None:  # ZeRO-1's all-gather does: each sharded stage's weights
            egress_cost += sum(float(self.gather_egress(blk.pool[0], spread, blk.tp, mbs, dp)[b[s], b[s + 1]])
                               for s, blk in enumerate(stages) if sharded[s, b[s], b[s + 1]])
        if self.cv(stages) > 0 or buffered.any():  # the split was chosen without the noise / on the replay
            t_iter = split_time_s(self, stages, b, links, y, buffered, mbs, dp, M)
        else:
            t_iter = res.objective - ((egress_cost - ring[1]) / rate if rate > 0 else 0.0)
        cost = rate * t_iter + egress_cost
        mems = tuple(float(mem[s, b[s], b[s + 1]]) for s in range(pp))
        plan = Plan(
            self.profile.name,
            self.gbs,
            mbs,
            tuple(
                Stage(int(b[s]), int(b[s + 1]), self._groups(blk, dp, spread), self.recompute,
                      OptimizerSharding.ZERO1 if sharded[s, b[s], b[s + 1]] else OptimizerSharding.NONE)
                for s, blk in enumerate(stages)
            ),
            precision=self.precision,
        )
        if not self.goal.meets(t_iter, cost):
            self.goal.note_miss(self.shortfall, t_iter, cost)
            return None
        return self.remember(Candidate(self.goal.key(t_iter, cost), t_iter, cost, mems, plan))

    def _stage_matrices(self, stages: list[PipelineBlock], mbs: int, dp: int, spread: Spread | None,
                        rate: float) -> tuple[np.ndarray, ...]:
        """The split DP's matrices of a layout's stages over every layer range ``[a, b]``, ``(pp, L+1, L+1)``:
        steady-state step ``sigma``, fill-and-drain seconds ``w`` (with cross-zone egress as seconds
        of the GPUs' ``rate`` $/s; ``inf`` where the range does not fit memory or cannot start or
        end the pipeline), sync ``y``, GB per GPU and whether the stage shards its optimizer state;
        ``links`` ``(pp, L+1)`` the send out of each stage by its last layer, and whether a sharded
        stage's all-gather pays egress."""
        pp, L, n = len(stages), self.L, self.L + 1
        M = self.gbs // (mbs * dp)
        sigma, w, y, mem = (np.empty((pp, n, n)) for _ in range(4))
        c_in = np.zeros(n)
        links = np.zeros((pp, n))  # links[s]: transfer seconds out of stage s, by its last layer
        sharded = np.zeros((pp, n, n), dtype=bool)  # whether stage s over [a, b) shards its optimizer state
        gathers_across = False  # whether a sharded stage's all-gather pays egress (in the split objective)
        for s, blk in enumerate(stages):
            tab = self.table(blk.pool[0], blk.tp, mbs)
            if s + 1 < pp:
                nxt = stages[s + 1]
                c_out = self.send_s(blk, nxt, mbs)
                usd = sync.boundary_egress(self.network, blk.pool[1], nxt.pool[1], tab.out_bytes, blk.tp, M,
                                           self.cfg.for_gpu(blk.pool[0]))[1]
                egress_t = usd * dp / rate if rate > 0 else 0.0  # $ as seconds of the GPUs' rental
            else:
                c_out, egress_t = np.zeros(n), 0.0
            ok, y[s], mem[s], sharded[s] = self._stage_sync(blk, mbs, dp, min(pp - s, M), spread)
            if spread is not None and rate > 0 and sharded[s].any():  # ZeRO-1's all-gather across zones, as time
                gather_t = np.where(sharded[s], self.gather_egress(blk.pool[0], spread, blk.tp, mbs, dp) / rate, 0.0)
                gathers_across = gathers_across or bool(gather_t.any())
                egress_t = egress_t + gather_t
            if s == 0:
                ok[1:, :] = False
            if s == pp - 1:
                ok[:, :L] = False
            sigma[s] = pipeline_step_s(tab.fb, c_in[:, None], c_out[None, :])
            w[s] = np.where(ok, pipeline_fill_s(tab.fb, c_out[None, :]) + egress_t, np.inf)
            links[s] = c_out
            c_in = c_out
        return sigma, w, y, links, mem, sharded, gathers_across

    def _stage_sync(self, blk: PipelineBlock, mbs: int, dp: int, inflight: int,
                    spread: Spread | None) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """``(fits, sync seconds, GB per GPU, sharded)`` of a stage on ``blk`` over every layer
        range, its ``dp`` replicas holding ``inflight`` microbatches: the optimizer state whole
        or, where the search may shard it (:meth:`~.context.SearchContext.shardable`), sharded
        over the replicas (ZeRO-1) where that fits and the whole state does not, or where its
        sync (update over ``1/dp`` of the state + the all-gather of the weights) is faster
        than the plain one (the objective only grows with a stage's sync, so the faster one that
        fits is the best for every split)."""
        tab = self.table(blk.pool[0], blk.tp, mbs)
        capacity = self.gpu_types[blk.pool[0]].memory_gb

        def sync_of(shard: bool) -> np.ndarray:
            if spread is None:
                return self.sync_matrix(blk.pool, blk.tp, mbs, dp, shard)
            return self.ring_sync(blk.pool[0], spread, blk.tp, mbs, dp, shard)[0]

        mem, y = tab.memory(inflight, dp), sync_of(False)
        ok = mem <= capacity
        if not self.shardable(blk.tp, dp):
            return ok, y, mem, np.zeros_like(ok)
        mem_z, y_z = tab.memory(inflight, dp, self.zero1_shares(blk.tp, dp)), sync_of(True)
        ok_z = mem_z <= capacity
        shard = ok_z & (~ok | (y_z < y))
        return ok | ok_z, np.where(shard, y_z, y), np.where(shard, mem_z, mem), shard

    def _cutoff(self, incumbent: Candidate | None, rate: float, ring_egress: float, crosses: bool) -> float:
        """Split objective (seconds: time + pipeline egress / rate) that a split must beat to beat
        ``incumbent``; inf when there is none or when the objective does not bound the key."""
        if incumbent is None:
            return np.inf
        return self.goal.split_cutoff(incumbent.key[0], rate, ring_egress, crosses)

    @staticmethod
    def _groups(blk: PipelineBlock, dp: int, spread: Spread | None) -> tuple[ReplicaGroup, ...]:
        if spread is None:
            return (ReplicaGroup(blk.pool[0], blk.pool[1], blk.tp, dp),)
        return tuple(ReplicaGroup(blk.pool[0], z, blk.tp, n) for z, n in spread)


    # ------------------------------------------------------------- layouts


    def _scan_group(
        self, rows: list[list[Layout]], mbs: int, dp: int, incumbent: Candidate | None, local: Candidate | None = None
    ) -> Candidate | None:
        """Best candidate of a group; with pruning, TP is raised only while it pays (per block).

        ``local`` (the best of this ``dp`` so far, which the scan's patience compares against)
        is the cutoff of each layout's split search: a layout that cannot beat it is not priced out."""
        prune = self.options.prune
        best_group: Candidate | None = None
        prev_row: Candidate | None = None
        for row in rows:
            best_row: Candidate | None = None
            prev: Candidate | None = None
            for blocks, spread in row:
                t_lb, c_lb = self.lower_bound(blocks, mbs, dp)
                if self.goal.bounds_fail(t_lb, c_lb):
                    self.goal.note_miss(self.shortfall, t_lb, c_lb, bound=True)
                    self.skipped += 1
                    continue
                inc = min((c for c in (incumbent, best_group, best_row) if c is not None), default=None)
                if inc is not None and self.goal.primary(t_lb, c_lb) >= inc.key[0]:
                    self.skipped += 1
                    continue
                cutoff = local if self.options.prune else inc
                cand = self.evaluate(blocks, mbs, dp, spread, cutoff)
                if cand is None:
                    continue
                if best_row is None or cand < best_row:
                    best_row = cand
                if prune and prev is not None and not cand < prev:
                    break  # raising the second block's TP stopped paying
                prev = cand
            if best_row is not None and (best_group is None or best_row < best_group):
                best_group = best_row
            if prune and prev_row is not None and best_row is not None and not best_row < prev_row:
                break  # raising the first block's TP stopped paying
            if best_row is not None:
                prev_row = best_row
        return best_group

    # --------------------------------------------------------------- search
    def run(self) -> tuple[Candidate, dict]:
        """Scan (mbs, dp, pp, layout); a homogeneous pass first gives the incumbent that the
        lower bounds of the heterogeneous pass prune against."""
        t0 = time.perf_counter()
        self.incumbent: Candidate | None = None
        passes = tuple(range(1, min(self.options.max_blocks, 3) + 1))
        if self.options.prune:
            self._seed()
        for blocks in passes:
            self._scan(blocks)
        if self.options.mixed_stages and self.options.max_blocks >= 2 and max(self.cfg.for_gpu(t).straggler_cv for t, _ in self.pool) == 0:
            scan_mixed(self)
        stats = {"search_time": time.perf_counter() - t0, "evaluated": self.evaluated, "skipped": self.skipped}
        if self.incumbent is None:
            raise InfeasibleError(self._reason())
        return self.incumbent, stats

    def _seed(self) -> None:
        """An early incumbent so that the lower bounds prune small-``dp`` layouts from the start:
        one-stage pipelines on each pool (the pruned pools) at the largest ``dp`` its GPUs hold,
        for every microbatch size and TP degree (cheap: a one-stage split has nothing to choose)."""
        for mbs in self.microbatch_sizes():
            per = self.gbs // mbs
            for pool in single_pools(self):
                for tp in self.tps(pool[0], mbs):
                    dp = max((d for d in range(1, min(per, self.pool[pool] // tp) + 1) if per % d == 0), default=0)
                    if dp:
                        self.offer(self.evaluate([PipelineBlock(pool, tp, 1)], mbs, dp))


    def _scan(self, max_blocks: int) -> None:
        """Scan microbatch sizes, then data-parallel degrees in increasing order (stopping after
        ``patience`` degrees without a better plan of that microbatch size), each over pipeline
        depths (:meth:`_scan_depths`). Three blocks, pruned: only around the best plan so far
        (its microbatch size, its ``dp`` and twice it, depths from one below its own)."""
        total = sum(self.pool.values())
        patience = self.options.patience if self.options.prune else math.inf
        inc = self.incumbent
        near = inc if max_blocks == 3 and self.options.prune else None
        for mbs in self.microbatch_sizes():
            if near is not None and mbs != near.plan.microbatch_size:
                continue
            per = self.gbs // mbs
            dps = [d for d in range(1, min(per, total) + 1) if per % d == 0]
            if near is not None:
                dps = [d for d in dps if d in (near.plan.dp, 2 * near.plan.dp)]
            by_dp = Patience(patience)
            for dp in dps:
                if by_dp.step(self._scan_depths(max_blocks, mbs, dp, patience, near), count_empty=False):
                    break

    def _scan_depths(self, max_blocks: int, mbs: int, dp: int, patience: float,
                     near: Candidate | None) -> Candidate | None:
        """The best candidate of ``(mbs, dp)`` over pipeline depths in increasing order, stopping
        after ``patience`` depths without a better one (a depth without any counts once a plan
        exists; around ``near``, a depth must beat the best plan before it to count as a gain)."""
        total = sum(self.pool.values())
        max_pp = self.options.max_pp or min(self.L, 16)
        first = max(3, near.plan.pp - 1) if near is not None else 3 if max_blocks == 3 else 1
        by_pp = Patience(patience)
        for pp in range(first, max_pp + 1):
            if pp * dp > total or pp > self.L:
                break
            before = self.incumbent
            best_pp = self._scan_layouts(max_blocks, pp, mbs, dp, by_pp.best)
            if near is not None and best_pp is not None and before is not None and not best_pp < before:
                stop = by_pp.step_without_gain(best_pp)
            else:
                stop = by_pp.step(best_pp, count_empty=self.incumbent is not None)
            if stop:
                break
        return by_pp.best

    def _scan_layouts(self, max_blocks: int, pp: int, mbs: int, dp: int, best_dp: Candidate | None) -> Candidate | None:
        """The best candidate of ``(pp, mbs, dp)`` over the layouts (:func:`~.layouts.layouts`),
        each offered as the incumbent; ``best_dp`` (the best of this ``dp``) and the best so far of
        this depth cut each group's split search."""
        best_pp: Candidate | None = None
        for rows in layouts(self, pp, mbs, dp, max_blocks):
            local = min((c for c in (best_dp, best_pp) if c is not None), default=None)
            cand = self._scan_group(rows, mbs, dp, self.incumbent, local)
            self.offer(cand)
            if cand is not None and (best_pp is None or cand < best_pp):
                best_pp = cand
        return best_pp

    def _reason(self) -> str:
        return self.goal.why_infeasible(self.shortfall) or (
            f"no feasible plan: {self.profile.name} does not fit in the memory of the available GPUs "
            f"({', '.join(f'{n} x {t}@{z}' for (t, z), n in sorted(self.pool.items()))}) with any TP/PP split"
        )
