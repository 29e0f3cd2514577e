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

import math
from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum
from functools import cached_property

import numpy as np

from heteroplan.cluster import Cluster, GPUType
from heteroplan.errors import InputError
from heteroplan.inputs import finite_number, is_count, is_real
from heteroplan.milp import Model, Solution, SolveStatus
from heteroplan.milp.args import numbers_array

# LP-round searches for better moves after rounding only when its gap to the LP bound is above
# this (at 2048 GPUs and more the rounding alone is within 0.05%).
IMPROVE_ABOVE = 1e-3

# :meth:`SiaProblem.knapsack_bound` runs its dynamic program only up to this many cells
# (variables x GPU types x (most GPUs of a type + 1)): a 64-GPU round of ~150 variables is
# ~11k cells (about 1 ms); larger models get no tightened bound.
KNAPSACK_BOUND_CELLS = 500_000

__all__ = ["ConfigSet", "GoodputPairs", "SiaProblem", "SiaResult", "SolveMode", "build_sia_model", "check_utility",
           "restart_factor"]


class SolveMode(StrEnum):
    """How Sia's model is solved: ``MILP`` (branch and bound to the MIP gap), ``LP_ROUND`` (the LP
    relaxation, then greedy rounding of the few fractional jobs) or ``AUTO`` (LP-round, kept when
    its measured gap is small enough, else the MILP; see :func:`heteroplan.policies.sia_solve.solve_sia`)."""

    MILP = "milp"
    LP_ROUND = "lp-round"
    AUTO = "auto"


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
        """Sia's configurations for ``cluster`` (at most ``max_gpus`` GPUs each, an integer or ``None``)."""
        if not isinstance(cluster, Cluster):
            raise InputError("cluster", type(cluster).__name__, "must be a Cluster")
        if max_gpus is not None and not is_count(max_gpus):  # "x" was a TypeError, NaN no configuration at all
            raise InputError("max_gpus", max_gpus, "must be an integer or None")
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

    @cached_property
    def type_names(self) -> np.ndarray:
        """GPU type name of each configuration (read-only)."""
        names = np.array(self.gpu_types, dtype=object)[self.type_index] if len(self) else np.zeros(0, dtype=object)
        names.setflags(write=False)
        return names

    @cached_property
    def _by_gpus(self) -> tuple[np.ndarray, np.ndarray, dict]:
        order = np.argsort(self.num_gpus, kind="stable")
        return order, self.num_gpus[order], {}

    def columns_up_to(self, num_gpus: int) -> np.ndarray:
        """Indices (ascending) of the configurations with at most ``num_gpus`` GPUs."""
        order, counts, memo = self._by_gpus
        key = ("<=", int(num_gpus))
        if key not in memo:
            memo[key] = np.sort(order[: np.searchsorted(counts, num_gpus, side="right")])
        return memo[key]

    def columns_with(self, num_gpus: int) -> np.ndarray:
        """Indices (ascending) of the configurations with exactly ``num_gpus`` GPUs."""
        order, counts, memo = self._by_gpus
        key = ("==", int(num_gpus))
        if key not in memo:
            lo, hi = np.searchsorted(counts, [num_gpus, num_gpus + 0.5])
            memo[key] = np.sort(order[lo:hi])
        return memo[key]

    @cached_property
    def _index(self) -> dict[tuple[int, int], int]:
        out: dict[tuple[int, int], int] = {}
        for c, (k, g) in enumerate(zip(self.type_index.tolist(), self.num_gpus.tolist(), strict=True)):
            out.setdefault((k, g), c)
        return out

    def index_of(self, gpu_type: str, num_gpus: int) -> int:
        """Index of the configuration with this type and GPU count, -1 if absent."""
        if gpu_type not in self.gpu_types:
            return -1
        if not is_real(num_gpus) or not math.isfinite(num_gpus) or num_gpus != int(num_gpus):
            return -1  # NaN and "x" were a ValueError from int()
        return self._index.get((self.gpu_types.index(gpu_type), int(num_gpus)), -1)


def restart_factor(age: np.ndarray, restarts: np.ndarray, restart_delay: np.ndarray) -> np.ndarray:
    """Sia's ``max(T - n*S, 0) / (T + S)`` (seconds in, dimensionless out)."""
    age = np.asarray(age, dtype=float)
    delay = np.asarray(restart_delay, dtype=float)
    return np.maximum(age - np.asarray(restarts) * delay, 0.0) / np.maximum(age + delay, 1e-9)


@dataclass
class SiaResult:
    """Chosen configuration per job (-1 = none) and solve diagnostics.

    ``gap`` is relative: to ``bound`` (the LP relaxation's optimum for ``mode="lp-round"``, or
    the tighter :meth:`SiaProblem.knapsack_bound` where ``auto`` computed it; the MIP dual bound
    for ``"milp"``); times in seconds.
    """

    choice: np.ndarray
    objective: float
    bound: float
    gap: float
    status: SolveStatus
    build_time: float
    solve_time: float
    mode: SolveMode = SolveMode.MILP  # the solve that produced ``choice``: MILP or LP_ROUND


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

    def _objective(self, choice: np.ndarray) -> float:
        chosen = np.flatnonzero(choice[self.job_of] == self.config_of)
        obj = float(self.utility[chosen].sum())
        return obj + self.lam * (self.num_jobs - len(chosen)) if self.minimize else obj

    def knapsack_bound(self, prices: np.ndarray) -> float:
        """A bound on the ILP's optimum at least as tight as its LP relaxation's, or ``nan``
        when the model is larger than :data:`KNAPSACK_BOUND_CELLS` allows.

        For each GPU type k the capacity rows of the other types are priced (Lagrangian
        relaxation, ``prices``: per GPU of each type, in objective units, e.g. the LP's capacity
        duals) and type k's row is kept whole: a multiple-choice knapsack over type k's GPUs,
        solved exactly by dynamic programming over the GPUs used. Each is a valid bound for any
        prices >= 0 (weak duality); with the LP's duals it is at least the LP bound, since it
        keeps one knapsack integral. The tightest over the types is returned (a lower bound
        when minimizing, an upper bound when maximizing).
        """
        K = len(self.capacity)
        cap = np.floor(self.capacity + 1e-9).astype(int)
        P = len(self.job_of)
        width = int(cap.max(initial=0)) + 1
        if P == 0 or P * K * width > KNAPSACK_BOUND_CELLS:
            return float("nan")
        prices = np.maximum(np.nan_to_num(np.asarray(prices, dtype=float), nan=0.0), 0.0)
        kind = self.configs.type_index[self.config_of]
        gpus = self.configs.num_gpus[self.config_of]
        cost = self.utility - self.lam if self.minimize else -self.utility  # minimization form
        priced = cost + prices[kind] * gpus
        pinned = self.model.variables["x"].lb > 0.5
        types = np.arange(K)[:, None]
        states = np.arange(width)
        value = np.full((K, width), np.inf)  # least cost with exactly w GPUs of type k used
        value[:, 0] = 0.0
        beyond = np.where(states[None, :] > cap[:, None], np.inf, 0.0)
        starts = np.flatnonzero(np.r_[True, self.job_of[1:] != self.job_of[:-1]])
        for a, b in zip(starts, np.r_[starts[1:], P], strict=True):
            own = kind[a:b][None, :] == types  # (types, the job's variables)
            # Per kept type: the job takes nothing (unless pinned) or a priced other-type configuration ...
            keep = np.where(own, np.inf, priced[a:b][None, :]).min(axis=1)
            if not pinned[a:b].any():
                keep = np.minimum(keep, 0.0)
            # ... or one of its configurations of that type, shifting the GPUs used.
            src = states[None, :] - gpus[a:b, None]
            shifted = np.where(src >= 0, value[kind[a:b, None], np.maximum(src, 0)] + cost[a:b, None], np.inf)
            take = np.where(own[:, :, None], shifted[None, :, :], np.inf).min(axis=1)
            value = np.minimum(value + keep[:, None], take) + beyond
        per_type = value.min(axis=1) - (prices @ cap - prices * cap)
        best = float(per_type.max())
        if self.minimize:
            return best + self.lam * self.num_jobs
        return -best

    def decode(self, sol: Solution, relaxed: bool = False) -> SiaResult:
        """Configuration per job from a solution of ``model`` (``relaxed``: of its LP relaxation,
        whose few fractional jobs are then rounded greedily and capacity repaired)."""
        J = self.num_jobs
        if not sol.has_solution:
            # Nothing feasible in time (only possible with pinned jobs over capacity): allocate none.
            return SiaResult(np.full(J, -1), float("nan"), sol.bound, float("nan"), sol.status, sol.build_time, sol.solve_time)
        xval = sol["x"]
        if relaxed:
            choice, used = _round_lp(self, xval, self.configs, self.capacity, self.lam)
            objective, bound = self._objective(choice), sol.objective
            if abs(objective - bound) > IMPROVE_ABOVE * max(abs(objective), 1e-9):
                choice = _improve(self, choice, used, self.capacity, self.lam)
                objective = self._objective(choice)
        else:
            pick = xval > 0.5
            choice = np.full(J, -1)
            choice[self.job_of[pick]] = self.config_of[pick]
            objective, bound = sol.objective, sol.bound
        gap = abs(objective - bound) / max(abs(objective), 1e-9)
        return SiaResult(choice, objective, bound, gap, sol.status, sol.build_time, sol.solve_time)


@dataclass(frozen=True)
class GoodputPairs:
    """The (job, configuration) pairs a job may be given, with their goodput (samples/s).

    A sparse goodput matrix: ``job_of`` and ``config_of`` index the jobs and the configurations
    of a :class:`ConfigSet`, sorted by job then configuration; pairs absent (or with goodput
    <= 0) are impossible.
    """

    num_jobs: int
    job_of: np.ndarray
    config_of: np.ndarray
    goodput: np.ndarray

    @classmethod
    def from_dense(cls, goodput: np.ndarray) -> GoodputPairs:
        """The positive entries of a (jobs, configs) goodput matrix."""
        G = np.asarray(goodput, dtype=float)
        job_of, config_of = np.nonzero(G > 0)
        return cls(G.shape[0], job_of, config_of, G[job_of, config_of])

    def dense(self, num_configs: int) -> np.ndarray:
        """The (jobs, configs) goodput matrix, 0 where a pair is absent."""
        G = np.zeros((self.num_jobs, num_configs))
        G[self.job_of, self.config_of] = self.goodput
        return G


def _as_pairs(goodput: np.ndarray | GoodputPairs, num_configs: int) -> GoodputPairs:
    """``goodput`` as :class:`GoodputPairs` (a dense (jobs, configs) matrix checked and converted)."""
    if isinstance(goodput, GoodputPairs):
        return goodput
    G = numbers_array("goodput", goodput)  # strings and complex numbers refused, not cast
    if G.ndim != 2 or G.shape[1] != num_configs:
        raise InputError("goodput.shape", G.shape, f"need (jobs, {num_configs})")
    if not np.all(np.isfinite(G)):
        raise InputError("goodput", "non-finite", "goodput must be finite")
    return GoodputPairs.from_dense(G)


def _speedup_base(base: np.ndarray | None, job_of: np.ndarray, goodput: np.ndarray, num_jobs: int) -> np.ndarray:
    """Per job, the goodput (samples/s) its speed-ups are relative to: ``base`` where it is a
    positive number, else the job's smallest positive goodput (1 for a job without pairs)."""
    smallest = np.full(num_jobs, np.inf)
    np.minimum.at(smallest, job_of, goodput)
    if base is not None:
        base = np.asarray(base, dtype=float)
        if base.shape != (num_jobs,):
            raise InputError("base.shape", base.shape, f"need ({num_jobs},)")
        smallest = np.where(np.isfinite(base) & (base > 0), base, smallest)
    return np.where(np.isfinite(smallest), smallest, 1.0)


def _job_state(num_jobs: int, num_configs: int, current: object, restart: object,
               pinned: object) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``current``, ``restart`` and ``pinned`` of :func:`build_sia_model` as arrays of one entry per
    job (defaults: no configuration, no penalty, not pinned); :class:`InputError` naming the field for
    a wrong length, a configuration index that is no integer in ``[-1, num_configs)``, a restart
    factor that is no finite number >= 0, a pin that is no boolean. Such values were cast (NaN and
    0.5 to configuration 0 or garbage, ``pinned="x"`` to every job pinned) or failed in numpy."""
    out = []
    for name, value, default in (("current", current, -1), ("restart", restart, 1.0), ("pinned", pinned, False)):
        arr = np.full(num_jobs, default) if value is None else np.asarray(value)
        if arr.shape != (num_jobs,):
            raise InputError(f"{name}.shape", arr.shape, f"need ({num_jobs},), one per job")
        out.append(arr)
    cur, rst, pin = out
    if cur.size and (cur.dtype.kind not in "iu" or ((cur < -1) | (cur >= num_configs)).any()):
        raise InputError("current", current, f"must be configuration indices (integers in [-1, {num_configs}))")
    rst = numbers_array("restart", rst)
    if not (np.isfinite(rst) & (rst >= 0)).all():
        raise InputError("restart", restart, "must be finite restart factors >= 0 (1: no penalty)")
    if pin.size and pin.dtype.kind != "b":
        raise InputError("pinned", pinned, "must be booleans, one per job")
    return cur.astype(np.int64), rst, pin.astype(bool)


def check_utility(p: object, lam: object) -> tuple[float, float]:
    """Sia's utility exponent ``p`` (a finite, non-zero number; ``p < 0`` is minimized) and penalty
    ``lam`` per job without GPUs (a finite number > 0), as floats; else an :class:`InputError`
    naming the field (``lam <= 0`` would make leaving a job without GPUs free, or rewarded)."""
    p = finite_number("p", p)
    if p == 0:
        raise InputError("p", p, "must be a non-zero finite exponent")
    lam = finite_number("lam", lam)
    if not lam > 0:
        raise InputError("lam", lam, "must be a penalty > 0 per job without GPUs")
    return p, lam


def build_sia_model(
    goodput: np.ndarray | GoodputPairs,
    configs: ConfigSet,
    capacity: Sequence[float] | np.ndarray,
    current: np.ndarray | None = None,
    restart: np.ndarray | None = None,
    pinned: np.ndarray | None = None,
    p: float = -0.5,
    lam: float = 1.1,
    base: np.ndarray | None = None,
) -> SiaProblem:
    """Build Sia's ILP: one variable per (job, configuration) pair with positive goodput, so
    building costs time in proportion to the pairs, not to jobs x configurations.

    Args:
        goodput: a (jobs, configs) goodput matrix in samples/s (<= 0 marks impossible configs),
            or its positive entries as :class:`GoodputPairs` (sorted by job then configuration).
        configs: the configurations (columns of ``goodput``).
        capacity: GPUs per type, aligned with ``configs.gpu_types``.
        current: current configuration index per job (integers; -1 if none).
        restart: restart factor per job applied to non-current configs (finite, >= 0; 1 = no penalty).
        pinned: jobs that must keep their current configuration (e.g. restoring): booleans.

    Each per-job array has one entry per job; anything else is an :class:`InputError` naming it.
        p: utility exponent (non-zero); p < 0 is minimized.
        lam: penalty per unallocated job (p < 0 only).
        base: per job, the goodput (samples/s) its speed-ups are relative to; default (or where
            <= 0) its smallest positive goodput over ``configs``.
    """
    if not isinstance(configs, ConfigSet):  # "x" was named as a goodput of the wrong shape
        raise InputError("configs", type(configs).__name__, "must be a ConfigSet (ConfigSet.from_cluster(cluster))")
    pairs = _as_pairs(goodput, len(configs))
    p, lam = check_utility(p, lam)
    cap = numbers_array("capacity", capacity)
    if cap.shape != (len(configs.gpu_types),) or not np.all(cap >= 0):
        raise InputError("capacity", capacity, f"need {len(configs.gpu_types)} non-negative GPU counts")
    J = int(pairs.num_jobs)
    gp = np.asarray(pairs.goodput, dtype=float)
    if not np.all(np.isfinite(gp)):
        raise InputError("goodput", "non-finite", "goodput must be finite")
    keep = gp > 0
    job_of = np.asarray(pairs.job_of, dtype=np.int64)[keep]
    config_of = np.asarray(pairs.config_of, dtype=np.int64)[keep]
    gp = gp[keep]
    current, restart, pinned = _job_state(J, len(configs), current, restart, pinned)

    norm = gp / _speedup_base(base, job_of, gp, J)[job_of]
    running = current >= 0
    is_current = config_of == current[job_of]
    penalty = np.where(running[job_of] & ~is_current, restart[job_of], 1.0)
    norm = norm * penalty
    valid = norm > 0
    # Pinned jobs keep their current configuration and nothing else.
    pin_rows = pinned & running
    valid &= ~pin_rows[job_of] | is_current
    job_of, config_of, norm = job_of[valid], config_of[valid], norm[valid]

    utility = norm ** p
    P = len(job_of)
    model = Model("sia")
    lb = np.where(pin_rows[job_of], 1.0, 0.0)
    x = model.add_variables("x", P, lb=lb, ub=1.0, integer=True)
    # One non-zero per column in each block: each variable's term goes to its job's row and to
    # its type's capacity row, no matrix built.
    model.add_constraints(x.scatter(job_of, np.ones(P), J) <= 1.0, "one_config")
    model.add_constraints(x.scatter(configs.type_index[config_of], configs.num_gpus[config_of].astype(float), len(cap))
                          <= cap, "capacity")
    minimize = p < 0
    if minimize:
        model.minimize(x @ (utility - lam) + lam * J)
    else:
        model.maximize(x @ utility)
    return SiaProblem(model, job_of, config_of, utility, J, minimize, configs, cap, float(lam))


def _round_lp(problem: SiaProblem, xval: np.ndarray, configs: ConfigSet, capacity: np.ndarray,
              lam: float) -> tuple[np.ndarray, np.ndarray]:
    """Integral choice from an LP solution (keep integral jobs, place fractional ones greedily)
    and the GPUs it uses per type."""
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
    return choice, used


def _improve(problem: SiaProblem, choice: np.ndarray, used: np.ndarray, capacity: np.ndarray, lam: float,
             max_moves: int = 50, pair_limit: int = 600) -> np.ndarray:
    """Local search after rounding (rounding leaves idle the GPUs the LP had given to
    fractional jobs): apply the move -- one job to another configuration (or none), or two
    jobs at once when the model has at most ``pair_limit`` variables -- that lowers the
    objective most with every type's GPUs within capacity; stop when none does."""
    configs = problem.configs
    J, K = problem.num_jobs, len(capacity)
    cost = problem.utility - lam if problem.minimize else -problem.utility
    P = len(problem.job_of)
    move_job = np.concatenate([problem.job_of, np.arange(J)])
    move_cost = np.concatenate([cost, np.zeros(J)])
    move_add = np.zeros((len(move_job), K))
    move_add[np.arange(P), configs.type_index[problem.config_of]] = configs.num_gpus[problem.config_of]
    move_config = np.concatenate([problem.config_of, np.full(J, -1)])
    pinned = np.zeros(J, dtype=bool)
    pinned[problem.job_of[problem.model.variables["x"].lb > 0.5]] = True
    move_ok = ~pinned[move_job]
    pairs = P <= pair_limit
    # What each job holds now (its cost and GPUs per type), updated move by move.
    current = np.zeros(J)
    holds = np.zeros((J, K))
    chosen = np.flatnonzero(choice[problem.job_of] == problem.config_of)
    current[problem.job_of[chosen]] = cost[chosen]
    holds[problem.job_of[chosen]] = move_add[chosen]
    for _ in range(max_moves):
        delta = np.where(move_ok, move_cost - current[move_job], np.inf)
        change = move_add - holds[move_job]
        room = capacity + 1e-9 - used
        single = np.where((change <= room).all(axis=1), delta, np.inf)
        best, best_gain = (int(np.argmin(single)),), float(single.min(initial=np.inf))
        if pairs:
            want = np.flatnonzero((delta < -1e-12) & ~np.isfinite(single))
            give = np.flatnonzero(np.isfinite(delta) & (change < 0).any(axis=1))
            if want.size and give.size and np.isfinite(best_gain):
                # Only pairs whose summed gain can beat the best single move (rounded sums are
                # monotone, so no pair that could is dropped, and the order of those kept is unchanged).
                give = give[delta[give] + delta[want].min() < best_gain]
                if give.size:
                    want = want[delta[want] + delta[give].min() < best_gain]
            if want.size and give.size:
                d = delta[want][:, None] + delta[give][None, :]
                fits = np.all(change[want][:, None, :] + change[give][None, :, :] <= room, axis=2)
                d = np.where(fits & (move_job[want][:, None] != move_job[give][None, :]), d, np.inf)
                if d.min() < best_gain:
                    a, b = np.unravel_index(int(np.argmin(d)), d.shape)
                    best, best_gain = (int(want[a]), int(give[b])), float(d[a, b])
        if not best_gain < -1e-12:
            break
        for m in best:
            used += change[m]
            j = move_job[m]
            choice[j] = move_config[m]
            current[j] = move_cost[m]
            holds[j] = move_add[m]
    return choice
