"""Sia's allocation ILP (SOSP'23), built as a :class:`Model`.

Each round, every job gets at most one configuration ``c = (GPU type, nodes, GPUs)``.
With ``G[j, c]`` the goodput of job j on c (samples/s, 0 where impossible):

- normalized goodput ``N[j, c] = G[j, c] / min_{c': G[j,c'] > 0} G[j, c']``;
- restart factor: for a running job, configurations other than its current one are scaled by
  ``r_j = max(T_j - n_j * S_j, 0) / (T_j + S_j)`` (T age, n restarts, S restart delay, seconds);
- utility ``U[j, c] = N[j, c] ** p``. With ``p < 0`` (default -0.5) Sia minimizes
  ``sum_jc U[j,c] x[j,c] + lambda * (number of unallocated jobs)``; with ``p > 0`` it maximizes
  ``sum_jc U[j,c] x[j,c]``;
- ``sum_c x[j, c] <= 1``; per type ``sum_jc gpus[c] x[j, c] <= capacity``; jobs being restored
  from a checkpoint are pinned to their current configuration.

The LP relaxation of this multiple-choice knapsack has at most (number of GPU types)
fractional jobs in a basic optimal solution, so ``mode="lp-round"`` (solve the LP, round the
few fractional jobs greedily, repair capacity) is near-optimal and reports its gap to the
LP bound.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp

from heteroplan.cluster import Cluster, GPUType
from heteroplan.errors import InputError
from heteroplan.milp import Model, Solution, SolveStatus

__all__ = ["ConfigSet", "SiaProblem", "SiaResult", "build_sia_model", "restart_factor"]


@dataclass(frozen=True)
class ConfigSet:
    """Candidate configurations: per GPU type 1, 2, 4, ... GPUs within a node, then whole nodes.

    Arrays have one entry per configuration.
    """

    gpu_types: tuple[str, ...]
    type_index: np.ndarray
    num_nodes: np.ndarray
    num_gpus: np.ndarray

    @classmethod
    def from_cluster(cls, cluster: Cluster, max_gpus: int | None = None) -> ConfigSet:
        """Sia's configurations for ``cluster`` (at most ``max_gpus`` GPUs each)."""
        types, nodes, gpus = [], [], []
        for k, t in enumerate(cluster.gpu_types):
            n_nodes = len(cluster.nodes_of_type(t.name))
            if n_nodes == 0:
                continue
            per_node = t.gpus_per_node
            within = sorted({2**i for i in range(per_node.bit_length()) if 2**i <= per_node} | {per_node})
            counts = [(1, g) for g in within] + [(n, n * per_node) for n in range(2, n_nodes + 1)]
            for n, g in counts:
                if max_gpus is None or g <= max_gpus:
                    types.append(k)
                    nodes.append(n)
                    gpus.append(g)
        return cls(cluster.type_names, np.array(types, dtype=int), np.array(nodes, dtype=int), np.array(gpus, dtype=int))

    @classmethod
    def pooled(cls, total_gpus: int, gpus_per_node: int, name: str = "any") -> ConfigSet:
        """Configurations of a single pooled GPU kind (heterogeneity-unaware schedulers)."""
        return cls.from_cluster(Cluster.from_counts((GPUType(name, 1, gpus_per_node),), {name: total_gpus}))

    def __len__(self) -> int:
        return len(self.num_gpus)

    @property
    def type_names(self) -> np.ndarray:
        """GPU type name of each configuration."""
        return np.array(self.gpu_types, dtype=object)[self.type_index] if len(self) else np.zeros(0, dtype=object)

    def index_of(self, gpu_type: str, num_gpus: int) -> int:
        """Index of the configuration with this type and GPU count, -1 if absent."""
        if gpu_type not in self.gpu_types:
            return -1
        hit = np.flatnonzero((self.type_index == self.gpu_types.index(gpu_type)) & (self.num_gpus == num_gpus))
        return int(hit[0]) if hit.size else -1


def restart_factor(age: np.ndarray, restarts: np.ndarray, restart_delay: np.ndarray) -> np.ndarray:
    """Sia's ``max(T - n*S, 0) / (T + S)`` (seconds in, dimensionless out)."""
    age = np.asarray(age, dtype=float)
    delay = np.asarray(restart_delay, dtype=float)
    return np.maximum(age - np.asarray(restarts) * delay, 0.0) / np.maximum(age + delay, 1e-9)


@dataclass
class SiaResult:
    """Chosen configuration per job (-1 = none) and solve diagnostics."""

    choice: np.ndarray
    objective: float
    bound: float
    gap: float
    status: SolveStatus
    build_time: float
    solve_time: float


@dataclass
class SiaProblem:
    """The built model, the (job, config) pair behind each variable, and its decoder.

    Solve ``model`` (or its LP relaxation, ``relax=True``) with any backend, then
    :meth:`decode` the solution into a :class:`SiaResult`.
    """

    model: Model
    job_of: np.ndarray
    config_of: np.ndarray
    utility: np.ndarray
    num_jobs: int
    minimize: bool
    configs: ConfigSet
    capacity: np.ndarray
    lam: float

    def empty_result(self) -> SiaResult:
        """The answer when the model has no variables (no job has a usable configuration)."""
        objective = self.lam * self.num_jobs if self.minimize else 0.0
        return SiaResult(np.full(self.num_jobs, -1), objective, objective, 0.0, SolveStatus.OPTIMAL, 0.0, 0.0)

    def decode(self, sol: Solution, relaxed: bool = False) -> SiaResult:
        """Configuration per job from a solution of ``model`` (``relaxed``: of its LP relaxation,
        whose few fractional jobs are then rounded greedily and capacity repaired)."""
        J = self.num_jobs
        if not sol.has_solution:
            # Nothing feasible in time (only possible with pinned jobs over capacity): allocate none.
            return SiaResult(np.full(J, -1), float("nan"), sol.bound, float("nan"), sol.status, sol.build_time, sol.solve_time)
        xval = sol["x"]
        if relaxed:
            choice = _round_lp(self, xval, self.configs, self.capacity, self.lam)
            chosen = np.flatnonzero(choice[self.job_of] == self.config_of)
            obj = float(self.utility[chosen].sum())
            objective = obj + self.lam * (J - len(chosen)) if self.minimize else obj
            bound = sol.objective
        else:
            pick = xval > 0.5
            choice = np.full(J, -1)
            choice[self.job_of[pick]] = self.config_of[pick]
            objective, bound = sol.objective, sol.bound
        gap = abs(objective - bound) / max(abs(objective), 1e-9)
        return SiaResult(choice, objective, bound, gap, sol.status, sol.build_time, sol.solve_time)


def build_sia_model(
    goodput: np.ndarray,
    configs: ConfigSet,
    capacity: Sequence[float] | np.ndarray,
    current: np.ndarray | None = None,
    restart: np.ndarray | None = None,
    pinned: np.ndarray | None = None,
    p: float = -0.5,
    lam: float = 1.1,
    base: np.ndarray | None = None,
) -> SiaProblem:
    """Build Sia's ILP.

    Args:
        goodput: (jobs, configs) goodput in samples/s; <= 0 marks impossible configs.
        configs: the configurations (columns of ``goodput``).
        capacity: GPUs per type, aligned with ``configs.gpu_types``.
        current: current configuration index per job (-1 if none).
        restart: restart factor per job applied to non-current configs (1 = no penalty).
        pinned: jobs that must keep their current configuration (e.g. restoring).
        p: utility exponent (non-zero); p < 0 is minimized.
        lam: penalty per unallocated job (p < 0 only).
        base: per job, the goodput (samples/s) its speed-ups are relative to; default (or where
            <= 0) its smallest positive goodput over ``configs``.
    """
    G = np.asarray(goodput, dtype=float)
    if G.ndim != 2 or G.shape[1] != len(configs):
        raise InputError("goodput.shape", G.shape, f"need (jobs, {len(configs)})")
    if not np.all(np.isfinite(G)):
        raise InputError("goodput", "non-finite", "goodput must be finite")
    if p == 0 or not np.isfinite(p):
        raise InputError("p", p, "must be a non-zero finite exponent")
    cap = np.asarray(capacity, dtype=float)
    if cap.shape != (len(configs.gpu_types),) or np.any(cap < 0):
        raise InputError("capacity", capacity, f"need {len(configs.gpu_types)} non-negative GPU counts")
    J, C = G.shape
    current = np.full(J, -1) if current is None else np.asarray(current, dtype=int)
    restart = np.ones(J) if restart is None else np.asarray(restart, dtype=float)
    pinned = np.zeros(J, dtype=bool) if pinned is None else np.asarray(pinned, dtype=bool)

    valid = G > 0
    base_min = np.where(valid, G, np.inf).min(axis=1, initial=np.inf)
    if base is None:
        base = base_min
    else:
        base = np.asarray(base, dtype=float)
        if base.shape != (J,):
            raise InputError("base.shape", base.shape, f"need ({J},)")
        base = np.where(np.isfinite(base) & (base > 0), base, base_min)
    norm = np.where(valid, G / np.where(np.isfinite(base), base, 1.0)[:, None], 0.0)
    running = current >= 0
    is_current = np.zeros((J, C), dtype=bool)
    is_current[np.flatnonzero(running), current[running]] = True
    penalty = np.where(running[:, None] & ~is_current, restart[:, None], 1.0)
    norm = norm * penalty
    valid &= norm > 0
    # Pinned jobs keep their current configuration and nothing else.
    pin_rows = np.flatnonzero(pinned & running)
    valid[pin_rows] = is_current[pin_rows]

    job_of, config_of = np.nonzero(valid)
    utility = norm[job_of, config_of] ** p
    P = len(job_of)
    model = Model("sia")
    lb = np.zeros(P)
    lb[np.isin(job_of, pin_rows)] = 1.0
    x = model.add_variables("x", P, lb=lb, ub=1.0, integer=True)
    cols = np.arange(P)
    one = sp.csr_matrix((np.ones(P), (job_of, cols)), shape=(J, P))
    model.add_matrix_constraints("one_config", one, ub=1.0, columns=x)
    gpus = sp.csr_matrix((configs.num_gpus[config_of].astype(float), (configs.type_index[config_of], cols)),
                         shape=(len(cap), P))
    model.add_matrix_constraints("capacity", gpus, ub=cap, columns=x)
    minimize = p < 0
    if minimize:
        model.minimize(x @ (utility - lam) + lam * J)
    else:
        model.maximize(x @ utility)
    return SiaProblem(model, job_of, config_of, utility, J, minimize, configs, cap, float(lam))


def _round_lp(problem: SiaProblem, xval: np.ndarray, configs: ConfigSet, capacity: np.ndarray, lam: float) -> np.ndarray:
    """Integral choice from an LP solution: keep integral jobs, place fractional ones greedily."""
    J = problem.num_jobs
    choice = np.full(J, -1)
    whole = xval >= 1 - 1e-6
    choice[problem.job_of[whole]] = problem.config_of[whole]
    used = np.bincount(configs.type_index[choice[choice >= 0]], weights=configs.num_gpus[choice[choice >= 0]],
                       minlength=len(capacity))
    frac_jobs = np.unique(problem.job_of[(xval > 1e-6) & ~whole])
    frac_jobs = frac_jobs[choice[frac_jobs] < 0]
    # Most-committed fractional jobs first; each takes its best config that still fits.
    weight = np.bincount(problem.job_of, weights=xval, minlength=J)
    for j in frac_jobs[np.argsort(-weight[frac_jobs])]:
        mine = np.flatnonzero(problem.job_of == j)
        gain = problem.utility[mine] - lam if problem.minimize else -problem.utility[mine]
        for v in mine[np.argsort(gain)]:
            if problem.minimize and gain[np.searchsorted(mine, v)] >= 0:
                break
            c = problem.config_of[v]
            k = configs.type_index[c]
            if used[k] + configs.num_gpus[c] <= capacity[k] + 1e-9:
                choice[j] = c
                used[k] += configs.num_gpus[c]
                break
    return choice
