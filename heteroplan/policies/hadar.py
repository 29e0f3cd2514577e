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
from dataclasses import asdict, dataclass, field
from enum import Enum
from typing import Any

import numpy as np

from heteroplan.cluster import Cluster
from heteroplan.errors import InputError
from heteroplan.formulations.hadar import (
    completion_utility,
    density_bounds,
    makespan_bound_lp,
    pace_slots,
)
from heteroplan.inputs import enum_choice
from heteroplan.policies.base import Allocation, JobState
from heteroplan.policies.packing import free_gpus, make_allocation, rate_of, take_gpus
from heteroplan.policies.state import PolicyState, expect_state
from heteroplan.solvers import solve

__all__ = ["Admission", "HadarPolicy", "HadarState", "Order", "Planning", "price"]


class Planning(Enum):
    """How long a Hadar decision holds."""

    REPLAN = "replan"  # every round: release all commitments, re-plan every active job
    COMMITTED = "committed"  # a schedule admitted once runs to completion (OASiS)


class Order(Enum):
    """The order in which REPLAN plans the active jobs each round (earlier ones get the cheaper GPUs)."""

    SHORTEST_FIRST = "shortest"  # least remaining time on the fastest type (SRPT: avg JCT)
    DENSEST_FIRST = "densest"  # highest utility per GPU-slot at the best pace (the primal-dual greedy)
    # jobs that set the makespan first (longest first), the others shortest first: see _critical
    CRITICAL_FIRST = "critical"


def price(committed: np.ndarray, capacity: np.ndarray, lower: float, upper: np.ndarray) -> np.ndarray:
    """Price of the next GPU unit: ``L * (U / L) ** (committed / capacity)`` (elementwise)."""
    return lower * (upper / lower) ** (np.asarray(committed, float) / capacity)


@dataclass(frozen=True)
class Admission:
    """Record of one admitted job's latest schedule (slots are absolute slot indices)."""

    job_id: str
    decided: int
    start: int
    end: int  # last slot (inclusive)
    pace: str
    utility: float
    cost: float


@dataclass(frozen=True)
class _Schedule:
    payoff: float
    start: int
    end: int  # exclusive
    pace: int  # of the first slot
    utility: float
    cost: float
    # variable pace: (segment start slots, pace from each on); None: ``pace`` throughout
    paces: tuple[tuple[int, ...], tuple[int, ...]] | None = None


@dataclass
class _Plan:
    pieces: list[tuple[int, int, np.ndarray]] = field(default_factory=list)  # [start, end) -> GPUs/node


class _Segments:
    """Committed GPUs per node, piecewise constant over slots; the last segment runs forever."""

    def __init__(self, num_nodes: int, start: int) -> None:
        self.starts: list[int] = [start]
        self.usage: list[np.ndarray] = [np.zeros(num_nodes, dtype=np.int64)]

    def split(self, t: int) -> int:
        """Index of the segment starting at ``t`` (created if needed; ``t >= starts[0]``)."""
        i = int(np.searchsorted(self.starts, t, side="right")) - 1
        if self.starts[i] == t:
            return i
        self.starts.insert(i + 1, t)
        self.usage.insert(i + 1, self.usage[i].copy())
        return i + 1

    def drop_before(self, t: int) -> bool:
        """Forget slots before ``t``; True when a breakpoint was passed."""
        i = int(np.searchsorted(self.starts, t, side="right")) - 1
        passed = i > 0
        if i > 0:
            del self.starts[:i]
            del self.usage[:i]
        self.starts[0] = max(self.starts[0], t)
        return passed

    def compact(self) -> None:
        """Merge neighbouring segments with equal usage."""
        starts, usage = [self.starts[0]], [self.usage[0]]
        for st, u in zip(self.starts[1:], self.usage[1:], strict=True):
            if np.array_equal(u, usage[-1]):
                continue
            starts.append(st)
            usage.append(u)
        self.starts, self.usage = starts, usage

    def add(self, start: int, end: int, counts: np.ndarray, sign: int = 1) -> None:
        a = self.split(start)
        b = self.split(end)
        for i in range(a, b):
            self.usage[i] = self.usage[i] + sign * counts



@dataclass(frozen=True)
class HadarState(PolicyState):
    """What Hadar remembers between rounds (:meth:`HadarPolicy.state`); slots are absolute slot
    indices, GPU counts are per node in ``nodes`` order.

    Attributes:
        nodes: the cluster's node names when the commitments were set up (``None``: never ran).
        segment_starts: first slot of each piece of the committed-GPU timeline (the last runs forever).
        segment_usage: per piece, the GPUs committed on each node.
        plans: per admitted job, its committed ``(first slot, end slot (exclusive), GPUs per node)`` pieces.
        admissions: each admitted job's latest schedule.
        rejected: jobs dropped for good (``COMMITTED`` with ``retry=False``).
        tried: per job, the commitment version at which it was last refused (``COMMITTED`` retries
            a job only after the prices changed).
        version: the commitment version (bumped whenever commitments are released).
        rates: per job, the rates (estimator units/s at its requested GPUs, per GPU type in the
            cluster's order) read from its model, which the policy keeps while the job's model
            object stays the same.
        bounds: the last round's ``(L, max U)`` (``None``: not a number).
    """

    nodes: tuple[str, ...] | None
    segment_starts: tuple[int, ...]
    segment_usage: tuple[tuple[int, ...], ...]
    plans: Mapping[str, tuple[tuple[int, int, tuple[int, ...]], ...]]
    admissions: Mapping[str, Admission]
    rejected: tuple[str, ...]
    tried: Mapping[str, int]
    version: int
    rates: Mapping[str, tuple[float, ...]]
    bounds: tuple[float | None, float | None]

    def to_json(self) -> dict[str, Any]:
        return {
            "nodes": None if self.nodes is None else list(self.nodes),
            "segment_starts": list(self.segment_starts), "segment_usage": [list(u) for u in self.segment_usage],
            "plans": {j: [[lo, hi, list(c)] for lo, hi, c in pieces] for j, pieces in self.plans.items()},
            "admissions": {j: asdict(a) for j, a in self.admissions.items()},
            "rejected": list(self.rejected), "tried": dict(self.tried), "version": self.version,
            "rates": {j: list(r) for j, r in self.rates.items()}, "bounds": list(self.bounds),
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> HadarState:
        lo, hi = data["bounds"]
        return cls(
            nodes=None if data["nodes"] is None else tuple(str(n) for n in data["nodes"]),
            segment_starts=tuple(int(t) for t in data["segment_starts"]),
            segment_usage=tuple(tuple(int(c) for c in u) for u in data["segment_usage"]),
            plans={str(j): tuple((int(a), int(b), tuple(int(c) for c in counts)) for a, b, counts in pieces)
                   for j, pieces in data["plans"].items()},
            admissions={str(j): Admission(**a) for j, a in data["admissions"].items()},
            rejected=tuple(str(j) for j in data["rejected"]),
            tried={str(j): int(v) for j, v in data["tried"].items()}, version=int(data["version"]),
            rates={str(j): tuple(float(x) for x in r) for j, r in data["rates"].items()},
            bounds=(None if lo is None else float(lo), None if hi is None else float(hi)),
        )


_RESTORED = object()  # stands for a job's model object in rates taken back from a HadarState


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
            (:meth:`_fill_idle`; docs/hadar.md). ``False``: the pure primal-dual rule.
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
        if lookahead < 0:
            raise InputError("lookahead", lookahead, "must be >= 0 slots")
        self.planning = enum_choice(Planning, "planning", planning)
        self.order = enum_choice(Order, "order", order)
        self.slot = float(slot)
        self.lower = lower
        self.upper = upper
        self.retry = retry
        self.lookahead = int(lookahead)
        self.max_slot = max_slot
        self.forking = forking
        self.fill_idle = fill_idle
        self.round_length = self.slot  # s; the loop's round is the slot
        self.elastic = False
        self.name = "hadare" if forking else "hadar"
        self.admissions: dict[str, Admission] = {}
        self.rejected: set[str] = set()
        self.bounds: tuple[float, float] = (math.nan, math.nan)  # (L, max U) of the last round
        self._plans: dict[str, _Plan] = {}
        self._tried: dict[str, int] = {}
        self._version = 0
        self._segments: _Segments | None = None
        self._cluster: Cluster | None = None
        self._rates: dict[str, tuple[object, np.ndarray]] = {}
        self._currents: dict[str, tuple[int, np.ndarray] | None] = {}
        self._saved_timeline: tuple[tuple[str, ...], tuple[int, ...], tuple[tuple[int, ...], ...]] | None = None

    # ------------------------------------------------------------------ setup
    @property
    def alpha(self) -> float:
        """``max(1, ln(U/L))`` of the last round's prices; the pure online algorithm
        (``COMMITTED``, ``retry=False``) is 2*alpha-competitive in this family (small demands)."""
        lo, hi = self.bounds
        return max(1.0, math.log(hi / lo)) if lo > 0 else math.nan

    def state(self) -> HadarState:
        """What the policy remembers between rounds: its commitments (timeline and plans), its
        admissions, refusals and the rates it read of each job's model; a copy."""
        seg = self._segments
        if seg is not None:
            nodes, starts, usage = tuple(self._nodes), tuple(seg.starts), tuple(seg.usage)
        else:  # not run since set up, or restored and not yet laid on a cluster
            nodes, starts, usage = self._saved_timeline or (None, (), ())
        return HadarState(
            nodes=nodes, segment_starts=tuple(int(t) for t in starts),
            segment_usage=tuple(tuple(int(c) for c in u) for u in usage),
            plans={j: tuple((int(lo), int(hi), tuple(int(c) for c in counts)) for lo, hi, counts in p.pieces)
                   for j, p in self._plans.items()},
            admissions=dict(self.admissions), rejected=tuple(sorted(self.rejected)), tried=dict(self._tried),
            version=self._version, rates={j: tuple(float(x) for x in r) for j, (_, r) in self._rates.items()},
            bounds=tuple(float(b) if math.isfinite(b) else None for b in self.bounds),  # type: ignore[arg-type]
        )

    def restore_state(self, state: PolicyState) -> None:
        """Continue from ``state`` (a :meth:`state` of a Hadar policy with the same options); the
        commitments are laid on the cluster at the next round, whose nodes must be ``state.nodes``."""
        state = expect_state(state, HadarState, self.name)
        self._segments, self._cluster = None, None
        self._saved_timeline = None if state.nodes is None else (state.nodes, state.segment_starts, state.segment_usage)
        self._plans = {j: _Plan([(lo, hi, np.array(c, dtype=np.int64)) for lo, hi, c in pieces])
                       for j, pieces in state.plans.items()}
        self.admissions = dict(state.admissions)
        self.rejected = set(state.rejected)
        self._tried = dict(state.tried)
        self._version = state.version
        self._rates = {j: (_RESTORED, np.array(r, dtype=float)) for j, r in state.rates.items()}
        self.bounds = tuple(math.nan if b is None else b for b in state.bounds)  # type: ignore[assignment]

    def _take_saved_timeline(self) -> None:
        """Lay a restored state's committed-GPU timeline on the cluster just set up."""
        saved, self._saved_timeline = self._saved_timeline, None
        if saved is None:
            return
        nodes, starts, usage = saved
        if tuple(self._nodes) != nodes:
            raise InputError("cluster", self._cluster.name if self._cluster else None,  # type: ignore[union-attr]
                             f"is not the cluster Hadar's restored state was planned on (nodes {list(nodes)[:4]}...)")
        seg = _Segments(len(nodes), starts[0])
        seg.starts = list(starts)
        seg.usage = [np.array(u, dtype=np.int64) for u in usage]
        self._segments = seg

    def _setup(self, cluster: Cluster, t: int) -> None:
        self._cluster = cluster
        self._nodes = [n.name for n in cluster.nodes]
        self._node_index = {n: i for i, n in enumerate(self._nodes)}
        self._types = list(cluster.type_names)
        self._node_type = np.array([self._types.index(n.gpu_type) for n in cluster.nodes])
        self._type_nodes = [[n.name for n in cluster.nodes_of_type(k)] for k in self._types]  # by type index
        self._cap = np.array([n.num_gpus for n in cluster.nodes], dtype=float)
        if isinstance(self.upper, Mapping):
            missing = [k for k in self._types if k not in self.upper]
            if missing:
                raise InputError("upper", dict(self.upper), f"no U for GPU type(s) {missing}")
        self._segments = _Segments(len(self._nodes), t)

    def _set_prices(self, jobs: Sequence[JobState]) -> None:
        """``L`` and ``U`` per node for this round (given, or the active jobs' density bounds)."""
        lo = hi = math.nan
        if (self.lower is None or self.upper is None) and jobs:
            rates = np.stack([self._job_rates(j, self._cluster) for j in jobs])  # type: ignore[arg-type]
            remaining = np.array([self._remaining(j) for j in jobs])
            live = (remaining > 0) & (rates > 0).any(axis=1)
            if live.any():
                lo, hi = density_bounds(pace_slots(remaining[live], rates[live], self.slot),
                                        np.array([j.requested_gpus for j in jobs])[live])
                lo /= 2.0
        lower = float(self.lower) if self.lower is not None else (lo if math.isfinite(lo) else 1.0)
        if isinstance(self.upper, Mapping):
            u_type = np.array([float(self.upper[k]) for k in self._types])
        elif self.upper is not None:
            u_type = np.full(len(self._types), float(self.upper))
        else:
            u_type = np.full(len(self._types), max(hi, lower) if math.isfinite(hi) else lower)
        self._lower = lower
        self._u_node = np.maximum(u_type[self._node_type], lower)
        self.bounds = (lower, float(self._u_node.max()))

    # --------------------------------------------------------------- helpers
    def _job_rates(self, job: JobState, cluster: Cluster) -> np.ndarray:
        """Whole-job rate (estimator units/s) at the requested GPU count on each type (0: cannot
        run); asked of the job's model once (again when the job's model object changes)."""
        cached = self._rates.get(job.job_id)
        if cached is not None and cached[0] is _RESTORED:  # read before a save: the job's model then
            self._rates[job.job_id] = cached = (job.estimator, cached[1])
        if cached is not None and cached[0] is job.estimator:
            return cached[1]
        rates = self._ask_rates(job, cluster)
        self._rates[job.job_id] = (job.estimator, rates)
        return rates

    def _ask_rates(self, job: JobState, cluster: Cluster) -> np.ndarray:
        if job.estimator is None:
            raise InputError(f"job[{job.job_id}].estimator", None, "Hadar needs per-type throughputs")
        w = job.requested_gpus
        return np.array(
            [max(0.0, rate_of(job.estimator, k, w, cluster.gpu_type(k).gpus_per_node)) for k in self._types]
        )

    @staticmethod
    def _remaining(job: JobState) -> float:
        """Work left (estimator units: steps for throughput tables, samples for goodput models)."""
        return float(job.remaining_work)

    def _ideal_slots(self, job: JobState) -> float:
        """Remaining time on the job's fastest type, in slots."""
        best = float(self._job_rates(job, self._cluster).max())  # type: ignore[arg-type]
        return self._remaining(job) / (self.slot * best) if best > 0 else math.inf

    def _critical(self, jobs: Sequence[JobState]) -> dict[str, float]:
        """Remaining solo slots of the jobs that set the makespan (``Order.CRITICAL_FIRST``).

        No schedule ends before ``now + max(T, max_j s_j)``: ``s_j`` is job j's remaining time
        alone on its fastest type, ``T`` the time the GPUs need for all the remaining work
        (:func:`~heteroplan.formulations.hadar.makespan_bound_lp`). A job with ``s_j >= T``
        can set the makespan: each slot it waits adds a slot to that bound, while the other
        jobs can wait without extending it. Such jobs are planned first, longest first (LPT).
        """
        cap = self._cluster.capacity()  # type: ignore[union-attr]
        capacity = np.array([cap[k] for k in self._types], dtype=float)
        live = [j for j in jobs if self._remaining(j) > 0]
        if not live:
            return {}
        rates = np.stack([self._job_rates(j, self._cluster) for j in live])  # type: ignore[arg-type]
        w = np.array([j.requested_gpus for j in live], dtype=float)
        rates = np.where(capacity[None, :] >= w[:, None], rates, 0.0)
        work = np.array([self._remaining(j) for j in live])
        best = rates.max(axis=1)
        ok = best > 0
        if not ok.any():
            return {}
        solo = np.where(ok, work / np.where(ok, best, 1.0), 0.0)  # s
        volume = float((w * solo).sum() / capacity.sum())  # GPU-seconds over all GPUs: below T
        if solo.max() < volume:
            return {}
        sol = solve(makespan_bound_lp(work[ok], rates[ok], w[ok], capacity), time_limit=10.0)
        bound = float(sol.objective) if sol.objective is not None and math.isfinite(sol.objective) else volume
        return {j.job_id: float(solo[i]) / self.slot for i, j in enumerate(live) if ok[i] and solo[i] >= bound * (1 - 1e-9)}

    def _priority(self, job: JobState) -> float:
        """Sort key of :class:`Order` (smaller plans first)."""
        if self.order in (Order.SHORTEST_FIRST, Order.CRITICAL_FIRST):
            return self._ideal_slots(job)
        rates = self._job_rates(job, self._cluster)  # type: ignore[arg-type]
        if self._remaining(job) <= 0 or not (rates > 0).any():
            return math.inf
        n = pace_slots(np.array([self._remaining(job)]), rates[None, :], self.slot)
        return -density_bounds(n, np.array([job.requested_gpus]))[1]

    def _unit_prices(self, usage: np.ndarray, w: int) -> np.ndarray:
        """(S, H, w) prices of up to w units on each node in each segment (inf beyond idle GPUs).

        As in OASiS, a decision pays the price at the utilization before it, per unit.
        """
        g = usage[:, :, None] + np.zeros(w)[None, None, :]
        p = self._lower * (self._u_node[None, :, None] / self._lower) ** (g / self._cap[None, :, None])
        room = (usage[:, :, None] + np.arange(w)[None, None, :]) < self._cap[None, :, None]
        return np.where(room, p, np.inf)

    def _current(self, job: JobState) -> tuple[int, np.ndarray] | None:
        """(pace type, GPUs per node) of the placement the job runs on now; None if not running."""
        if job.job_id not in self._currents:
            self._currents[job.job_id] = self._find_current(job)
        return self._currents[job.job_id]

    def _find_current(self, job: JobState) -> tuple[int, np.ndarray] | None:
        a = job.allocation
        if a is None or not a.placement or any(n not in self._node_index for n, _ in a.placement):
            return None
        counts = np.zeros(len(self._nodes), dtype=np.int64)
        for n, c in a.placement:
            counts[self._node_index[n]] += c
        if counts.sum() != job.requested_gpus:
            return None
        rates = self._job_rates(job, self._cluster)  # type: ignore[arg-type]
        used = np.unique(self._node_type[counts > 0])
        return int(used[np.argmin(rates[used])]), counts

    # ------------------------------------------------------ dual subroutine
    def _slot_costs(self, job: JobState, m: int, prices: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Per segment: price of the W cheapest units of types at least as fast as pace ``m``
        (the job's current units first on ties), and whether W such units are free."""
        w = int(job.requested_gpus)
        rates = self._job_rates(job, self._cluster)  # type: ignore[arg-type]
        ok = rates[self._node_type] >= rates[m] - 1e-12
        pm = np.where(ok[None, :, None], prices, np.inf).reshape(len(prices), -1)
        cost = np.partition(pm, w - 1, axis=1)[:, :w].sum(axis=1)
        return np.where(np.isfinite(cost), cost, 0.0), np.isfinite(cost)

    def _prices_for(self, job: JobState, usage: np.ndarray) -> np.ndarray:
        """(S, H, w) unit prices, the job's current units a hair cheaper (to keep its placement)."""
        prices = self._unit_prices(usage, int(job.requested_gpus))
        current = self._current(job)
        if current is not None:
            keep = np.arange(prices.shape[2])[None, :] < current[1][:, None]  # (H, w)
            prices = np.where(keep[None], prices * (1 - 1e-9), prices)
        return prices

    def _can_keep(self, counts: np.ndarray, usage: np.ndarray) -> bool:
        """Whether a job on ``counts`` GPUs per node can stay where it is this slot: its nodes'
        GPUs are free (``COMMITTED``), or as many GPUs of each of its types (``REPLAN``, whose
        :meth:`_keep_nodes` gives a job that keeps its types its last nodes)."""
        if self.planning is Planning.COMMITTED:
            return bool((usage + counts <= self._cap).all())
        k = len(self._types)
        idle = np.bincount(self._node_type, weights=self._cap - usage, minlength=k)
        return bool((np.bincount(self._node_type, weights=counts, minlength=k) <= idle + 1e-9).all())

    def best_schedule(self, job: JobState, t0: int) -> _Schedule | None:
        """The best schedule for ``job`` decided in slot ``t0`` (highest payoff); None if none fits.

        A schedule at pace m from start s runs in every slot from s on that has W_j free GPUs
        of types at least as fast as m (taking the W_j cheapest), and skips the others, until
        its ``n_m`` slots are done (the greedy of the dual subroutine).
        """
        seg = self._segments
        assert seg is not None
        rates = self._job_rates(job, self._cluster)  # type: ignore[arg-type]
        remaining = self._remaining(job)
        if remaining <= 0 or not (rates > 0).any():
            return None
        starts = np.array(seg.starts, dtype=np.int64)
        usage = np.stack(seg.usage).astype(float)
        prices = self._prices_for(job, usage)
        lengths = np.diff(np.append(starts, starts[-1] + 10**9)).astype(float)
        n_fresh = pace_slots(np.array([remaining]), rates[None, :], self.slot, job.restart_delay)[0]
        n_plain = pace_slots(np.array([remaining]), rates[None, :], self.slot)[0]
        n_slow = float(n_plain[np.isfinite(n_plain)].max())
        # REPLAN decides one slot at a time (a job not run now is planned again next round):
        # only COMMITTED looks at later starts
        horizon = self.lookahead if self.planning is Planning.COMMITTED else 0
        cand = starts[(starts > t0) & (starts <= t0 + horizon)]
        s_all = np.concatenate(([t0], cand)).astype(np.int64)
        current = self._current(job)
        keeps = current is not None and self._can_keep(current[1], usage[0])
        best: _Schedule | None = None
        per_pace = {}
        for m in np.flatnonzero(rates > 0):
            cost, feas = self._slot_costs(job, int(m), prices)
            per_pace[int(m)] = (cost, feas)
            if not feas.any():
                continue
            qf = np.concatenate(([0.0], np.cumsum(lengths * feas)))
            qc = np.concatenate(([0.0], np.cumsum(lengths * cost * feas)))

            def at(t: np.ndarray, q: np.ndarray, per: np.ndarray) -> np.ndarray:
                i = np.searchsorted(starts, t, side="right") - 1
                return q[i] + (t - starts[i]) * per[i]

            n = np.full(len(s_all), n_fresh[m])
            if keeps and current is not None and current[0] == m:
                n[0] = n_plain[m]
            f0 = at(s_all, qf, feas.astype(float))
            target = f0 + n
            i = np.searchsorted(qf, target, side="left") - 1
            valid = (i < len(starts)) & (i >= 0)
            i = np.clip(i, 0, len(starts) - 1)
            e_all = np.where(valid, starts[i] + (target - qf[i]), np.inf)
            e_int = np.where(valid, e_all, 0).astype(np.int64)
            win_cost = at(e_int, qc, cost * feas) - at(s_all, qc, cost * feas)
            utility = completion_utility(np.where(valid, e_all - t0, np.inf), n_slow)
            payoff = np.where(valid, utility - win_cost, -np.inf)
            if self.max_slot is not None:
                payoff = np.where(e_all <= self.max_slot, payoff, -np.inf)
            k = int(np.argmax(payoff))
            if np.isfinite(payoff[k]) and (best is None or payoff[k] > best.payoff):
                best = _Schedule(float(payoff[k]), int(s_all[k]), int(e_int[k]), int(m), float(utility[k]),
                                 float(win_cost[k]))
        varied = self._variable_pace(job, t0, starts, lengths, per_pace, rates, remaining, n_slow,
                                     keeps and current is not None, current)
        if varied is not None and (best is None or varied.payoff > best.payoff):
            best = varied
        return best

    def _variable_pace(self, job: JobState, t0: int, starts: np.ndarray, lengths: np.ndarray,
                       per_pace: dict[int, tuple[np.ndarray, np.ndarray]], rates: np.ndarray, remaining: float,
                       n_slow: float, keeps: bool, current: tuple[int, np.ndarray] | None) -> _Schedule | None:
        """From now, each slot at the fastest pace that has W_j free GPUs (none: skip the slot):
        the schedule that changes pace as GPUs free up, paying a restore at each change."""
        paces = sorted(per_pace, key=lambda m: -rates[m])
        chosen = np.full(len(starts), -1)
        for m in paces:
            chosen = np.where((chosen < 0) & per_pace[m][1], m, chosen)
        if chosen[0] < 0:
            return None  # nothing free now: the single-pace schedules cover waiting
        r_seg = np.where(chosen >= 0, rates[np.maximum(chosen, 0)], 0.0) * self.slot  # work per slot
        c_seg = np.array([per_pace[int(m)][0][i] if m >= 0 else 0.0 for i, m in enumerate(chosen)])
        restart = 0.0 if keeps and current is not None and current[0] == chosen[0] else job.restart_delay
        # a restore at the start (unless it keeps its placement) and at every change of pace
        changes = np.concatenate(([restart > 0], (chosen[1:] != chosen[:-1]) & (chosen[1:] >= 0)))
        lost = np.where(changes, job.restart_delay * r_seg / self.slot, 0.0)  # work lost per segment
        done = np.concatenate(([0.0], np.cumsum(lengths * r_seg - lost)))
        i = int(np.searchsorted(done, remaining - 1e-9, side="left")) - 1
        if i >= len(starts) or i < 0 or r_seg[i] <= 0:
            return None
        need = remaining + lost[i]  # the restore of the last segment is counted in it
        end = int(starts[i] + math.ceil((need - done[i]) / r_seg[i] - 1e-9))
        if self.max_slot is not None and end > self.max_slot:
            return None
        cost = float((lengths[:i] * c_seg[:i]).sum() + (end - starts[i]) * c_seg[i])
        utility = float(completion_utility(np.array([end - t0]), n_slow)[0])
        keep = slice(0, i + 1)
        return _Schedule(utility - cost, t0, end, int(chosen[0]), utility, cost,
                         (tuple(int(x) for x in starts[keep]), tuple(int(x) for x in chosen[keep])))

    def _commit(self, job: JobState, sched: _Schedule, t0: int) -> None:
        """Take the W_j cheapest eligible units in every slot of the schedule that has them."""
        seg = self._segments
        assert seg is not None
        w = int(job.requested_gpus)
        a = seg.split(sched.start)
        b = seg.split(sched.end)
        bounds = seg.starts[a : b + 1]
        rates = self._job_rates(job, self._cluster)  # type: ignore[arg-type]
        if sched.paces is None:
            pace = np.full(b - a, sched.pace)
        else:
            seg_starts, seg_paces = (np.array(x) for x in sched.paces)
            pace = seg_paces[np.searchsorted(seg_starts, np.array(bounds[:-1]), side="right") - 1]
        ok = rates[self._node_type][None, :] >= rates[pace][:, None] - 1e-12  # (segments, H)
        prices = self._prices_for(job, np.stack(seg.usage[a:b]).astype(float))
        flat = np.where(ok[:, :, None] & (pace >= 0)[:, None, None], prices, np.inf).reshape(b - a, -1)
        pick = np.argpartition(flat, w - 1, axis=1)[:, :w]
        room = np.isfinite(np.take_along_axis(flat, pick, axis=1)).all(axis=1)
        plan = _Plan()
        for r, i in enumerate(range(a, b)):
            if not room[r]:
                continue  # the schedule skips this segment
            counts = np.bincount(pick[r] // w, minlength=len(self._nodes))
            seg.usage[i] = seg.usage[i] + counts
            plan.pieces.append((bounds[r], bounds[r + 1], counts))
        self._plans[job.job_id] = plan
        self.admissions[job.job_id] = Admission(job.job_id, t0, sched.start, sched.end - 1,
                                                self._types[sched.pace], sched.utility, sched.cost)

    def _release(self, job_id: str, t: int) -> None:
        seg = self._segments
        assert seg is not None
        for lo, hi, counts in self._plans.pop(job_id).pieces:
            lo = max(lo, t)
            if lo < hi:
                seg.add(lo, hi, counts, sign=-1)
        self._version += 1

    # ----------------------------------------------------------------- round
    def allocate(self, cluster: Cluster, jobs: Sequence[JobState], now: float) -> Mapping[str, Allocation]:
        t = int(round(now / self.slot))
        self._currents = {}
        live = {j.job_id for j in jobs}
        self._rates = {k: v for k, v in self._rates.items() if k in live}
        if self._segments is None or self._cluster is not cluster:
            self._setup(cluster, t)
            self._take_saved_timeline()
        seg = self._segments
        assert seg is not None
        self._set_prices(jobs)
        active = {j.job_id: j for j in jobs}
        for jid in [j for j in self._plans if j not in active]:
            self._release(jid, t)
        seg.compact()
        if seg.drop_before(t):
            self._version += 1
        replan = self.planning is Planning.REPLAN
        order = sorted(jobs, key=lambda j: (j.arrival_time, j.job_id))
        if replan:
            for jid in list(self._plans):
                self._release(jid, t)
            seg.compact()
            critical = self._critical(jobs) if self.order is Order.CRITICAL_FIRST else {}
            order = sorted(jobs, key=lambda j: (-critical.get(j.job_id, -math.inf), self._priority(j),
                                                j.arrival_time, j.job_id))
        for job in order:
            jid = job.job_id
            if jid in self._plans or jid in self.rejected:
                continue
            if not replan and self._tried.get(jid) == self._version:
                continue
            found = self.best_schedule(job, t)
            if found is not None and found.payoff > 0:
                self._commit(job, found, t)
            elif not self.retry and not replan:
                self.rejected.add(jid)
            else:
                self._tried[jid] = self._version
        out: dict[str, Allocation] = {}
        for jid, plan in self._plans.items():
            for lo, hi, counts in plan.pieces:
                if lo <= t < hi:
                    placement = self._placement(counts)
                    out[jid] = make_allocation(placement, cluster)
                    break
        if replan:
            out = self._keep_nodes(cluster, jobs, out)
        if self.fill_idle:
            self._fill_idle(cluster, [j for j in jobs if j.job_id not in self.rejected], out)
        if self.forking:
            self._add_copies(cluster, jobs, out)
        return out

    def _placement(self, counts: np.ndarray) -> tuple[tuple[str, int], ...]:
        """``(node, GPUs)`` pairs of per-node GPU ``counts`` (nodes in the cluster's order)."""
        return tuple((self._nodes[h], int(c)) for h, c in enumerate(counts) if c > 0)

    def _type_counts(self, placement: tuple[tuple[str, int], ...]) -> tuple[int, ...]:
        """GPUs per type (in ``self._types`` order) of ``placement``."""
        counts = np.zeros(len(self._types), dtype=np.int64)
        for n, c in placement:
            counts[self._node_type[self._node_index[n]]] += c
        return tuple(int(c) for c in counts)

    def _keep_nodes(self, cluster: Cluster, jobs: Sequence[JobState], out: dict[str, Allocation]) -> dict[str, Allocation]:
        """The current slot's placements with every job that keeps its GPU types on its last nodes.

        Rates depend on the types a gang uses, not on which nodes of a type (the pace and the
        prices of this slot are the same), but a move costs a restore: a re-planned job whose
        GPUs per type are unchanged keeps its last nodes; the others keep their planned nodes
        where still free, else take what is left of each type.
        """
        last = {j.job_id: j.allocation.placement for j in jobs
                if j.allocation is not None and j.allocation.placement
                and all(n in self._node_index for n, _ in j.allocation.placement)}
        free = {n.name: n.num_gpus for n in cluster.nodes}
        result: dict[str, Allocation] = {}

        def fits(placement: tuple[tuple[str, int], ...]) -> bool:
            return all(free[n] >= c for n, c in placement)

        def take(jid: str, placement: tuple[tuple[str, int], ...]) -> None:
            for n, c in placement:
                free[n] -= c
            result[jid] = out[jid] if placement == out[jid].placement else make_allocation(placement, cluster)

        for jid, a in out.items():
            old = last.get(jid)
            if old is not None and self._type_counts(old) == self._type_counts(a.placement) and fits(old):
                take(jid, old)
        for jid, a in out.items():
            if jid not in result and fits(a.placement):
                take(jid, a.placement)
        nodes_of = self._type_nodes
        for jid, a in out.items():
            if jid in result:
                continue
            parts: list[tuple[str, int]] = []
            for k, c in enumerate(self._type_counts(a.placement)):
                got = take_gpus(free, nodes_of[k], c) if c > 0 else ()
                if got is None:  # cannot happen: the plan's GPUs per type fit
                    raise AssertionError(f"{jid}: no {c} {self._types[k]} GPUs left")
                parts.extend(got)
            for n, c in parts:
                free[n] += c
            take(jid, tuple(parts))
        return result

    def _fill_idle(self, cluster: Cluster, jobs: Sequence[JobState], out: dict[str, Allocation]) -> None:
        """Give the current slot's idle GPUs to queued jobs (no GPUs in ``out``), at price 0.

        Once every active job is planned, nobody else can use this slot's idle GPUs: no job
        arrives within the slot and the slot is gone at its end, so their dual price is 0 while
        they outnumber the queued demand for them (the prices of later slots, which future
        arrivals may want, keep the OASiS function). A queued job's payoff from running now is
        then the completion time it saves, ``r_m (slot - d) / (slot r_best)`` slots (``r_m`` its
        pace on the idle GPUs, ``r_best`` its best rate, ``d`` the restore; 0 if it stays on its
        last placement), positive whenever ``d < slot``. Where the queued gangs outnumber the idle
        GPUs, they go to the highest saving per GPU, ``/ W_j``, first (the greedy of the
        slot's knapsack). A gang takes the slowest eligible types first (its pace is set by
        the slowest anyway), keeping faster idle GPUs for others.
        """
        queued = [j for j in jobs if j.job_id not in out and self._remaining(j) > 0]
        if not queued:
            return
        free = free_gpus(cluster, out.values())
        nodes_of = self._type_nodes
        rates = np.stack([self._job_rates(j, cluster) for j in queued])  # (Q, K)
        best = rates.max(axis=1)
        w = np.array([j.requested_gpus for j in queued])
        delay = np.array([j.restart_delay for j in queued], dtype=float)
        keep = [self._current(j) for j in queued]
        left = np.ones(len(queued), dtype=bool)
        while left.any():
            idle = np.array([sum(free[n] for n in names) for names in nodes_of], dtype=float)
            order = np.argsort(-rates, axis=1, kind="stable")  # each job's types, fastest first
            held = np.cumsum(np.take_along_axis(np.broadcast_to(idle, rates.shape), order, axis=1), axis=1)
            fits = (held >= w[:, None]) & (np.take_along_axis(rates, order, axis=1) > 0)
            pace = np.where(fits.any(axis=1), order[np.arange(len(queued)), fits.argmax(axis=1)], -1)
            # staying on its last placement (if idle) saves the restore; moving runs at ``pace``
            stay_rate = np.array([rates[i, cur[0]] if cur is not None and all(
                free[n] >= c for n, c in self._placement(cur[1])) else 0.0
                for i, cur in enumerate(keep)])
            move = np.where(pace >= 0, rates[np.arange(len(queued)), np.maximum(pace, 0)] * (self.slot - delay), 0.0)
            stays = stay_rate * self.slot >= move
            work = np.maximum(stay_rate * self.slot, move)  # work done this slot, estimator units
            saving = np.where(left & (work > 0), work / (self.slot * np.where(best > 0, best, 1.0) * w), -np.inf)
            i = int(np.argmax(saving))
            if not np.isfinite(saving[i]):
                return
            left[i] = False
            cur = keep[i]
            if stays[i] and cur is not None:
                placement = self._placement(cur[1])
                for n, c in placement:
                    free[n] -= c
            else:
                need, parts = int(w[i]), []
                for k in np.argsort(rates[i], kind="stable"):  # slowest eligible type first
                    if need == 0 or rates[i, k] < rates[i, pace[i]]:
                        continue
                    c = min(need, int(idle[k]))
                    got = take_gpus(free, nodes_of[k], c) if c > 0 else ()
                    parts.extend(got or ())
                    need -= c
                placement = tuple(parts)
            out[queued[i].job_id] = make_allocation(placement, cluster)

    def _add_copies(self, cluster: Cluster, jobs: Sequence[JobState], out: dict[str, Allocation]) -> None:
        """HadarE: fill idle GPUs with extra single-type copies (W_j GPUs each) of active jobs."""
        free = free_gpus(cluster, out.values())
        nodes_of = self._type_nodes
        rates = {j.job_id: self._job_rates(j, cluster) for j in jobs}
        planned = {jid: 0.0 for jid in rates}
        for jid, a in out.items():
            counts = self._type_counts(a.placement)
            planned[jid] = min(rates[jid][k] for k, c in enumerate(counts) if c > 0) * self.slot
        for k in range(len(self._types)):
            while True:
                idle = sum(free[n] for n in nodes_of[k])
                best_job, best_key = None, math.inf
                for j in jobs:
                    r = rates[j.job_id][k]
                    if r <= 0 or j.requested_gpus > idle:
                        continue
                    # finishing time with this copy (s); shortest first
                    key = self._remaining(j) / (planned[j.job_id] / self.slot + r)
                    if key < best_key:
                        best_job, best_key = j, key
                if best_job is None:
                    break
                placement = take_gpus(free, nodes_of[k], best_job.requested_gpus)
                if placement is None:
                    break
                jid = best_job.job_id
                old = out.get(jid)
                merged: dict[str, int] = dict(old.placement) if old else {}
                for n, c in placement:
                    merged[n] = merged.get(n, 0) + c
                out[jid] = make_allocation(tuple(merged.items()), cluster)
                planned[jid] += rates[jid][k] * self.slot
