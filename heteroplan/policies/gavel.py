"""Gavel (OSDI'20) heterogeneity-aware max-min fairness with its round-based mechanism.

Each round: the per-(job, type) throughput comes from each job's
``estimator.goodput(gpu_type, num_nodes, num_gpus)`` at its requested GPU count (so the
policy works for Gavel's rigid jobs and for Sia's jobs with goodput models alike). The max-min
fairness LP (:mod:`heteroplan.formulations.gavel`) gives time fractions ``X[j, k]``; it is
re-solved when the set of jobs changes (or every round with ``resolve_every_round``).
Priorities ``X[j, k] / (rounds j got on k / rounds j was active)`` (infinite for a pair that
has received nothing yet) order the (job, type) pairs; jobs are placed greedily in that order
when W_j GPUs of type k are idle (keeping last round's nodes when possible).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from heteroplan.cluster import Cluster
from heteroplan.errors import SolverError, check_seconds
from heteroplan.formulations.gavel import max_min_fairness_model
from heteroplan.policies.base import Allocation, JobState
from heteroplan.policies.packing import (
    free_gpus,
    make_allocation,
    nodes_by_type,
    rate_of,
    take_gpus,
)
from heteroplan.solvers import solve

__all__ = ["GavelPolicy", "solve_max_min_fairness"]


def solve_max_min_fairness(
    throughputs: np.ndarray,
    scale_factors: np.ndarray,
    capacity: np.ndarray,
    weights: np.ndarray | None = None,
    two_stage: bool = True,
    time_limit: float = 30.0,
) -> tuple[np.ndarray, float]:
    """Time fractions ``X`` (jobs, types) and the max-min level ``t`` (HiGHS simplex).

    ``two_stage`` re-solves with ``t`` held at its optimum to hand out capacity the
    bottleneck job cannot use.
    """
    model = max_min_fairness_model(throughputs, scale_factors, capacity, weights)
    sol = solve(model, time_limit=time_limit, algorithm="simplex")
    if not sol.has_solution:
        raise SolverError(f"Gavel max-min fairness LP: {sol.status.value} {sol.message}")
    level = float(sol["t"][0])
    x = sol["X"]
    if two_stage:
        model2 = max_min_fairness_model(throughputs, scale_factors, capacity, weights, level * (1 - 1e-7))
        sol2 = solve(model2, time_limit=time_limit, algorithm="simplex")
        if sol2.has_solution:
            x = sol2["X"]
    return np.clip(x, 0.0, 1.0), level


class GavelPolicy:
    """Gavel max-min fairness (LP over time fractions) + priority-based round allocation."""

    name = "gavel"
    elastic = False
    forking = False

    def __init__(self, two_stage: bool = True, resolve_every_round: bool = False, time_limit: float = 30.0,
                 round_length: float = 360.0) -> None:
        self.round_length = check_seconds("round_length", round_length)  # s; Gavel's default round
        self.two_stage = two_stage
        self.resolve_every_round = resolve_every_round
        self.time_limit = time_limit
        self._key: tuple | None = None
        self._x: dict[str, dict[str, float]] = {}
        self._rounds: dict[str, int] = {}
        self._received: dict[str, dict[str, int]] = {}
        self.solve_count = 0

    def _solve(self, cluster: Cluster, jobs: Sequence[JobState]) -> None:
        types = list(cluster.type_names)
        cap_all = cluster.capacity()
        cap = np.array([cap_all[k] for k in types], dtype=float)
        tp = np.array(
            [
                [rate_of(j.estimator, k, j.requested_gpus, cluster.gpu_type(k).gpus_per_node) if j.estimator else 1.0
                 for k in types]
                for j in jobs
            ],
            dtype=float,
        ).reshape(len(jobs), len(types))
        tp = np.maximum(tp, 0.0)
        scale = np.array([j.requested_gpus for j in jobs], dtype=float)
        fits = ((tp > 0) & (scale[:, None] <= cap[None, :])).any(axis=1)
        self._x = {j.job_id: {} for j in jobs}
        if fits.any():
            x, _ = solve_max_min_fairness(
                tp[fits], scale[fits], cap, two_stage=self.two_stage, time_limit=self.time_limit
            )
            for row, job in zip(x, [j for j, f in zip(jobs, fits, strict=True) if f], strict=True):
                self._x[job.job_id] = {k: float(v) for k, v in zip(types, row, strict=True) if v > 1e-6}
        self.solve_count += 1

    def allocate(self, cluster: Cluster, jobs: Sequence[JobState], now: float) -> Mapping[str, Allocation]:
        key = tuple(sorted((j.job_id, j.requested_gpus) for j in jobs))
        if self.resolve_every_round or key != self._key:
            self._solve(cluster, jobs)
            self._key = key
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
