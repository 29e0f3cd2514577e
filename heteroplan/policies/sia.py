"""Sia: heterogeneity- and adaptivity-aware round-based scheduling by an ILP over goodput."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from heteroplan.cluster import Cluster
from heteroplan.errors import InputError, check_seconds
from heteroplan.formulations.sia import (
    ConfigSet,
    SiaResult,
    build_sia_model_pairs,
    restart_factor,
)
from heteroplan.inputs import finite_number
from heteroplan.policies.base import Allocation, JobState
from heteroplan.policies.common import GoodputCache, current_config, goodput_pairs
from heteroplan.policies.placement import place
from heteroplan.policies.sia_solve import solve_sia

__all__ = ["SiaPolicy"]


@dataclass
class SiaPolicy:
    """Sia's policy (see :mod:`heteroplan.formulations.sia` for the model).

    Attributes:
        p: utility exponent (default -0.5, minimized).
        lam: penalty per unallocated job.
        restart_penalty: apply the restart factor to non-current configurations.
        scale_up: at most this factor more GPUs per round than ``scale_up_from``:
            ``"max"`` (default, the Sia artifact: the most GPUs the job has run on) or
            ``"current"`` (its current or last allocation).
        mode: ``"milp"``, ``"lp-round"``, or ``"auto"`` (default: LP + rounding, kept when its
            measured gap to the LP bound is at most ``mip_gap``; else the exact MILP while the
            model has at most ``auto_limit`` variables).
        time_limit: seconds per solve; mip_gap: relative gap requested (default 1%).
        threads: HiGHS threads (``None``: one for small models, see
            :func:`heteroplan.solvers.highs.default_threads`).

    ``last_result`` holds the latest round's :class:`~heteroplan.formulations.sia.SiaResult`:
    which solve chose (``mode``), its objective, bound and gap.
    """

    p: float = -0.5
    lam: float = 1.1
    restart_penalty: bool = True
    scale_up: float = 2.0
    scale_up_from: str = "max"
    mode: str = "auto"
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

    def __post_init__(self) -> None:  # options are checked when given, not at the first round
        if self.mode not in ("auto", "milp", "lp-round"):
            raise InputError("mode", self.mode, "choose 'auto', 'milp' or 'lp-round'")
        if self.scale_up_from not in ("max", "current"):
            raise InputError("scale_up_from", self.scale_up_from, "choose 'max' or 'current'")
        check_seconds("time_limit", self.time_limit)
        check_seconds("round_length", self.round_length)
        finite_number("mip_gap", self.mip_gap, low=0.0)
        finite_number("p", self.p)
        finite_number("lam", self.lam)
        finite_number("scale_up", self.scale_up, low=1.0)
        if self.threads is not None and (isinstance(self.threads, bool) or not isinstance(self.threads, int)
                                         or self.threads < 1):
            raise InputError("threads", self.threads, "must be a positive integer or None")

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
        pairs = goodput_pairs(jobs, configs, self.scale_up, scale_from=self.scale_up_from, cache=self._goodputs)
        current = current_config(jobs, configs)
        restart = None
        if self.restart_penalty:
            restart = restart_factor(
                np.array([now - j.arrival_time for j in jobs]),
                np.array([j.num_restarts for j in jobs]),
                np.array([j.restart_delay for j in jobs]),
            )
        pinned = np.array([j.restoring for j in jobs])
        cap = cluster.capacity()
        capacity = np.array([cap[t] for t in configs.gpu_types], dtype=float)
        problem = build_sia_model_pairs(pairs, configs, capacity, current, restart, pinned, self.p, self.lam)
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
