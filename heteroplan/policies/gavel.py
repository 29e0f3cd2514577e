"""Gavel (OSDI'20): a policy family of LPs over time fractions, with its round-based mechanisms.

Each round the per-(job, type) throughput comes from each job's performance model at its
requested GPU count (packed on as few nodes as possible). One LP of Gavel's family
(:class:`~heteroplan.policies.gavel_lp.GavelObjective`, solved by
:func:`~heteroplan.policies.gavel_lp.solve_time_fractions`) turns that matrix into time
fractions ``X[j, k]``: ``max_min_fairness`` (Gavel's default, ``gavel``),
``max_min_fairness_agnostic``, ``max_sum_throughput``, ``finish_time_fairness``,
``min_makespan``, ``max_throughput_per_cost`` (the cluster's ``price_per_hour``). The LP is
re-solved when the set of jobs changes (or every round with ``resolve_every_round``, and for
the objectives reading remaining work).

Two mechanisms, one class each:

* :class:`GavelPolicy` (Gavel's rounds): priorities ``X[j, k] / (rounds j got on k / rounds j
  was active)`` (infinite for a pair that got nothing yet) order the (job, type) pairs; jobs
  are placed greedily in that order when ``W_j`` GPUs of type k are idle, keeping last round's
  nodes when possible.
* :class:`GavelArtifactPolicy` (``gavel-sia``) is what the Sia artifact's ``gavel`` does (see
  ``docs/sia.md``): throughput in iterations/s at the job's given batch divided by its
  application's slowdown (0.1 where the job does not fit the type); an interior-point solution
  rounded to 5 decimals (identical jobs split evenly); priority ``X[j, k] / (time j got on k /
  time all jobs got on k)`` where every new job starts with half a round of credit on every
  type and the totals are never reset; every (job, type) pair is queued, so GPUs the LP leaves
  idle go to jobs it gave nothing; per type, jobs are placed in tiers of decreasing size and a
  job keeps its previous GPUs only if no job of a larger tier took them (then it packs onto the
  first free GPUs in node order).
"""

from __future__ import annotations

import logging
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

from heteroplan.cluster import Cluster
from heteroplan.errors import InputError, SolverError, check_seconds
from heteroplan.inputs import enum_choice
from heteroplan.perf.applications import SIA_SLOWDOWNS
from heteroplan.perf.protocols import BatchThroughput, HasApplication
from heteroplan.policies.base import Allocation, JobState
from heteroplan.policies.gavel_lp import (
    GavelObjective,
    solve_finish_time_fairness,
    solve_max_min_fairness,
    solve_time_fractions,
)
from heteroplan.policies.packing import (
    free_gpus,
    make_allocation,
    nodes_by_type,
    rate_of,
    take_gpus,
)
from heteroplan.policies.state import PolicyState, expect_state
from heteroplan.schema import Number, Table, decode

__all__ = ["GavelArtifactPolicy", "GavelObjective", "GavelPolicy", "GavelState", "iteration_rate",
           "solve_finish_time_fairness", "solve_max_min_fairness", "solve_time_fractions"]

log = logging.getLogger(__name__)

UNFIT_THROUGHPUT = 0.1  # iterations/s the Sia artifact gives a job on a type too small for it


@dataclass(frozen=True)
class GavelState(PolicyState):
    """What Gavel remembers between rounds (:meth:`GavelPolicy.state`, :meth:`GavelArtifactPolicy.state`).

    Attributes:
        job_set: the (job id, requested GPUs) pairs the time fractions were solved for
            (``None``: never solved); a change of the set re-solves.
        time_fractions: the LP's ``X``: per job, per GPU type, the share of time (0..1).
        runs_on: per job, the GPU types on which it has a positive rate.
        rounds: per job, the rounds it was active (:class:`GavelPolicy`; empty for the artifact's).
        received: per job, per GPU type: rounds it got there (:class:`GavelPolicy`), or seconds it
            got there including its half-round credit (:class:`GavelArtifactPolicy`); one field
            for both so that saved sessions keep one format.
        type_time: per GPU type, the seconds all jobs got (and were credited) there
            (:class:`GavelArtifactPolicy`; empty for :class:`GavelPolicy`).
        solve_count: LP solves so far.
    """

    job_set: tuple[tuple[str, int], ...] | None
    time_fractions: Mapping[str, Mapping[str, float]]
    runs_on: Mapping[str, tuple[str, ...]]
    rounds: Mapping[str, int]
    received: Mapping[str, Mapping[str, float]]
    type_time: Mapping[str, float]
    solve_count: int

    def to_json(self) -> dict[str, Any]:
        return {
            "job_set": None if self.job_set is None else [[j, g] for j, g in self.job_set],
            "time_fractions": {j: dict(x) for j, x in self.time_fractions.items()},
            "runs_on": {j: list(t) for j, t in self.runs_on.items()},
            "rounds": dict(self.rounds),
            "received": {j: dict(r) for j, r in self.received.items()},
            "type_time": dict(self.type_time),
            "solve_count": self.solve_count,
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> GavelState:
        key = data["job_set"]
        return cls(
            job_set=None if key is None else tuple((str(j), int(g)) for j, g in key),
            time_fractions={str(j): {str(k): float(v) for k, v in x.items()} for j, x in data["time_fractions"].items()},
            runs_on={str(j): tuple(str(k) for k in t) for j, t in data["runs_on"].items()},
            rounds={str(j): int(n) for j, n in data["rounds"].items()},
            received={str(j): {str(k): float(v) for k, v in r.items()} for j, r in data["received"].items()},
            type_time={str(k): float(v) for k, v in data["type_time"].items()},
            solve_count=int(data["solve_count"]),
        )


def iteration_rate(job: JobState, gpu_type: str, gpus: int, gpus_per_node: int) -> float:
    """Iterations/s of a rigid job at its given batch on ``gpus`` packed GPUs (the Sia artifact's
    ``predict_throughput``); the estimator's rate when it has no per-batch throughput model."""
    est = job.estimator
    if est is None:
        return 1.0
    if job.batch_size <= 0 or not isinstance(est, BatchThroughput):
        return rate_of(est, gpu_type, gpus, gpus_per_node)
    local = math.ceil(job.batch_size / gpus - 1e-8)
    accum = math.ceil(local / est.max_local_bsz(gpu_type) - 1e-8) - 1
    if gpus == 1:
        accum = max(1, accum)  # as the artifact does
    atomic = math.ceil(local / (accum + 1) - 1e-8)
    atomic = max(1, min(atomic, int(est.app.max_batch_size / (gpus * (accum + 1))))) if isinstance(est, HasApplication) \
        else atomic
    nodes = -(-gpus // gpus_per_node)
    samples = float(np.asarray(est.throughput(gpu_type, nodes, gpus, atomic, accum), dtype=float).reshape(-1)[0])
    return samples / (gpus * atomic * (accum + 1))


class _GavelLP:
    """What both of Gavel's mechanisms share: the options, the LP over time fractions and its
    inputs (a subclass gives the throughput of a job on a type, and carries the mechanism)."""

    elastic = False
    forking = False
    MECHANISM: ClassVar[str]  # the mechanism's name (the registry's ``mechanism`` option)
    algorithm: ClassVar[str] = "simplex"  # HiGHS algorithm of the LP
    decimals: ClassVar[int | None] = None  # X rounded to this many decimals (None: not rounded)

    def __init__(self, objective: GavelObjective | str = GavelObjective.MAX_MIN_FAIRNESS, two_stage: bool = True,
                 resolve_every_round: bool = False, time_limit: float = 30.0, round_length: float = 360.0,
                 name: str = "gavel", prices: Mapping[str, float] | None = None) -> None:
        self.objective = enum_choice(GavelObjective, "objective", objective)
        self.round_length = check_seconds("round_length", round_length)  # s; Gavel's default round
        self.name = name
        self.prices = decode(Table(Number(low=0, unit="$/h")), prices or {}, "prices")  # per GPU type
        self.two_stage = two_stage
        # Objectives reading remaining work change every round.
        self.resolve_every_round = resolve_every_round or self.objective.reads_progress
        self.time_limit = check_seconds("time_limit", time_limit)
        self._key: tuple[tuple[str, int], ...] | None = None
        self._x: dict[str, dict[str, float]] = {}
        self._runs_on: dict[str, set[str]] = {}  # types on which each job has a positive rate
        self.solve_count = 0

    @property
    def mechanism(self) -> str:
        """The name of this class's mechanism (``"rounds"`` or ``"sia-artifact"``)."""
        return self.MECHANISM

    def _rate(self, cluster: Cluster, job: JobState, gpu_type: str) -> float:
        """The throughput of ``job`` on ``gpu_type`` the LP reads (steps/s or iterations/s)."""
        raise NotImplementedError

    def _lp_state(self, rounds: Mapping[str, int], received: Mapping[str, Mapping[str, float]],
                  type_time: Mapping[str, float]) -> GavelState:
        return GavelState(
            job_set=self._key, time_fractions={j: dict(x) for j, x in self._x.items()},
            runs_on={j: tuple(sorted(t)) for j, t in self._runs_on.items()}, rounds=dict(rounds),
            received={j: dict(r) for j, r in received.items()}, type_time=dict(type_time),
            solve_count=self.solve_count,
        )

    def _restore_lp(self, state: PolicyState) -> GavelState:
        state = expect_state(state, GavelState, self.name)
        self._key = None if state.job_set is None else tuple(state.job_set)
        self._x = {j: dict(x) for j, x in state.time_fractions.items()}
        self._runs_on = {j: set(t) for j, t in state.runs_on.items()}
        self.solve_count = state.solve_count
        return state

    def _time_fractions(self, cluster: Cluster, jobs: Sequence[JobState], now: float) -> None:
        """Solve the LP when the job set changed (or every round when asked)."""
        key = tuple(sorted((j.job_id, j.requested_gpus) for j in jobs))
        if self.resolve_every_round or key != self._key:
            self._solve(cluster, jobs, now)
            self._key = key

    def _throughputs(self, cluster: Cluster, jobs: Sequence[JobState], types: list[str]) -> np.ndarray:
        rows = [[self._rate(cluster, j, k) for k in types] for j in jobs]
        return np.maximum(np.array(rows, dtype=float).reshape(len(jobs), len(types)), 0.0)

    def _solve(self, cluster: Cluster, jobs: Sequence[JobState], now: float) -> None:
        types = list(cluster.type_names)
        cap_all = cluster.capacity()
        cap = np.array([cap_all[k] for k in types], dtype=float)
        tp = self._throughputs(cluster, jobs, types)
        scale = np.array([j.requested_gpus for j in jobs], dtype=float)
        fits = ((tp > 0) & (scale[:, None] <= cap[None, :])).any(axis=1)
        self._x = {j.job_id: {} for j in jobs}
        self._runs_on = {j.job_id: {k for k, v in zip(types, row, strict=True) if v > 0} for j, row in zip(jobs, tp, strict=True)}
        if fits.any():
            run = [j for j, f in zip(jobs, fits, strict=True) if f]
            extra: dict[str, np.ndarray] = {}
            if self.objective is GavelObjective.MAX_THROUGHPUT_PER_COST:
                extra = {"costs": self._prices(cluster, types)}
            if self.objective.reads_progress:
                rem, iso = self._progress_terms(run, tp[fits], scale[fits], cap)
                extra = {"remaining_steps": rem, "isolated_time": iso,
                         "elapsed": np.array([max(0.0, now - j.arrival_time) for j in run])}
            x = solve_time_fractions(
                self.objective, tp[fits], scale[fits], cap, two_stage=self.two_stage, time_limit=self.time_limit,
                algorithm=self.algorithm, decimals=self.decimals, **extra,
            )
            for row, job in zip(x, run, strict=True):
                self._x[job.job_id] = {k: float(v) for k, v in zip(types, row, strict=True) if v > 1e-6}
        self.solve_count += 1

    def _prices(self, cluster: Cluster, types: list[str]) -> np.ndarray:
        """$/h per GPU of each type: the ``prices`` option, else the cluster's ``price_per_hour``;
        a cluster with no prices at all counts every GPU-hour alike (with a log message)."""
        prices = np.array([float(self.prices.get(k, cluster.gpu_type(k).price_per_hour)) for k in types])
        if not (prices > 0).any():
            log.info("gavel %s: cluster %s has no GPU prices; every GPU-hour costs the same", self.name, cluster.name)
            return np.ones(len(types))
        if not (np.isfinite(prices) & (prices > 0)).all():
            raise InputError("prices", dict(zip(types, prices.tolist(), strict=True)),
                             "throughput per cost needs a price > 0 ($/h per GPU) for every GPU type")
        return prices

    @staticmethod
    def _progress_terms(jobs: Sequence[JobState], tp: np.ndarray, scale: np.ndarray,
                        cap: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Remaining work (the estimator's units) and isolated time (s: the remaining work on
        a 1/n share of every type, n jobs, averaged over types)."""
        rem = np.array([max(j.remaining_work, 1e-9) for j in jobs])
        share = np.minimum(1.0, cap[None, :] / (len(jobs) * scale[:, None]))  # time fraction on each type
        iso_rate = (tp * share).sum(axis=1) / max(1, tp.shape[1])
        iso_rate = np.where(iso_rate > 0, iso_rate, tp.max(axis=1))
        return rem, rem / iso_rate


class GavelPolicy(_GavelLP):
    """Gavel: one LP of its family over time fractions + its round-based mechanism (priorities
    from the rounds each job got on each type).

    Args:
        objective: a :class:`~heteroplan.policies.gavel_lp.GavelObjective` (or its value).
        two_stage: max-min fairness re-solves at the optimal level to use leftover capacity.
        resolve_every_round: re-solve even when the set of jobs did not change.
        time_limit: seconds per LP solve.
        round_length: seconds per round (Gavel's default 360).
        name: the policy's name in results.
        prices: $/h per GPU by type for ``max_throughput_per_cost`` (default: the cluster's).
    """

    MECHANISM = "rounds"

    def __init__(self, objective: GavelObjective | str = GavelObjective.MAX_MIN_FAIRNESS, two_stage: bool = True,
                 resolve_every_round: bool = False, time_limit: float = 30.0, round_length: float = 360.0,
                 name: str = "gavel", prices: Mapping[str, float] | None = None) -> None:
        super().__init__(objective, two_stage, resolve_every_round, time_limit, round_length, name, prices)
        self._rounds: dict[str, int] = {}  # per job: rounds it was active
        self._rounds_on: dict[str, dict[str, float]] = {}  # per job, per type: rounds it got there

    def state(self) -> GavelState:
        """What the policy remembers between rounds: its time fractions and the job set they were
        solved for, and the rounds each job got on each type (its priorities); a copy."""
        return self._lp_state(self._rounds, self._rounds_on, {})

    def restore_state(self, state: PolicyState) -> None:
        """Continue from ``state`` (a :meth:`state` of a Gavel policy with the same options)."""
        state = self._restore_lp(state)
        self._rounds = dict(state.rounds)
        self._rounds_on = {j: dict(r) for j, r in state.received.items()}

    def _rate(self, cluster: Cluster, job: JobState, gpu_type: str) -> float:
        per_node = cluster.gpu_type(gpu_type).gpus_per_node
        return rate_of(job.estimator, gpu_type, job.requested_gpus, per_node) if job.estimator else 1.0

    def allocate(self, cluster: Cluster, jobs: Sequence[JobState], now: float) -> Mapping[str, Allocation]:
        self._time_fractions(cluster, jobs, now)
        active = {j.job_id for j in jobs}
        for gone in [j for j in self._rounds if j not in active]:
            del self._rounds[gone]
            del self._rounds_on[gone]
        pairs = []
        for j in jobs:
            rounds = self._rounds.get(j.job_id, 0)
            got = self._rounds_on.get(j.job_id, {})
            for k, xk in self._x.get(j.job_id, {}).items():
                frac = got.get(k, 0) / rounds if rounds else 0.0
                prio = xk / frac if frac > 0 else np.inf
                pairs.append((-prio, -xk, j.arrival_time, j.job_id, k, j))
        pairs.sort(key=lambda p: p[:5])
        free = free_gpus(cluster)
        nodes_of = nodes_by_type(cluster)
        out: dict[str, Allocation] = {}
        for *_, k, job in pairs:
            if job.job_id in out:
                continue
            prev = job.allocation
            placement = None
            if (
                prev is not None
                and prev.gpu_type == k
                and prev.num_gpus == job.requested_gpus
                and prev.placement
                and all(free.get(n, 0) >= c for n, c in prev.placement)
            ):
                for n, c in prev.placement:
                    free[n] -= c
                placement = prev.placement
            else:
                placement = take_gpus(free, nodes_of[k], job.requested_gpus)
            if placement is not None:
                out[job.job_id] = make_allocation(tuple(placement), cluster)
        for j in jobs:
            self._rounds[j.job_id] = self._rounds.get(j.job_id, 0) + 1
            got = self._rounds_on.setdefault(j.job_id, {})
            if j.job_id in out:
                t = out[j.job_id].gpu_type
                got[t] = got.get(t, 0) + 1
        return out


class GavelArtifactPolicy(_GavelLP):
    """Gavel as the Sia artifact runs it (``gavel-sia``; module doc): iteration rates divided by
    each application's slowdown, an interior-point LP rounded to 5 decimals, priorities from the
    seconds each job got on each type (half a round of credit to start), tiered placement.

    ``objective`` (default ``max_sum_throughput``, as the artifact's), ``two_stage``,
    ``resolve_every_round``, ``time_limit``, ``round_length``, ``name`` and ``prices`` are
    :class:`GavelPolicy`'s options; ``slowdowns``: per application, the factor dividing its
    throughput in the LP (default: the Sia artifact's ``SLOWDOWNS``; ``{}``: none).
    """

    MECHANISM = "sia-artifact"
    algorithm = "ipm-interior"  # an interior optimum, as the artifact's ECOS gives
    decimals = 5

    def __init__(self, objective: GavelObjective | str = GavelObjective.MAX_SUM_THROUGHPUT,
                 slowdowns: Mapping[str, float] | None = None, two_stage: bool = True,
                 resolve_every_round: bool = False, time_limit: float = 30.0, round_length: float = 360.0,
                 name: str = "gavel-sia", prices: Mapping[str, float] | None = None) -> None:
        super().__init__(objective, two_stage, resolve_every_round, time_limit, round_length, name, prices)
        self.slowdowns = decode(Table(Number(above=0)), SIA_SLOWDOWNS if slowdowns is None else slowdowns, "slowdowns")
        self._seconds_on: dict[str, dict[str, float]] = {}  # per job, per type: seconds got (and credited)
        self._type_seconds: dict[str, float] = {}  # per type: seconds all jobs got (and were credited)

    def state(self) -> GavelState:
        """What the policy remembers between rounds: its time fractions and the job set they were
        solved for, and the seconds each job (and all jobs) got on each type; a copy."""
        return self._lp_state({}, self._seconds_on, self._type_seconds)

    def restore_state(self, state: PolicyState) -> None:
        """Continue from ``state`` (a :meth:`state` of a policy like this one, same options)."""
        state = self._restore_lp(state)
        self._seconds_on = {j: dict(r) for j, r in state.received.items()}
        self._type_seconds = dict(state.type_time)

    def _rate(self, cluster: Cluster, job: JobState, gpu_type: str) -> float:
        if job.requested_gpus > cluster.capacity()[gpu_type]:
            return UNFIT_THROUGHPUT
        per_node = cluster.gpu_type(gpu_type).gpus_per_node
        return iteration_rate(job, gpu_type, job.requested_gpus, per_node) / self.slowdowns.get(job.application, 1.0)

    def allocate(self, cluster: Cluster, jobs: Sequence[JobState], now: float) -> Mapping[str, Allocation]:
        self._time_fractions(cluster, jobs, now)
        types = list(cluster.type_names)
        chosen = self._choose(cluster, jobs, types)
        free = free_gpus(cluster)
        nodes_of = nodes_by_type(cluster)
        out: dict[str, Allocation] = {}
        for k in types:
            for size in sorted({j.requested_gpus for j in chosen[k]}, reverse=True):
                tier = [j for j in chosen[k] if j.requested_gpus == size]
                for j in tier:  # keep previous GPUs where a larger tier did not take them
                    prev = j.allocation
                    if prev is not None and prev.gpu_type == k and prev.num_gpus == size and prev.placement \
                            and all(free[n] >= c for n, c in prev.placement):
                        for n, c in prev.placement:
                            free[n] -= c
                        out[j.job_id] = prev
                for j in tier:
                    if j.job_id not in out:
                        out[j.job_id] = make_allocation(_pack_in_order(free, nodes_of[k], size), cluster)
        for jid, alloc in out.items():
            self._seconds_on[jid][alloc.gpu_type] += self.round_length
            self._type_seconds[alloc.gpu_type] += self.round_length
        return out

    def _choose(self, cluster: Cluster, jobs: Sequence[JobState], types: list[str]) -> dict[str, list[JobState]]:
        """Per type, the jobs it runs this round: every (job, type) pair queued by priority, each
        job taken on its first type with room (new jobs get half a round of credit everywhere)."""
        half = self.round_length / 2
        for k in types:
            self._type_seconds.setdefault(k, 0.0)
        for j in jobs:
            if j.job_id not in self._seconds_on:  # new job: half a round of credit on every type
                self._seconds_on[j.job_id] = dict.fromkeys(types, half)
                for k in types:
                    self._type_seconds[k] += half
        queue = []
        for k in types:
            for order, j in enumerate(jobs):
                if k not in self._runs_on.get(j.job_id, ()):
                    continue  # the job cannot run there (a rate of 0 in its table)
                xk = self._x.get(j.job_id, {}).get(k, 0.0)
                total = self._type_seconds[k]
                frac = self._seconds_on[j.job_id][k] / total if total > 0 else 0.0
                prio = xk / frac if (xk > 0 and frac > 0) else xk * 1e9
                queue.append((prio, xk, k, order, j))
        queue.sort(key=lambda e: (e[0], e[1]), reverse=True)  # stable: ties keep type, then job order
        left = cluster.capacity()
        chosen: dict[str, list[JobState]] = {k: [] for k in types}
        done: set[str] = set()
        for _, _, k, _, j in queue:
            if j.job_id in done or j.requested_gpus > left[k]:
                continue
            left[k] -= j.requested_gpus
            done.add(j.job_id)
            chosen[k].append(j)
        return chosen


def _pack_in_order(free: dict[str, int], nodes: Sequence[str], count: int) -> tuple[tuple[str, int], ...]:
    """The first ``count`` free GPUs walking ``nodes`` in order (debits ``free``)."""
    placement = []
    for n in nodes:
        if count == 0:
            break
        c = min(count, free[n])
        if c:
            placement.append((n, c))
            free[n] -= c
            count -= c
    if count:
        raise SolverError(f"Gavel placement: {count} GPUs short (GPU bookkeeping bug)")
    return tuple(placement)
