"""Hadar: online primal-dual, task-level heterogeneity-aware scheduling (and HadarE forking).

The variant heteroplan implements (see ``docs/hadar.md`` and the project's HADAR.md): the
OASiS-style online primal-dual algorithm made task-level heterogeneous.

- Time is slotted (slot = round length ``slot`` s). Node h (all its GPUs of one type k) has
  ``C_h`` GPUs; ``g_h(t)`` of them are committed in slot t. The price of the next GPU is
  ``p = L * (U_k / L) ** (g / C_h)``: idle GPUs cost ``L``, a full node ``U_k``.
- Utility of finishing job j at the end of slot c (decision slot t0): with
  ``n0 = ceil(E_j / (slot * T_j^best))`` slots on its fastest type,
  ``f_j(c) = W_j * n0**2 / (c - t0 + 1)`` — GPU-slots earned per GPU-slot spent is at most 1
  (reached by running at once on the fastest type), so ``U = 1`` and any ``L < 1`` admits a
  job on an idle cluster.
- Dual subroutine: a schedule runs the job's W_j tasks in consecutive slots ``[s, s+n_m)`` at
  pace m (the slowest type it uses; ``n_m = ceil(E_j / (slot * T_j^m))``); in each slot it takes
  the W_j cheapest GPU units among types at least as fast as m (node prices rise with every
  unit taken). Starts considered: now and every price breakpoint within ``lookahead`` slots.
  Payoff = utility - price of the units; the best (start, pace) is kept.
- Admission: payoff > 0 commits the schedule and raises the prices of the GPUs it uses.
  ``retry=True`` (default) re-tries waiting jobs each round with utility measured from that
  round; ``retry=False`` is the pure online algorithm (a job is decided once, at arrival,
  and dropped if rejected) whose objective the competitive-ratio test checks.
- HadarE (``forking=True``): after the committed gangs, idle GPUs get extra copies of active
  jobs (W_j GPUs of one type each) for this round; the simulator adds the copies' progress.

The policy reads each job's ``remaining_work`` and per-type rates from its performance model
(:class:`~heteroplan.policies.base.PerfModel`) in the same units, so it runs on Gavel-style
throughput tables and on Sia goodput models alike. The experiment harness (the pure online
algorithm against the offline MILP) is :mod:`heteroplan.sim.hadar_experiments`.

A job that finishes early (faster types than its pace, or forks) releases what it had committed.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from heteroplan.cluster import Cluster
from heteroplan.errors import InputError
from heteroplan.policies.base import Allocation, JobState
from heteroplan.policies.packing import free_gpus, make_allocation, rate_of, take_gpus

__all__ = ["HadarPolicy", "Admission", "price"]


def price(committed: np.ndarray, capacity: np.ndarray, lower: float, upper: np.ndarray) -> np.ndarray:
    """Price of the next GPU unit: ``L * (U / L) ** (committed / capacity)`` (elementwise)."""
    return lower * (upper / lower) ** (np.asarray(committed, float) / capacity)


@dataclass(frozen=True)
class Admission:
    """Record of one admitted job (slots are absolute slot indices)."""

    job_id: str
    decided: int
    start: int
    end: int  # last slot (inclusive)
    pace: str
    utility: float
    cost: float


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


class HadarPolicy:
    """Online primal-dual scheduler (Hadar variant); ``forking=True`` gives HadarE.

    Args:
        slot: slot (round) length, seconds.
        lower: price of an idle GPU (``L``), in utility units per GPU-slot.
        upper: price of a full node (``U``), a number or ``{gpu_type: U_k}``.
        retry: re-try rejected jobs every round (else drop them, as in pure OASiS).
        lookahead: latest start considered, in slots after the decision slot.
        max_slot: schedules must end before this absolute slot (None: no limit).
        forking: HadarE — give idle GPUs to extra copies of active jobs each round.
        replan: each round, drop every commitment from this slot on and re-run the dual
            subroutine for all active jobs, shortest ideal remaining time first (a preemptive
            variant; ``retry`` is implied).
    """

    def __init__(
        self,
        slot: float = 360.0,
        lower: float = 0.25,
        upper: float | Mapping[str, float] = 1.0,
        retry: bool = True,
        lookahead: int = 48,
        max_slot: int | None = None,
        forking: bool = False,
        replan: bool = False,
    ) -> None:
        if not slot > 0:
            raise InputError("slot", slot, "must be > 0 s")
        if not lower > 0:
            raise InputError("lower", lower, "must be > 0")
        uppers = upper.values() if isinstance(upper, Mapping) else [upper]
        if any(not u >= lower for u in uppers):
            raise InputError("upper", upper, f"must be >= lower={lower}")
        if lookahead < 0:
            raise InputError("lookahead", lookahead, "must be >= 0 slots")
        self.slot = float(slot)
        self.lower = float(lower)
        self.upper = upper
        self.retry = retry
        self.lookahead = int(lookahead)
        self.max_slot = max_slot
        self.forking = forking
        self.replan = replan
        self.round_length = self.slot  # s; the loop's round is the slot
        self.elastic = False
        self.name = "hadare" if forking else "hadar"
        self.admissions: dict[str, Admission] = {}
        self.rejected: set[str] = set()
        self._plans: dict[str, _Plan] = {}
        self._tried: dict[str, int] = {}
        self._version = 0
        self._segments: _Segments | None = None
        self._cluster: Cluster | None = None
        self._rates: dict[str, np.ndarray] = {}

    # ------------------------------------------------------------------ setup
    @property
    def alpha(self) -> float:
        """``max(1, ln(U/L))``; the pure online algorithm (retry=False) is 2*alpha-competitive in this family."""
        u = max(self.upper.values()) if isinstance(self.upper, Mapping) else self.upper
        return max(1.0, math.log(u / self.lower))

    def _setup(self, cluster: Cluster, t: int) -> None:
        self._cluster = cluster
        self._nodes = [n.name for n in cluster.nodes]
        self._types = list(cluster.type_names)
        self._node_type = np.array([self._types.index(n.gpu_type) for n in cluster.nodes])
        self._cap = np.array([n.num_gpus for n in cluster.nodes], dtype=float)
        if isinstance(self.upper, Mapping):
            missing = [k for k in self._types if k not in self.upper]
            if missing:
                raise InputError("upper", dict(self.upper), f"no U for GPU type(s) {missing}")
            u_type = np.array([float(self.upper[k]) for k in self._types])
        else:
            u_type = np.full(len(self._types), float(self.upper))
        self._u_node = u_type[self._node_type]
        self._segments = _Segments(len(self._nodes), t)

    # --------------------------------------------------------------- helpers
    def _job_rates(self, job: JobState, cluster: Cluster) -> np.ndarray:
        """Whole-job rate (estimator units/s) at the requested GPU count on each type (0: cannot
        run); asked of the job's model once per round."""
        cached = self._rates.get(job.job_id)
        if cached is not None:
            return cached
        self._rates[job.job_id] = rates = self._ask_rates(job, cluster)
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

    def _unit_prices(self, usage: np.ndarray, w: int) -> np.ndarray:
        """(S, H, w) prices of up to w units on each node in each segment (inf beyond idle GPUs).

        As in OASiS, a decision pays the price at the utilization before it, per unit.
        """
        g = usage[:, :, None] + np.zeros(w)[None, None, :]
        p = self.lower * (self._u_node[None, :, None] / self.lower) ** (g / self._cap[None, :, None])
        room = (usage[:, :, None] + np.arange(w)[None, None, :]) < self._cap[None, :, None]
        return np.where(room, p, np.inf)

    # ------------------------------------------------------ dual subroutine
    def best_schedule(self, job: JobState, t0: int) -> tuple[float, dict] | None:
        """The best (payoff, schedule) for ``job`` decided in slot ``t0``; None if none fits."""
        seg = self._segments
        assert seg is not None
        w = int(job.requested_gpus)
        rates = self._job_rates(job, self._cluster)  # type: ignore[arg-type]
        remaining = self._remaining(job)
        if remaining <= 0 or not (rates > 0).any():
            return None
        starts = np.array(seg.starts, dtype=np.int64)
        usage = np.stack(seg.usage).astype(float)
        prices = self._unit_prices(usage, w)  # (S, H, w)
        paces = np.flatnonzero(rates > 0)
        n_slots = np.ceil(remaining / (self.slot * rates[paces]) - 1e-9).astype(np.int64)
        n0 = int(n_slots.min())
        lengths = np.diff(starts)
        cand = starts[(starts > t0) & (starts <= t0 + self.lookahead)]
        s_all = np.concatenate(([t0], cand))
        best: tuple[float, dict] | None = None
        rate_node = rates[self._node_type]
        for m, n in zip(paces, n_slots, strict=True):
            ok = rate_node >= rates[m] - 1e-12
            pm = np.where(ok[None, :, None], prices, np.inf).reshape(len(starts), -1)
            if pm.shape[1] < w:
                continue
            cost = np.partition(pm, w - 1, axis=1)[:, :w].sum(axis=1)  # (S,) per slot
            bad = ~np.isfinite(cost)
            cost0 = np.where(bad, 0.0, cost)
            # prefix sums at segment starts (relative to starts[0])
            q_cost = np.concatenate(([0.0], np.cumsum(lengths * cost0[:-1])))
            q_bad = np.concatenate(([0], np.cumsum(lengths * bad[:-1])))
            e_all = s_all + n

            def prefix(t: np.ndarray, q_cost=q_cost, q_bad=q_bad, cost0=cost0, bad=bad) -> tuple:
                i = np.searchsorted(starts, t, side="right") - 1
                return q_cost[i] + (t - starts[i]) * cost0[i], q_bad[i] + (t - starts[i]) * bad[i]

            c_end, b_end = prefix(e_all)
            c_start, b_start = prefix(s_all)
            win_cost = c_end - c_start
            feasible = (b_end - b_start) == 0
            if self.max_slot is not None:
                feasible &= e_all <= self.max_slot
            utility = w * n0 * n0 / (e_all - t0).astype(float)
            payoff = np.where(feasible, utility - win_cost, -np.inf)
            k = int(np.argmax(payoff))
            if np.isfinite(payoff[k]) and (best is None or payoff[k] > best[0]):
                best = (
                    float(payoff[k]),
                    {
                        "start": int(s_all[k]),
                        "end": int(e_all[k]),
                        "pace": int(m),
                        "utility": float(utility[k]),
                        "cost": float(win_cost[k]),
                    },
                )
        return best

    def _commit(self, job: JobState, sched: dict, t0: int) -> None:
        seg = self._segments
        assert seg is not None
        w = int(job.requested_gpus)
        rates = self._job_rates(job, self._cluster)  # type: ignore[arg-type]
        ok = rates[self._node_type] >= rates[sched["pace"]] - 1e-12
        a = seg.split(sched["start"])
        b = seg.split(sched["end"])
        plan = _Plan()
        bounds = seg.starts[a : b + 1]
        for i, lo, hi in zip(range(a, b), bounds[:-1], bounds[1:], strict=True):
            p = np.where(ok[None, :, None], self._unit_prices(seg.usage[i][None, :].astype(float), w), np.inf)
            flat = p.reshape(-1)
            pick = np.argpartition(flat, w - 1)[:w]
            counts = np.bincount(pick // w, minlength=len(self._nodes))
            seg.usage[i] = seg.usage[i] + counts
            plan.pieces.append((lo, hi, counts))
        self._plans[job.job_id] = plan
        self.admissions[job.job_id] = Admission(
            job.job_id,
            t0,
            sched["start"],
            sched["end"] - 1,
            self._types[sched["pace"]],
            sched["utility"],
            sched["cost"],
        )

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
        self._rates = {}
        if self._segments is None or self._cluster is not cluster:
            self._setup(cluster, t)
        seg = self._segments
        assert seg is not None
        active = {j.job_id: j for j in jobs}
        for jid in [j for j in self._plans if j not in active]:
            self._release(jid, t)
        seg.compact()
        if seg.drop_before(t):
            self._version += 1
        order = sorted(jobs, key=lambda j: (j.arrival_time, j.job_id))
        if self.replan:
            for jid in list(self._plans):
                self._release(jid, t)
            seg.compact()
            order = sorted(jobs, key=lambda j: (self._ideal_slots(j), j.arrival_time, j.job_id))
        for job in order:
            jid = job.job_id
            if jid in self._plans or jid in self.rejected:
                continue
            if not self.replan and self._tried.get(jid) == self._version:
                continue
            found = self.best_schedule(job, t)
            if found is not None and found[0] > 0:
                self._commit(job, found[1], t)
            elif not self.retry and not self.replan:
                self.rejected.add(jid)
            else:
                self._tried[jid] = self._version
        out: dict[str, Allocation] = {}
        for jid, plan in self._plans.items():
            for lo, hi, counts in plan.pieces:
                if lo <= t < hi:
                    placement = tuple((self._nodes[h], int(c)) for h, c in enumerate(counts) if c > 0)
                    out[jid] = make_allocation(placement, cluster)
                    break
        if self.forking:
            self._add_copies(cluster, jobs, out)
        return out

    def _add_copies(self, cluster: Cluster, jobs: Sequence[JobState], out: dict[str, Allocation]) -> None:
        """HadarE: fill idle GPUs with extra single-type copies (W_j GPUs each) of active jobs."""
        free = free_gpus(cluster, out.values())
        nodes_of = {k: [n.name for n in cluster.nodes_of_type(k)] for k in self._types}
        rates = {j.job_id: self._job_rates(j, cluster) for j in jobs}
        planned = {jid: 0.0 for jid in rates}
        for jid, a in out.items():
            r = rates[jid]
            by_type = {}
            for node, c in a.placement:
                k = self._types.index(cluster.nodes[self._nodes.index(node)].gpu_type)
                by_type[k] = by_type.get(k, 0) + c
            planned[jid] = min(r[k] for k in by_type) * self.slot
        for k in range(len(self._types)):
            while True:
                idle = sum(free[n] for n in nodes_of[self._types[k]])
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
                placement = take_gpus(free, nodes_of[self._types[k]], best_job.requested_gpus)
                if placement is None:
                    break
                jid = best_job.job_id
                old = out.get(jid)
                merged: dict[str, int] = dict(old.placement) if old else {}
                for n, c in placement:
                    merged[n] = merged.get(n, 0) + c
                out[jid] = make_allocation(tuple(merged.items()), cluster)
                planned[jid] += rates[jid][k] * self.slot
