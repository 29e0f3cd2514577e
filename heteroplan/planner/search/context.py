"""What the search's strategies share: the request, cost tables priced by the machine model,
caches, counters and the best plan so far (the incumbent).

:class:`SearchContext` is all that the layout strategies (:mod:`.layouts`), the mixed-kind
search (:mod:`.mixed_stages`, :mod:`.mixed_scan`) and the searcher (:mod:`.searcher`) need of
each other; none reaches into another's state.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from heteroplan.planner.explain import PlanFamily, plan_families
from heteroplan.planner.goal import Shortfall
from heteroplan.planner.model import sync
from heteroplan.planner.model.comm import pipeline_send_buffered, pipeline_send_s
from heteroplan.planner.model.sim_config import as_platforms
from heteroplan.planner.model.stage_tables import StageTable, build_stage_table
from heteroplan.planner.model.terms import rental_usd_per_s, sharded_update_s, zero1_share_matrix
from heteroplan.planner.plan import OptimizerSharding, PipelineBlock, Plan, Precision, Recomputation
from heteroplan.planner.request import PlanRequest

__all__ = ["Pool", "Spread", "Candidate", "SearchContext", "spread_replicas", "ring_links"]

Pool = tuple[str, str]  # (gpu_type, zone)
Spread = tuple[tuple[str, int], ...]  # ((zone, replicas), ...) in ring order: a stage's replicas over zones


def spread_replicas(capacity: dict[str, int], zones: tuple[str, ...], dp: int) -> Spread | None:
    """``dp`` replicas over ``zones`` (each at least one, at most ``capacity[zone]``), filled in
    order; None if they do not fit. The canonical assignment of the zone-spanning layouts: the
    simulated time and egress depend on the zones only (and on which zones hold two or more)."""
    if len(zones) > dp or sum(capacity[z] for z in zones) < dp or min(capacity[z] for z in zones) < 1:
        return None
    counts = dict.fromkeys(zones, 1)
    left = dp - len(zones)
    for z in zones:
        extra = min(left, capacity[z] - 1)
        counts[z] += extra
        left -= extra
    return tuple((z, counts[z]) for z in zones)


def ring_links(gpu: str, spread: Spread) -> list[tuple[Pool, Pool]]:
    """Links of the all-reduce ring over replicas grouped by zone in ``spread`` order (as
    :func:`~heteroplan.planner.model.simulator.simulate_plan` walks them): one per zone change, plus the
    zone's own link where it holds two or more replicas."""
    zones = [z for z, _ in spread]
    links = [((gpu, z), (gpu, z)) for z, n in spread if n >= 2]
    if len(zones) >= 2:
        links += [((gpu, a), (gpu, b)) for a, b in zip(zones, zones[1:] + zones[:1], strict=True)]
    return links


@dataclass(frozen=True, order=True)
class Candidate:
    """One evaluated plan; ``key`` orders candidates (smaller is better)."""

    key: tuple[float, float]
    iteration_time: float = field(compare=False)
    cost_per_iteration: float = field(compare=False)
    memory_per_stage: tuple[float, ...] = field(compare=False)
    plan: Plan = field(compare=False)


class SearchContext:
    """The request, the machine model's cost tables over layer ranges, caches, counters and
    the incumbent, shared by the search's strategies."""

    def __init__(self, request: PlanRequest) -> None:
        self.request = request
        self.profile, self.network, self.gpu_types = request.profile, request.network, dict(request.gpu_types)
        self.pool = {k: v for k, v in request.pool.items() if v > 0}
        self.gbs, self.goal = request.gbs, request.goal
        self.options = request.options
        self.cfg = as_platforms(request.options.config)
        self.L = request.profile.num_layers
        self.recompute = Recomputation(request.options.recompute)
        # a profile that measured memory was measured in one precision: its plans compute in it
        measured = request.profile.measured
        self.precision = Precision(measured.precision) if measured is not None else Precision.FP32
        self._tables: dict[tuple[str, int, int], StageTable] = {}
        self.cache: dict[tuple[str, int, int, int], np.ndarray] = {}
        self.evaluated = 0
        self.skipped = 0
        self._comm: dict[tuple, np.ndarray] = {}
        self._links: dict[tuple, float] = {}
        self.shortfall = Shortfall()  # how close the plans that missed the goal's constraint came
        self.memory_misses = 0  # layouts none of whose splits fit memory
        self.runner_ups: dict[PlanFamily, Candidate] = {}  # best candidate priced per family (GPU-type mix, depth)
        self.incumbent: Candidate | None = None  # the best plan so far

    def table(self, gpu: str, tp: int, mbs: int) -> StageTable:
        key = (gpu, tp, mbs)
        if key not in self._tables:
            self._tables[key] = build_stage_table(self.profile, self.network, gpu, "", tp, mbs, self.cfg.for_gpu(gpu),
                                                  self.gpu_types[gpu].memory_bandwidth_gbs, self.recompute is Recomputation.FULL)
        return self._tables[key]

    def sync_matrix(self, pool: Pool, tp: int, mbs: int, dp: int, sharded: bool = False) -> np.ndarray:
        """All-reduce + update seconds of a stage over ``dp`` replicas inside ``pool``'s zone;
        ``sharded``: its optimizer state sharded over them (ZeRO-1, :meth:`sync_seconds`)."""
        key = (pool[0], tp, mbs, dp, sharded)
        if key not in self.cache:
            self.cache[key] = self.sync_seconds({(pool, pool)}, pool[0], tp, mbs, dp, sharded)
        return self.cache[key]

    def sync_seconds(self, links: set[tuple[Pool, Pool]], gpu: str, tp: int, mbs: int, dp: int,
                     sharded: bool) -> np.ndarray:
        """Seconds after the pipeline of every layer range on ``gpu`` over ``dp`` replicas whose
        ring edges are ``links``: the gradients' all-reduce and the optimizer step, or under
        ZeRO-1 (``sharded``) the step over ``1/dp`` of the state
        (:func:`~heteroplan.planner.model.terms.sharded_update_s`) and the all-gather of the updated
        fp32 weights (:func:`~heteroplan.planner.model.terms.allgather_as_allreduce_bytes`), as
        :func:`~heteroplan.planner.model.simulator.simulate_plan` prices them."""
        tab = self.table(gpu, tp, mbs)
        if dp <= 1:
            return tab.update.copy()
        weights = tab.param_bytes if sharded else None
        ring = sync.ring_sync_s(self.network, links, tp, dp, tab.grad_bytes, self.cfg.for_gpu(gpu), weights)
        return sync.stage_sync_s(ring, sharded_update_s(tab.update, self.zero1_shares(tp, dp)) if sharded else tab.update)

    def ring_sync(self, gpu: str, spread: Spread, tp: int, mbs: int, dp: int,
                  sharded: bool = False) -> tuple[np.ndarray, float]:
        """All-reduce + update seconds of a stage whose ``dp`` replicas span the zones of ``spread``
        (the ring's slowest link sets the pace; ``sharded``: ZeRO-1, :meth:`sync_seconds`), and the
        ring's egress $ per iteration (split-independent: the stages' gradients add up to the model's)."""
        key = (gpu, spread, tp, mbs, dp, sharded)
        if key not in self.cache:
            tab = self.table(gpu, tp, mbs)
            links = ring_links(gpu, spread)
            y = self.sync_seconds(set(links), gpu, tp, mbs, dp, sharded)
            egress = float(sync.ring_egress(self.network, links, dp, tp, sync.ring_bytes(float(tab.grad_bytes[0, self.L])))[1])
            self.cache[key] = (y, egress)
        return self.cache[key]

    def zero1_shares(self, tp: int, dp: int) -> np.ndarray:
        """``(L+1, L+1)``: the busiest replica's share of a stage's optimizer state under ZeRO-1
        over ``dp`` replicas, by layer range (:func:`~heteroplan.planner.model.terms.zero1_share_matrix`)."""
        key = ("zero1-shares", tp, dp)
        if key not in self.cache:
            self.cache[key] = zero1_share_matrix(self.profile.measured, tp, dp, self.L)
        return self.cache[key]

    def gather_egress(self, gpu: str, spread: Spread, tp: int, mbs: int, dp: int) -> np.ndarray:
        """``(L+1, L+1)`` $ per iteration, by layer range, that ZeRO-1's all-gather of a stage's
        updated fp32 weights sends across the zones of ``spread`` (its ring's edges, as
        :func:`~heteroplan.planner.model.simulator.simulate_plan` bills it; 0 where no range)."""
        key = ("gather-egress", gpu, spread, tp, mbs, dp)
        if key not in self.cache:
            tab = self.table(gpu, tp, mbs)
            weights = np.where(np.isfinite(tab.param_bytes), tab.param_bytes, 0.0)
            gathered = sync.ring_bytes(0.0, weights)  # the all-gather's share of what the ring all-reduces
            self.cache[key] = sync.ring_egress(self.network, ring_links(gpu, spread), dp, tp, gathered)[1] + np.zeros_like(weights)
        return self.cache[key]

    def shardable(self, tp: int, dp: int) -> bool:
        """Whether the search offers ZeRO-1 to a stage of TP degree ``tp`` over ``dp`` replicas:
        several replicas, a profile that measured memory (what prices the state), ``tp == 1``
        (the runtime refuses ZeRO-1 in a tensor-parallel stage), and the options allow it."""
        return (dp > 1 and tp == 1 and self.profile.measured is not None
                and self.options.optimizer_sharding is not OptimizerSharding.NONE)

    def send_s(self, blk: PipelineBlock, nxt: PipelineBlock, mbs: int) -> np.ndarray:
        """``(L+1,)`` seconds to hand one activation from ``blk`` to ``nxt`` when the stage ends at layer ``b``."""
        key = (blk.pool, nxt.pool, blk.tp, mbs)
        if key not in self._comm:
            tab = self.table(blk.pool[0], blk.tp, mbs)
            self._comm[key] = pipeline_send_s(self.network, blk.pool, nxt.pool, blk.tp, tab.out_bytes, self.cfg.for_gpu(blk.pool[0]))
        return self._comm[key]

    def rate(self, blocks: list[PipelineBlock], dp: int) -> float:
        """$/s of the GPUs of a layout."""
        return rental_usd_per_s(dp * sum(b.stages * b.tp * self.gpu_types[b.pool[0]].price_per_hour for b in blocks))

    def buffered(self, stages: list[PipelineBlock], mbs: int) -> np.ndarray:
        """``(pp-1, L+1)``: whether the send out of stage ``s`` is buffered when the stage ends at layer ``b``."""
        out = np.zeros((max(len(stages) - 1, 0), self.L + 1), dtype=bool)
        for s, blk in enumerate(stages[:-1]):
            tab = self.table(blk.pool[0], blk.tp, mbs)
            out[s, 1:] = pipeline_send_buffered(tab.out_bytes[1:], blk.tp, self.cfg.for_gpu(blk.pool[0]))
        return out

    def cv(self, stages: list[PipelineBlock]) -> float:
        """Rank speed noise of a layout: the largest of its GPU types' (as ``simulate`` takes it)."""
        return max(self.cfg.for_gpu(blk.pool[0]).straggler_cv for blk in stages)

    def tps(self, gpu: str, mbs: int) -> list[int]:
        per_node = self.gpu_types[gpu].gpus_per_node
        return [t for t in self.profile.tp_degrees(gpu, mbs) if t <= per_node]

    def microbatch_sizes(self) -> list[int]:
        """Microbatch sizes to scan: profiled for a pool's type, allowed by the options, dividing the batch."""
        types = {p[0] for p in self.pool}
        mbs_all = sorted({m for t in types for m in self.profile.microbatch_sizes(t)})
        if self.options.microbatch_sizes:
            mbs_all = [m for m in mbs_all if m in self.options.microbatch_sizes]
        return [m for m in mbs_all if self.gbs % m == 0]

    def link_s(self, link: tuple[Pool, Pool], tp: int, mbs: int) -> float:
        """Seconds of a two-replica all-reduce of the whole model's gradient over ``link`` (cached per link)."""
        key = (link, tp, mbs)
        if key not in self._links:
            gpu = link[0][0]
            whole = float(self.table(gpu, tp, mbs).grad_bytes[0, self.L])
            self._links[key] = float(sync.ring_sync_s(self.network, {link}, tp, 2, whole, self.cfg.for_gpu(gpu)))
        return self._links[key]

    def remember(self, cand: Candidate) -> Candidate:
        """Keep ``cand`` if it is the best priced so far of one of its families
        (:func:`~heteroplan.planner.explain.plan_families`); returns it."""
        for family in plan_families(cand.plan):
            best = self.runner_ups.get(family)
            if best is None or cand < best:
                self.runner_ups[family] = cand
        return cand

    def offer(self, cand: Candidate | None) -> None:
        if cand is not None and (self.incumbent is None or cand < self.incumbent):
            self.incumbent = cand
