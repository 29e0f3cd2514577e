"""Hadar: online primal-dual, task-level heterogeneity-aware scheduling (and HadarE forking).

The variant heteroplan implements (derivation in ``docs/hadar.md``; the project's HADAR.md):
the OASiS-style online primal-dual algorithm made task-level heterogeneous.

- Time is slotted (slot = round length ``slot`` s). Node h (all its GPUs of one type k) has
  ``C_h`` GPUs; ``g_h(t)`` of them are committed in slot t. The price of the next GPU is
  ``p = L * (U / L) ** (g / C_h)``: idle GPUs cost ``L``, a full node ``U``.
- Utility of finishing a job ``d`` slots after the decision slot:
  ``f = max(0, 2 n_slow - d)`` (:func:`~heteroplan.formulations.hadar.completion_utility`),
  ``n_slow`` = its slots at its slowest pace. One slot of completion time is worth one unit,
  so the utility a schedule earns is the completion time it saves.
- ``L`` and ``U`` (unless given) are the lowest and highest utility per GPU-slot of any
  schedule the active jobs can run (:func:`~heteroplan.formulations.hadar.density_bounds`;
  ``L`` halved so the least dense one is strictly admissible): the bounds the
  competitive-ratio argument asks of the prices. Every pace is then admissible on an idle
  cluster, and a slower type wins whenever it finishes the job sooner than its cost in price.
- Dual subroutine: a schedule runs the job's W_j tasks on one placement for consecutive slots
  ``[s, s+n_m)`` at pace m (the slowest type it uses); the placement takes the W_j GPU units
  with the lowest price summed over the window among types at least as fast as m. Starts
  considered: now and every price breakpoint within ``lookahead`` slots. A schedule that does
  not continue the job's current placement pays its checkpoint-restore delay
  (``JobState.restart_delay``) in ``n_m``. Payoff = utility - price; the best is kept.
- :class:`Planning`: ``REPLAN`` (default) drops every commitment each round and re-plans all
  active jobs in :class:`Order` (by default the jobs that set the makespan bound first, longest
  first, then shortest remaining time first), so a job's pace follows the prices; a job that
  keeps its GPU types keeps its nodes (a move costs a restore);
  ``COMMITTED`` commits a schedule to completion at admission (the pure OASiS rule) and tries
  waiting jobs again when prices change (``retry=False``: decided once, dropped if rejected —
  the algorithm whose objective the competitive-ratio experiments check).
- Idle fill (``fill_idle=True``, default): after the planned gangs, the current slot's idle
  GPUs, which no other job can use, are priced 0 and go to queued jobs (most completion time
  saved per GPU first).
- HadarE (``forking=True``): after the planned gangs, idle GPUs get extra copies of active
  jobs (W_j GPUs of one type each) for this round; the simulator adds the copies' progress.

A round reads plan -> place -> keep -> fill -> fork (:meth:`HadarPolicy.allocate`); the pieces
live in small modules: :mod:`~heteroplan.policies.hadar_state` (the cluster index, the
committed-GPU timeline, prices, rates read and the saved state),
:mod:`~heteroplan.policies.hadar_schedule` (the dual subroutine),
:mod:`~heteroplan.policies.hadar_order` (the planning order) and
:mod:`~heteroplan.policies.hadar_round` (keep nodes, idle fill and forking over the slot's residual).

The policy reads each job's ``remaining_work`` and per-type rates from its performance model
(:class:`~heteroplan.policies.base.PerfModel`) in the same units, so it runs on Gavel-style
throughput tables and on Sia goodput models alike. The experiment harness (the pure online
algorithm against the offline MILP, the Gavel-setting regimes) is
:mod:`heteroplan.sim.hadar_experiments`.

A job that finishes early (faster types than its pace, or forks) releases what it had committed.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from enum import Enum

import numpy as np

from heteroplan.cluster import Cluster
from heteroplan.errors import InputError
from heteroplan.inputs import enum_choice, strict_int
from heteroplan.policies.base import Allocation, JobState
from heteroplan.policies.hadar_order import Order, plan_order
from heteroplan.policies.hadar_round import fill_idle, fork, keep_nodes, residual
from heteroplan.policies.hadar_schedule import (
    Current,
    Quote,
    Rules,
    best_schedule,
    commit_schedule,
    current_of,
)
from heteroplan.policies.hadar_state import (
    Admission,
    ClusterIndex,
    Commitments,
    HadarState,
    Prices,
    RateBook,
    Timeline,
    density_range,
    price,
    round_prices,
)
from heteroplan.policies.packing import make_allocation
from heteroplan.policies.state import PolicyState, expect_state

__all__ = ["Admission", "HadarPolicy", "HadarState", "Order", "Planning", "price"]


class Planning(Enum):
    """How long a Hadar decision holds."""

    REPLAN = "replan"  # every round: release all commitments, re-plan every active job
    COMMITTED = "committed"  # a schedule admitted once runs to completion (OASiS)


@dataclass(frozen=True, eq=False)
class _Round:
    """One round's context: the cluster's ``index``, the slot ``t``, the committed ``timeline``,
    the ``prices`` and, per job, where it runs now (filled as asked)."""

    index: ClusterIndex
    t: int
    timeline: Timeline
    prices: Prices
    currents: dict[str, Current | None] = field(default_factory=dict)


class HadarPolicy:
    """Online primal-dual scheduler (Hadar variant); ``forking=True`` gives HadarE.

    Args:
        slot: slot (round) length, seconds.
        lower: price of an idle GPU (``L``), in utility units (slots) per GPU-slot; ``None``:
            half the lowest density of the active jobs' schedules, each round.
        upper: price of a full node (``U``), a number or ``{gpu_type: U_k}``; ``None``: the
            highest density of the active jobs' schedules, each round.
        planning: :class:`Planning` (or its value, ``"replan"`` / ``"committed"``).
        order: :class:`Order` (or its value) in which ``REPLAN`` plans the active jobs.
        retry: with ``COMMITTED``, re-try rejected jobs when prices change (else drop them).
        lookahead: with ``COMMITTED``, latest start considered, in slots after the decision slot
            (``REPLAN`` plans from the current slot: a job not run now is planned again next round).
        max_slot: schedules must end before this absolute slot (None: no limit).
        forking: HadarE — give idle GPUs to extra copies of active jobs each round.
        fill_idle: after the planned gangs, give the current slot's idle GPUs, priced 0, to
            queued jobs (densest gain first): every GPU type works while jobs queue
            (:func:`~heteroplan.policies.hadar_round.fill_idle`; docs/hadar.md). ``False``: the
            pure primal-dual rule.

    Attributes:
        admissions: each admitted job's latest schedule (:class:`Admission`).
        rejected: jobs dropped for good (``COMMITTED`` with ``retry=False``).
        bounds: the last round's ``(L, max U)`` (nan before the first round).
    """

    def __init__(
        self,
        slot: float = 360.0,
        lower: float | None = None,
        upper: float | Mapping[str, float] | None = None,
        planning: Planning | str = Planning.REPLAN,
        order: Order | str = Order.CRITICAL_FIRST,
        retry: bool = True,
        lookahead: int = 48,
        max_slot: int | None = None,
        forking: bool = False,
        fill_idle: bool = True,
    ) -> None:
        if not slot > 0:
            raise InputError("slot", slot, "must be > 0 s")
        if lower is not None and not lower > 0:
            raise InputError("lower", lower, "must be > 0")
        if upper is not None:
            uppers = upper.values() if isinstance(upper, Mapping) else [upper]
            if any(not u > 0 for u in uppers) or (lower is not None and any(not u >= lower for u in uppers)):
                raise InputError("upper", upper, f"must be > 0 and >= lower={lower}")
        strict_int("lookahead", lookahead, 0)  # slots
        self.planning = enum_choice(Planning, "planning", planning)
        self.order = enum_choice(Order, "order", order)
        self.slot = float(slot)
        self.lower = lower
        self.upper = upper
        self.retry = retry
        self.lookahead = int(lookahead)
        self.max_slot = None if max_slot is None else strict_int("max_slot", max_slot, 1)  # slots
        if self.max_slot is not None and self.max_slot > 2**53:  # compared with float slots: a float must hold it
            raise InputError("max_slot", max_slot, "must be at most 2**53 slots (None: no limit)")
        self.forking = forking
        self.fill_idle = fill_idle
        self.round_length = self.slot  # s; the loop's round is the slot
        self.elastic = False
        self.name = "hadare" if forking else "hadar"
        self.bounds: tuple[float, float] = (math.nan, math.nan)
        self._books = Commitments()
        self._rates = RateBook()
        self._index: ClusterIndex | None = None

    @property
    def admissions(self) -> dict[str, Admission]:
        return self._books.admissions

    @property
    def rejected(self) -> set[str]:
        return self._books.rejected

    @property
    def alpha(self) -> float:
        """``max(1, ln(U/L))`` of the last round's prices; the pure online algorithm
        (``COMMITTED``, ``retry=False``) is 2*alpha-competitive in this family (small demands)."""
        lo, hi = self.bounds
        return max(1.0, math.log(hi / lo)) if lo > 0 else math.nan

    @property
    def rules(self) -> Rules:
        """The options the dual subroutine reads (``REPLAN`` plans from the current slot only)."""
        committed = self.planning is Planning.COMMITTED
        return Rules(self.slot, self.lookahead if committed else 0, self.max_slot, exact_keep=committed)

    def state(self) -> HadarState:
        """What the policy remembers between rounds: its commitments (timeline and plans), its
        admissions, refusals and the rates it read of each job's model; a copy."""
        return self._books.snapshot(self._rates, self.bounds)

    def restore_state(self, state: PolicyState) -> None:
        """Continue from ``state`` (a :meth:`state` of a Hadar policy with the same options); the
        commitments are laid on the cluster at the next round, whose nodes must be ``state.nodes``."""
        state = expect_state(state, HadarState, self.name)
        self._books = Commitments.restored(state)
        self._rates = RateBook(state.rates)
        lo, hi = state.bounds
        self.bounds = (math.nan if lo is None else lo, math.nan if hi is None else hi)

    # ----------------------------------------------------------------- round
    def allocate(self, cluster: Cluster, jobs: Sequence[JobState], now: float) -> Mapping[str, Allocation]:
        """This slot's gangs: plan -> place -> keep -> fill -> fork."""
        if self._index is None or self._index.cluster is not cluster:
            self._index = ClusterIndex.of(cluster)
        index = self._index
        self._rates.keep_only({j.job_id for j in jobs})
        t = int(round(now / self.slot))
        rnd = _Round(index, t, self._books.timeline(index, t), self._prices(index, jobs))
        self._plan(rnd, jobs)
        placed = {jid: make_allocation(index.placement(counts), cluster) for jid, counts in self._books.at(t)}
        kept = keep_nodes(index, jobs, placed) if self.planning is Planning.REPLAN else placed
        filled = kept | self._fill(rnd, jobs, kept) if self.fill_idle else kept
        if not self.forking:
            return filled
        return fork(residual(index, filled, jobs, [self._rates.of(j, index) for j in jobs]), self.slot)

    def _prices(self, index: ClusterIndex, jobs: Sequence[JobState]) -> Prices:
        """``L`` and ``U`` per node for this round (given, or the active jobs' density bounds)."""
        density = (math.nan, math.nan)
        if (self.lower is None or self.upper is None) and jobs:
            rates = np.stack([self._rates.of(j, index) for j in jobs])
            density = density_range(rates, np.array([float(j.remaining_work) for j in jobs]),
                                    np.array([j.requested_gpus for j in jobs]), self.slot)
        prices = round_prices(index, self.lower, self.upper, density)
        self.bounds = prices.bounds
        return prices

    def _plan(self, rnd: _Round, jobs: Sequence[JobState]) -> None:
        """Release what is over (or, under ``REPLAN``, everything), then admit schedules in order."""
        books, timeline, t = self._books, rnd.timeline, rnd.t
        active = {j.job_id for j in jobs}
        for jid in [j for j in books.plans if j not in active]:
            books.release(jid, t, timeline)
        timeline.compact()
        if timeline.drop_before(t):
            books.version += 1
        replan = self.planning is Planning.REPLAN
        order = sorted(jobs, key=lambda j: (j.arrival_time, j.job_id))
        if replan:
            for jid in list(books.plans):
                books.release(jid, t, timeline)
            timeline.compact()
            order = plan_order(self.order, jobs, rnd.index, lambda j: self._rates.of(j, rnd.index), self.slot)
        rules = self.rules
        for job in order:
            jid = job.job_id
            if jid in books.plans or jid in books.rejected:
                continue
            if not replan and books.tried.get(jid) == books.version:
                continue
            quote = self._quote(rnd, job)
            found = best_schedule(quote, timeline, rnd.prices, rnd.index, rules, t)
            if found is not None and found.payoff > 0:
                books.plans[jid] = commit_schedule(quote, found, timeline, rnd.prices, rnd.index)
                books.admissions[jid] = Admission(jid, t, found.start, found.end - 1, rnd.index.types[found.pace],
                                                  found.utility, found.cost)
            elif not self.retry and not replan:
                books.rejected.add(jid)
            else:
                books.tried[jid] = books.version

    def _fill(self, rnd: _Round, jobs: Sequence[JobState], kept: Mapping[str, Allocation]) -> dict[str, Allocation]:
        """The idle GPUs given to queued jobs (not rejected, no GPUs in ``kept``, work left)."""
        queued = [j for j in jobs if j.job_id not in self._books.rejected and j.job_id not in kept
                  and float(j.remaining_work) > 0]
        if not queued:
            return {}
        rates = [self._rates.of(j, rnd.index) for j in queued]
        return fill_idle(residual(rnd.index, kept, queued, rates), [self._current(rnd, j) for j in queued], self.slot)

    def _quote(self, rnd: _Round, job: JobState) -> Quote:
        rates = self._rates.of(job, rnd.index)
        return Quote(int(job.requested_gpus), rates, float(job.remaining_work), job.restart_delay,
                     self._current(rnd, job))

    def _current(self, rnd: _Round, job: JobState) -> Current | None:
        if job.job_id not in rnd.currents:
            rnd.currents[job.job_id] = current_of(job, rnd.index, self._rates.of(job, rnd.index))
        return rnd.currents[job.job_id]
