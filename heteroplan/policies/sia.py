"""Sia: heterogeneity- and adaptivity-aware round-based scheduling by an ILP over goodput."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from types import MappingProxyType

import numpy as np

from heteroplan.cluster import Cluster
from heteroplan.errors import InputError, check_seconds
from heteroplan.formulations.sia import (
    ConfigSet,
    SiaResult,
    build_sia_model,
    check_utility,
    restart_factor,
)
from heteroplan.inputs import enum_choice, finite_number
from heteroplan.perf.goodput import GoodputModel
from heteroplan.policies.base import Allocation, JobState
from heteroplan.policies.common import GoodputCache, ScaleFrom, current_config, goodput_pairs
from heteroplan.policies.placement import place
from heteroplan.policies.requested_batch import RequestedBatchModel
from heteroplan.policies.sia_solve import SolveMode, check_solve_options, solve_sia

__all__ = ["SiaPolicy", "ARTIFACT_RESTART_PENALTIES", "BatchLimit"]

# Seconds the Sia artifact's policy prices a restart at, per application ("measured on a real
# physical cluster", sia-simulator/sia.py get_restart_penalty); its simulator charges the
# applications' own restore delays (cifar10 50 s, yolov3 80 s), so the two differ.
ARTIFACT_RESTART_PENALTIES: Mapping[str, float] = MappingProxyType({
    "deepspeech2": 25.0, "imagenet": 250.0, "cifar10": 30.0, "bert": 120.0, "yolov3": 45.0,
})


class BatchLimit(StrEnum):
    """The largest total batch Sia plans a job's goodput with."""

    APPLICATION = "application"
    """Its application's largest batch."""
    REQUESTED = "requested"
    """The batch its workload requested (the Sia artifact's ``Job.get_speedup_fn``)."""


@dataclass
class SiaPolicy:
    """Sia's policy (see :mod:`heteroplan.formulations.sia` for the model).

    Attributes:
        p: utility exponent (default -0.5, minimized).
        lam: penalty per unallocated job.
        restart_penalty: apply the restart factor to non-current configurations.
        restart_prices: seconds a restart is priced at in the restart factor, per application
            (default: the Sia artifact's :data:`ARTIFACT_RESTART_PENALTIES`); jobs of other
            applications are priced at their own restart delay. ``{}``: every job at its own.
        young_exempt: a job younger than its restart price is not penalized (factor 1), as
            the Sia artifact does ("don't penalize jobs that have not scaled up even once").
        batch_limit: the largest total batch the policy plans a job's goodput with
            (:class:`BatchLimit` or its value): ``"requested"`` (default: the batch its workload
            requested, as the Sia artifact's policy does; the job still runs at the best batch up
            to its application's limit; see :mod:`heteroplan.policies.requested_batch`) or
            ``"application"`` (its application's largest, as the policy planned before it
            followed the artifact here).
        scale_up: at most this factor more GPUs per round than ``scale_up_from`` (a
            :class:`~heteroplan.policies.common.ScaleFrom` or its value):
            ``"max"`` (default, the Sia artifact: the most GPUs the job has run on) or
            ``"current"`` (its current or last allocation).
        mode: a :class:`~heteroplan.formulations.sia.SolveMode` or its value: ``"milp"``,
            ``"lp-round"``, or ``"auto"`` (default: LP + rounding, kept when its
            measured gap to the LP bound, or to the tighter knapsack bound of small models, is at
            most ``mip_gap``; else the exact MILP while the model has at most ``auto_limit``
            variables).
        time_limit: seconds per solve; mip_gap: relative gap requested (default 1%).
        threads: HiGHS threads (``None``: one for small models, see
            :func:`heteroplan.solvers.highs.default_threads`).

    ``last_result`` holds the latest round's :class:`~heteroplan.formulations.sia.SiaResult`:
    which solve chose (``mode``), its objective, bound and gap.
    """

    p: float = -0.5
    lam: float = 1.1
    restart_penalty: bool = True
    restart_prices: Mapping[str, float] = field(default_factory=lambda: ARTIFACT_RESTART_PENALTIES)
    young_exempt: bool = True
    batch_limit: BatchLimit = BatchLimit.REQUESTED
    scale_up: float = 2.0
    scale_up_from: ScaleFrom = ScaleFrom.MAX
    mode: SolveMode = SolveMode.AUTO
    auto_limit: int = 20_000
    time_limit: float = 10.0
    mip_gap: float = 1e-2
    threads: int | None = None
    name: str = "sia"
    round_length: float = 60.0
    elastic: bool = True
    forking: bool = False
    last_result: SiaResult | None = field(default=None, repr=False)
    _configs: dict[int, ConfigSet] = field(default_factory=dict, repr=False)
    _goodputs: GoodputCache = field(default_factory=GoodputCache, repr=False)
    _planned: dict[str, RequestedBatchModel] = field(default_factory=dict, repr=False)

    def __post_init__(self) -> None:  # options are checked when given, not at the first round
        self.mode = check_solve_options(self.mode, self.threads, self.auto_limit, self.mip_gap)
        self.batch_limit = enum_choice(BatchLimit, "batch_limit", self.batch_limit)
        self.scale_up_from = enum_choice(ScaleFrom, "scale_up_from", self.scale_up_from)
        check_seconds("time_limit", self.time_limit)
        check_seconds("round_length", self.round_length)
        check_utility(self.p, self.lam)
        self.scale_up = finite_number("scale_up", self.scale_up, low=1.0)
        if not isinstance(self.restart_prices, Mapping):
            raise InputError("restart_prices", self.restart_prices, "must be a table application -> seconds")
        for app, seconds in self.restart_prices.items():
            if isinstance(seconds, bool) or not isinstance(seconds, int | float) or not 0 <= seconds < math.inf:
                raise InputError(f"restart_prices[{app}]", seconds, "must be seconds >= 0")
        if not isinstance(self.young_exempt, bool):
            raise InputError("young_exempt", self.young_exempt, "must be true or false")
        self.restart_prices = MappingProxyType(dict(self.restart_prices))

    def restart_factors(self, jobs: Sequence[JobState], now: float) -> np.ndarray:
        """Per job, the factor scaling its configurations other than the current one:
        ``max(T - n S, 0) / (T + S)`` (age T s, restarts n, restart price S s), 1 for a job
        younger than S when ``young_exempt``."""
        age = np.array([now - j.arrival_time for j in jobs], dtype=float)
        price = np.array([self.restart_prices.get(j.application, j.restart_delay) for j in jobs], dtype=float)
        factor = restart_factor(age, np.array([j.num_restarts for j in jobs]), price)
        return np.where(age < price, 1.0, factor) if self.young_exempt else factor

    def planned_views(self, jobs: Sequence[JobState]) -> list[JobState]:
        """``jobs`` with each elastic goodput-model job's estimator seen through its requested
        batch (:class:`~heteroplan.policies.requested_batch.RequestedBatchModel`); one view per
        job, kept across rounds while its estimator is the same object."""
        live = {j.job_id for j in jobs}
        self._planned = {k: v for k, v in self._planned.items() if k in live}
        out = []
        for job in jobs:
            est = job.estimator
            if not (job.elastic and job.requested_batch > 0 and isinstance(est, GoodputModel)):
                out.append(job)
                continue
            view = self._planned.get(job.job_id)
            if view is None or view.model is not est or view.max_batch != RequestedBatchModel.clip(est, job.requested_batch):
                view = self._planned[job.job_id] = RequestedBatchModel(est, job.requested_batch)
            out.append(job.with_estimator(view))
        return out

    def configs(self, cluster: Cluster) -> ConfigSet:
        key = id(cluster)
        if key not in self._configs:
            self._configs = {key: ConfigSet.from_cluster(cluster)}
        return self._configs[key]

    def allocate(self, cluster: Cluster, jobs: Sequence[JobState], now: float) -> dict[str, Allocation]:
        if not jobs:
            return {}
        configs = self.configs(cluster)
        self._goodputs.keep_only([j.job_id for j in jobs])
        if self.batch_limit is BatchLimit.REQUESTED:
            jobs = self.planned_views(jobs)
        pairs = goodput_pairs(jobs, configs, self.scale_up, scale_from=self.scale_up_from, cache=self._goodputs)
        current = current_config(jobs, configs)
        restart = None
        if self.restart_penalty:
            restart = self.restart_factors(jobs, now)
        pinned = np.array([j.restoring for j in jobs])
        cap = cluster.capacity()
        capacity = np.array([cap[t] for t in configs.gpu_types], dtype=float)
        problem = build_sia_model(pairs, configs, capacity, current, restart, pinned, self.p, self.lam)
        result = solve_sia(problem, self.mode, self.time_limit, self.mip_gap, self.threads, self.auto_limit)
        self.last_result = result
        wanted = {
            job.job_id: (configs.gpu_types[configs.type_index[c]], int(configs.num_gpus[c]))
            for job, c in zip(jobs, result.choice, strict=True)
            if c >= 0
        }
        previous = {j.job_id: j.allocation for j in jobs if j.allocation is not None}
        placed, _ = place(cluster, wanted, previous)
        return placed

