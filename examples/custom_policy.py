"""Write a new scheduling policy as a Model and plug it into the simulator.

The policy below maximizes the *minimum* normalized goodput over jobs (max-min fairness over
speed-ups) with a small tie-breaker for total goodput, over the same configurations Sia uses:

    max  t + eps * sum_jc N[j,c] x[j,c]
    s.t. t <= sum_c N[j,c] x[j,c]       for every job j
         sum_c x[j,c] <= 1              one configuration per job
         sum_jc gpus[c] x[j,c] <= C_k   per GPU type k

Run: ``python examples/custom_policy.py [--jobs 30]``
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence

import numpy as np
import scipy.sparse as sp

from heteroplan.cluster import Cluster, preset
from heteroplan.formulations.sia import ConfigSet
from heteroplan.milp import Model
from heteroplan.policies.base import Allocation, JobState
from heteroplan.policies.common import goodput_matrix
from heteroplan.policies.placement import place
from heteroplan.sim.compare import compare_policies
from heteroplan.sim.metrics import compare_table
from heteroplan.solvers import solve
from heteroplan.workload.sia import bundled_workload


def build_maxmin_model(G: np.ndarray, configs: ConfigSet, capacity: np.ndarray, eps: float = 1e-3) -> Model:
    """The max-min speed-up model above (G: jobs x configs goodput, samples/s)."""
    J, C = G.shape
    base = np.where(G > 0, G, np.inf).min(axis=1, keepdims=True)
    N = np.where(G > 0, G / np.where(np.isfinite(base), base, 1.0), 0.0)
    m = Model("maxmin-speedup")
    x = m.add_variables("x", (J, C), ub=(G > 0).astype(float), integer=True)
    t = m.continuous("t", lb=0.0)
    m.add_constraints(t - (x * N).sum(axis=1) <= 0, "min_speedup")
    m.add_constraints(x.sum(axis=1) <= 1, "one_config")
    per_type = sp.csr_matrix((configs.num_gpus.astype(float), (configs.type_index, np.arange(C))),
                             shape=(len(capacity), C))
    m.add_constraints(per_type @ x.sum(axis=0) <= capacity, "capacity")
    m.maximize(t + eps * (x * N).sum())
    return m


class MaxMinPolicy:
    """Max-min fair speed-ups; adaptive (elastic jobs), heterogeneity-aware."""

    name = "maxmin"
    round_length = 60.0  # s
    elastic = True  # chooses elastic jobs' GPU counts (rigid jobs keep theirs)
    forking = False

    def allocate(self, cluster: Cluster, jobs: Sequence[JobState], now: float) -> dict[str, Allocation]:
        if not jobs:
            return {}
        configs = ConfigSet.from_cluster(cluster)
        G = goodput_matrix(jobs, configs, scale_up=2.0)
        capacity = np.array([cluster.capacity()[k] for k in configs.gpu_types], dtype=float)
        sol = solve(build_maxmin_model(G, configs, capacity), time_limit=5, mip_gap=1e-2)
        if not sol.has_solution:
            return {}
        choice = np.where(sol["x"].max(axis=1) > 0.5, sol["x"].argmax(axis=1), -1)
        wanted = {j.job_id: (configs.gpu_types[configs.type_index[c]], int(configs.num_gpus[c]))
                  for j, c in zip(jobs, choice, strict=True) if c >= 0}
        placed, _ = place(cluster, wanted, {j.job_id: j.allocation for j in jobs if j.allocation})
        return placed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=30)
    args = parser.parse_args()
    jobs = bundled_workload("philly/workload-1")[: args.jobs]
    results = compare_policies(jobs, preset("sia-64"), [MaxMinPolicy(), "sia"], progress=False)
    print(compare_table(results))


if __name__ == "__main__":
    main()
