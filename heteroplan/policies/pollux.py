"""Pollux (OSDI'21) as the Sia paper runs it: goodput-optimizing but heterogeneity-unaware.

Pollux maximizes the fitness ``((1/J) sum_j speedup_j ** p) ** (1/p)`` with ``p = -1``,
``speedup_j`` = goodput on the chosen GPUs over goodput on one GPU. It does not know that GPU
types differ: every job's goodput is estimated as if all GPUs were of one reference type (the
type the job runs on, else the first one its model knows). We solve Pollux's problem exactly
with the same multiple-choice ILP as Sia over one pooled GPU kind (minimizing
``sum speedup ** -1`` is equivalent to maximizing the p = -1 fitness); Pollux itself uses a
genetic algorithm, so this is the best Pollux could do with its model. Placement is type-blind.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from heteroplan.cluster import Cluster
from heteroplan.formulations.sia import ConfigSet, build_sia_model, restart_factor
from heteroplan.policies.base import Allocation, JobState
from heteroplan.policies.common import goodput_matrix, place_blind
from heteroplan.policies.sia_solve import solve_sia

__all__ = ["PolluxPolicy"]


@dataclass
class PolluxPolicy:
    """Heterogeneity-unaware goodput optimization (Pollux fitness, p = -1).

    ``scale_up`` / ``scale_up_from``: at most ``scale_up`` x the most GPUs the job has run on
    (``"max"``, Pollux's simulator: 2 x the largest profiled replica count) or x its current
    allocation (``"current"``).
    """

    p: float = -1.0
    lam: float = 1.1
    scale_up: float = 2.0
    scale_up_from: str = "max"
    time_limit: float = 10.0
    mip_gap: float = 1e-3
    name: str = "pollux"
    round_length: float = 60.0
    elastic: bool = True
    forking: bool = False
    _cache: dict[int, ConfigSet] = field(default_factory=dict, repr=False)

    def _pooled(self, cluster: Cluster) -> ConfigSet:
        key = id(cluster)
        if key not in self._cache:
            # Jobs run on one type (placement is type-blind), so no job asks for more GPUs than
            # the largest type holds; the capacity row is still the whole cluster.
            per_node = max(t.gpus_per_node for t in cluster.gpu_types)
            largest = max(cluster.capacity().values())
            self._cache = {key: ConfigSet.pooled(largest, per_node)}
        return self._cache[key]

    def allocate(self, cluster: Cluster, jobs: Sequence[JobState], now: float) -> dict[str, Allocation]:
        if not jobs:
            return {}
        configs = self._pooled(cluster)
        G = np.zeros((len(jobs), len(configs)))
        for i, job in enumerate(jobs):
            ref = job.allocation.gpu_type if job.allocation else _first_type(job, cluster)
            G[i] = goodput_matrix([job], configs, self.scale_up, np.full(len(configs), ref, dtype=object),
                                  scale_from=self.scale_up_from)[0]
        current = np.array([configs.index_of("any", j.allocation.num_gpus) if j.allocation else -1 for j in jobs])
        restart = restart_factor(
            np.array([now - j.arrival_time for j in jobs]),
            np.array([j.num_restarts for j in jobs]),
            np.array([j.restart_delay for j in jobs]),
        )
        pinned = np.array([j.restoring for j in jobs])
        capacity = np.array([float(cluster.num_gpus)])
        problem = build_sia_model(G, configs, capacity, current, restart, pinned, self.p, self.lam)
        result = solve_sia(problem, "milp", self.time_limit, self.mip_gap)
        counts = {j.job_id: int(configs.num_gpus[c]) for j, c in zip(jobs, result.choice, strict=True) if c >= 0}
        return place_blind(cluster, jobs, counts)


def _first_type(job: JobState, cluster: Cluster) -> str:
    known = (job.estimator.gpu_types if job.estimator is not None else ()) or cluster.type_names
    for t in cluster.type_names:
        if t in known:
            return t
    return cluster.type_names[0]
