"""Gavel (OSDI'20): a policy family of LPs over time fractions, with its round-based mechanism.

Each round the per-(job, type) throughput comes from each job's performance model at its
requested GPU count (packed on as few nodes as possible). One LP of Gavel's family
(:mod:`heteroplan.formulations.gavel`) turns that matrix into time fractions ``X[j, k]``:

* ``max_min_fairness`` -- heterogeneity-aware max-min fairness (Gavel's default, ``gavel``);
* ``max_min_fairness_agnostic`` -- the same over time shares, every type alike;
* ``max_sum_throughput`` -- total raw throughput;
* ``finish_time_fairness`` -- the smallest worst ratio of finish time to isolated finish time
  (bisection over the LP's feasibility);
* ``min_makespan`` -- every job done as early as possible;
* ``max_throughput_per_cost`` -- total throughput per dollar (the cluster's ``price_per_hour``).

The LP is re-solved when the set of jobs changes (or every round with ``resolve_every_round``).

Mechanisms. ``mechanism="rounds"`` (default): priorities ``X[j, k] / (rounds j got on k /
rounds j was active)`` (infinite for a pair that got nothing yet) order the (job, type)
pairs; jobs are placed greedily in that order when ``W_j`` GPUs of type k are idle, keeping
last round's nodes when possible. ``mechanism="sia-artifact"`` is what the Sia artifact's
``gavel`` does (see ``docs/sia.md``): throughput in iterations/s at the job's given batch
divided by its application's slowdown (0.1 where the job does not fit the type); an
interior-point solution rounded to 5 decimals (identical jobs split evenly); priority
``X[j, k] / (time j got on k / time all jobs got on k)`` where every new job starts with half a
round of credit on every type and the totals are never reset; every (job, type) pair is
queued, so GPUs the LP leaves idle go to jobs it gave nothing; per type, jobs are placed in
tiers of decreasing size and a job keeps its previous GPUs only if no job of a larger tier
took them (then it packs onto the first free GPUs in node order).
"""

from __future__ import annotations

import logging
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from heteroplan.cluster import Cluster
from heteroplan.errors import InputError, SolverError, check_seconds
from heteroplan.formulations.gavel import (
    finish_time_fairness_model,
    max_min_fairness_model,
    max_sum_throughput_model,
    min_makespan_model,
)
from heteroplan.milp import Model
from heteroplan.policies.base import Allocation, JobState
from heteroplan.policies.packing import (
    free_gpus,
    make_allocation,
    nodes_by_type,
    rate_of,
    take_gpus,
)
from heteroplan.policies.state import PolicyState, expect_state
from heteroplan.solvers import solve

__all__ = ["GavelPolicy", "GavelState", "OBJECTIVES", "MECHANISMS", "solve_max_min_fairness", "solve_time_fractions",
           "solve_finish_time_fairness"]

OBJECTIVES = ("max_min_fairness", "max_min_fairness_agnostic", "max_sum_throughput", "finish_time_fairness",
              "min_makespan", "max_throughput_per_cost")
MECHANISMS = ("rounds", "sia-artifact")
log = logging.getLogger(__name__)

UNFIT_THROUGHPUT = 0.1  # iterations/s the Sia artifact gives a job on a type too small for it


def _solve_x(model: Model, time_limit: float, algorithm: str, what: str) -> tuple[np.ndarray, object]:
    sol = solve(model, time_limit=time_limit, algorithm=algorithm)
    if not sol.has_solution:
        raise SolverError(f"Gavel {what} LP: {sol.status.value} {sol.message}")
    return np.clip(sol["X"], 0.0, 1.0), sol


def solve_max_min_fairness(
    throughputs: np.ndarray,
    scale_factors: np.ndarray,
    capacity: np.ndarray,
    weights: np.ndarray | None = None,
    two_stage: bool = True,
    time_limit: float = 30.0,
    heterogeneity_aware: bool = True,
) -> tuple[np.ndarray, float]:
    """Time fractions ``X`` (jobs, types) and the max-min level ``t`` (HiGHS simplex).

    ``two_stage`` re-solves with ``t`` held at its optimum to hand out capacity the
    bottleneck job cannot use.
    """
    model = max_min_fairness_model(throughputs, scale_factors, capacity, weights,
                                   heterogeneity_aware=heterogeneity_aware)
    x, sol = _solve_x(model, time_limit, "simplex", "max-min fairness")
    level = float(sol["t"][0])  # type: ignore[index]
    if two_stage:
        model2 = max_min_fairness_model(throughputs, scale_factors, capacity, weights, level * (1 - 1e-7),
                                        heterogeneity_aware=heterogeneity_aware)
        sol2 = solve(model2, time_limit=time_limit, algorithm="simplex")
        if sol2.has_solution:
            x = np.clip(sol2["X"], 0.0, 1.0)
    return x, level


def solve_finish_time_fairness(
    throughputs: np.ndarray,
    scale_factors: np.ndarray,
    capacity: np.ndarray,
    remaining_steps: np.ndarray,
    isolated_time: np.ndarray,
    elapsed: np.ndarray | None = None,
    rel_tol: float = 1e-4,
    time_limit: float = 30.0,
) -> tuple[np.ndarray, float]:
    """Time fractions ``X`` and the smallest finish-time-fairness level ``rho`` (bisection on the LP).

    ``rho`` is the worst ``(elapsed + remaining / thr) / isolated`` over the jobs at ``X``.
    """
    tp = np.asarray(throughputs, dtype=float)
    spent = np.zeros(len(tp)) if elapsed is None else np.asarray(elapsed, dtype=float)
    iso = np.asarray(isolated_time, dtype=float)
    rem = np.asarray(remaining_steps, dtype=float)

    def attempt(rho: float) -> np.ndarray | None:
        sol = solve(finish_time_fairness_model(tp, scale_factors, capacity, rem, iso, rho, spent),
                    time_limit=time_limit, algorithm="simplex")
        return np.clip(sol["X"], 0.0, 1.0) if sol.has_solution else None

    # Upper bound: any feasible allocation's worst ratio (max-min fairness is one).
    x0, _ = solve_max_min_fairness(tp, scale_factors, capacity, time_limit=time_limit)
    thr = (x0 * tp).sum(axis=1)
    if (thr <= 0).any():
        raise SolverError("Gavel finish-time fairness: a job gets no throughput under max-min fairness")
    hi = float(((spent + rem / thr) / iso).max()) * (1 + 1e-9)
    lo = float((spent / iso).max())
    best = attempt(hi)
    if best is None:  # numerically at the edge: max-min fairness's allocation reaches hi
        best = x0
    while hi - lo > rel_tol * hi:
        mid = 0.5 * (lo + hi)
        x = attempt(mid)
        if x is None:
            lo = mid
        else:
            best, hi = x, mid
    return best, hi


def solve_time_fractions(
    objective: str,
    throughputs: np.ndarray,
    scale_factors: np.ndarray,
    capacity: np.ndarray,
    remaining_steps: np.ndarray | None = None,
    isolated_time: np.ndarray | None = None,
    elapsed: np.ndarray | None = None,
    algorithm: str = "simplex",
    decimals: int | None = None,
    two_stage: bool = True,
    time_limit: float = 30.0,
    costs: np.ndarray | None = None,
    min_rates: np.ndarray | None = None,
) -> np.ndarray:
    """Time fractions ``X`` (jobs, types) of one of Gavel's :data:`OBJECTIVES`.

    ``costs`` ($/h per GPU of each type) is required by ``max_throughput_per_cost``;
    ``min_rates`` (steps/s per job, 0 = none) adds SLOs to it and to ``max_sum_throughput``.

    ``algorithm`` (``"simplex"``: a vertex; ``"ipm-interior"``: an interior optimum, as the
    artifact's ECOS gives) and ``decimals`` (round X) apply to ``max_sum_throughput``.
    """
    if objective in ("max_min_fairness", "max_min_fairness_agnostic"):
        return solve_max_min_fairness(throughputs, scale_factors, capacity, two_stage=two_stage,
                                      time_limit=time_limit,
                                      heterogeneity_aware=objective == "max_min_fairness")[0]
    if objective in ("max_sum_throughput", "max_throughput_per_cost"):
        if objective == "max_throughput_per_cost" and costs is None:
            raise InputError("costs", costs, "max_throughput_per_cost needs $/h per GPU of each type")
        model = max_sum_throughput_model(throughputs, scale_factors, capacity, costs=costs, min_rates=min_rates)
        x, _ = _solve_x(model, time_limit, algorithm, objective.replace("_", "-"))
    elif objective == "min_makespan":
        x, _ = _solve_x(min_makespan_model(throughputs, scale_factors, capacity, remaining_steps), time_limit,
                        "simplex", "min-makespan")
    elif objective == "finish_time_fairness":
        x, _ = solve_finish_time_fairness(throughputs, scale_factors, capacity, remaining_steps, isolated_time,
                                          elapsed, time_limit=time_limit)
    else:
        raise InputError("objective", objective, f"choose one of {list(OBJECTIVES)}")
    return np.round(x, decimals) if decimals is not None else x


@dataclass(frozen=True)
class GavelState(PolicyState):
    """What Gavel remembers between rounds (:meth:`GavelPolicy.state`).

    Attributes:
        job_set: the (job id, requested GPUs) pairs the time fractions were solved for
            (``None``: never solved); a change of the set re-solves.
        time_fractions: the LP's ``X``: per job, per GPU type, the share of time (0..1).
        runs_on: per job, the GPU types on which it has a positive rate.
        rounds: per job, the rounds it was active (``mechanism="rounds"``).
        received: per job, per GPU type: rounds it got there (``"rounds"``), or seconds it got
            there including its half-round credit (``"sia-artifact"``).
        type_time: per GPU type, the seconds all jobs got (and were credited) there (``"sia-artifact"``).
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
    if job.batch_size <= 0 or not (hasattr(est, "throughput") and hasattr(est, "max_local_bsz")):
        return rate_of(est, gpu_type, gpus, gpus_per_node)
    local = math.ceil(job.batch_size / gpus - 1e-8)
    accum = math.ceil(local / est.max_local_bsz(gpu_type) - 1e-8) - 1
    if gpus == 1:
        accum = max(1, accum)  # as the artifact does
    atomic = math.ceil(local / (accum + 1) - 1e-8)
    atomic = max(1, min(atomic, int(est.app.max_batch_size / (gpus * (accum + 1))))) if hasattr(est, "app") \
        else atomic
    nodes = -(-gpus // gpus_per_node)
    samples = float(np.asarray(est.throughput(gpu_type, nodes, gpus, atomic, accum), dtype=float).reshape(-1)[0])
    return samples / (gpus * atomic * (accum + 1))


class GavelPolicy:
    """Gavel: one LP of its family over time fractions + a round-based allocation mechanism.

    Args:
        objective: one of :data:`OBJECTIVES`.
        mechanism: ``"rounds"`` or ``"sia-artifact"`` (see the module docstring).
        slowdowns: per application, the factor dividing its throughput in the LP (the Sia
            artifact's ``SLOWDOWNS``; ``sia-artifact`` only).
        two_stage: max-min fairness re-solves at the optimal level to use leftover capacity.
        resolve_every_round: re-solve even when the set of jobs did not change.
        time_limit: seconds per LP solve.
        round_length: seconds per round (Gavel's default 360).
        name: the policy's name in results.
        prices: $/h per GPU by type for ``max_throughput_per_cost`` (default: the cluster's).
    """

    elastic = False
    forking = False

    def __init__(self, objective: str = "max_min_fairness", mechanism: str = "rounds",
                 slowdowns: Mapping[str, float] | None = None, two_stage: bool = True,
                 resolve_every_round: bool = False, time_limit: float = 30.0, round_length: float = 360.0,
                 name: str = "gavel", prices: Mapping[str, float] | None = None) -> None:
        if objective not in OBJECTIVES:
            raise InputError("objective", objective, f"choose one of {list(OBJECTIVES)}")
        if mechanism not in MECHANISMS:
            raise InputError("mechanism", mechanism, f"choose one of {list(MECHANISMS)}")
        self.round_length = check_seconds("round_length", round_length)  # s; Gavel's default round
        self.objective, self.mechanism, self.name = objective, mechanism, name
        self.slowdowns = dict(slowdowns or {})
        self.prices = dict(prices or {})
        self.two_stage = two_stage
        # Objectives reading remaining work change every round.
        self.resolve_every_round = resolve_every_round or objective in ("finish_time_fairness", "min_makespan")
        self.time_limit = check_seconds("time_limit", time_limit)
        self._key: tuple | None = None
        self._x: dict[str, dict[str, float]] = {}
        self._rounds: dict[str, int] = {}
        self._received: dict[str, dict[str, float]] = {}
        self._type_time: dict[str, float] = {}  # artifact: seconds all jobs got (and were credited) per type
        self._runs_on: dict[str, set[str]] = {}  # types on which each job has a positive rate
        self.solve_count = 0

    @property
    def artifact(self) -> bool:
        return self.mechanism == "sia-artifact"

    def state(self) -> GavelState:
        """What the policy remembers between rounds: its time fractions and the job set they were
        solved for, and what each job got on each type (its priorities); a copy."""
        return GavelState(
            job_set=self._key, time_fractions={j: dict(x) for j, x in self._x.items()},
            runs_on={j: tuple(sorted(t)) for j, t in self._runs_on.items()}, rounds=dict(self._rounds),
            received={j: dict(r) for j, r in self._received.items()}, type_time=dict(self._type_time),
            solve_count=self.solve_count,
        )

    def restore_state(self, state: PolicyState) -> None:
        """Continue from ``state`` (a :meth:`state` of a Gavel policy with the same options)."""
        state = expect_state(state, GavelState, self.name)
        self._key = None if state.job_set is None else tuple(state.job_set)
        self._x = {j: dict(x) for j, x in state.time_fractions.items()}
        self._runs_on = {j: set(t) for j, t in state.runs_on.items()}
        self._rounds = dict(state.rounds)
        self._received = {j: dict(r) for j, r in state.received.items()}
        self._type_time = dict(state.type_time)
        self.solve_count = state.solve_count

    def _throughputs(self, cluster: Cluster, jobs: Sequence[JobState], types: list[str]) -> np.ndarray:
        cap = cluster.capacity()
        rows = []
        for j in jobs:
            row = []
            for k in types:
                per_node = cluster.gpu_type(k).gpus_per_node
                if not self.artifact:
                    row.append(rate_of(j.estimator, k, j.requested_gpus, per_node) if j.estimator else 1.0)
                elif j.requested_gpus > cap[k]:
                    row.append(UNFIT_THROUGHPUT)
                else:
                    row.append(iteration_rate(j, k, j.requested_gpus, per_node)
                               / self.slowdowns.get(j.application, 1.0))
            rows.append(row)
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
            extra: dict = {}
            if self.objective == "max_throughput_per_cost":
                extra = {"costs": self._prices(cluster, types)}
            if self.objective in ("finish_time_fairness", "min_makespan"):
                rem, iso = self._progress_terms(run, tp[fits], scale[fits], cap)
                extra = {"remaining_steps": rem, "isolated_time": iso,
                         "elapsed": np.array([max(0.0, now - j.arrival_time) for j in run])}
            x = solve_time_fractions(
                self.objective, tp[fits], scale[fits], cap, two_stage=self.two_stage, time_limit=self.time_limit,
                algorithm="ipm-interior" if self.artifact else "simplex", decimals=5 if self.artifact else None,
                **extra,
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

    def allocate(self, cluster: Cluster, jobs: Sequence[JobState], now: float) -> Mapping[str, Allocation]:
        key = tuple(sorted((j.job_id, j.requested_gpus) for j in jobs))
        if self.resolve_every_round or key != self._key:
            self._solve(cluster, jobs, now)
            self._key = key
        if self.artifact:
            return self._allocate_artifact(cluster, jobs)
        active = {j.job_id for j in jobs}
        for gone in [j for j in self._rounds if j not in active]:
            del self._rounds[gone]
            del self._received[gone]
        pairs = []
        for j in jobs:
            rounds = self._rounds.get(j.job_id, 0)
            got = self._received.get(j.job_id, {})
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
            got = self._received.setdefault(j.job_id, {})
            if j.job_id in out:
                t = out[j.job_id].gpu_type
                got[t] = got.get(t, 0) + 1
        return out

    def _allocate_artifact(self, cluster: Cluster, jobs: Sequence[JobState]) -> dict[str, Allocation]:
        types = list(cluster.type_names)
        L = self.round_length
        for k in types:
            self._type_time.setdefault(k, 0.0)
        for j in jobs:
            if j.job_id not in self._received:  # new job: half a round of credit on every type
                self._received[j.job_id] = dict.fromkeys(types, L / 2)
                for k in types:
                    self._type_time[k] += L / 2
        queue = []
        for k in types:
            for order, j in enumerate(jobs):
                if k not in self._runs_on.get(j.job_id, ()):
                    continue  # the job cannot run there (a rate of 0 in its table)
                xk = self._x.get(j.job_id, {}).get(k, 0.0)
                total = self._type_time[k]
                frac = self._received[j.job_id][k] / total if total > 0 else 0.0
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
            self._received[jid][alloc.gpu_type] += L
            self._type_time[alloc.gpu_type] += L
        return out


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
