"""Sailor's resource choice as a MILP: how many GPUs of each type in each zone to rent.

A *replica kind* ``k`` is one homogeneous pipeline replica — GPU type and zone, TP, PP,
microbatch size — using ``g_k = tp * pp`` GPUs, whose steady-state rate ``r_k`` (samples/s)
comes from the simulator (:func:`replica_kinds`). Renting ``x_k`` replicas of each kind and
training them data-parallel with load-balanced microbatches gives

    throughput (iter/s)   = sum_k r_k x_k / gbs
    rental      ($/s)     = sum_k c_k x_k,           c_k = g_k * price_k / 3600
    GPUs of pool p        = sum_k A_pk g_k x_k <= capacity_p

- max throughput under a budget ``B`` ($/iteration): ``max r.x`` s.t. capacity and
  ``c.x - B r.x / gbs <= 0`` (the ratio constraint made linear);
- min $/iteration (``c.x / (r.x / gbs)``) under a floor ``F`` (iter/s): a linear-fractional
  integer program solved by Dinkelbach's method — a short sequence of MILPs
  ``min c.x - lam r.x / gbs`` with ``lam`` updated to the ratio of the last solution.

The estimate ignores all-reduce time and pipeline bubbles; :func:`narrow_pool` turns a choice
into a smaller pool for the DP search, which then prices those exactly.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from heteroplan.cluster import GPUType
from heteroplan.errors import InfeasibleError, InputError
from heteroplan.formulations.model import Model
from heteroplan.perf.sailor_network import NetworkModel, load_network
from heteroplan.perf.sailor_profiles import ModelProfile
from heteroplan.planner.sim_config import PlatformConfigs, SimConfig

__all__ = ["ReplicaKind", "ResourceChoice", "replica_kinds", "build_resource_model", "choose_resources", "narrow_pool"]


@dataclass(frozen=True)
class ReplicaKind:
    """One homogeneous pipeline replica: ``tp * pp`` GPUs of ``gpu_type`` in ``zone``."""

    gpu_type: str
    zone: str
    tp: int
    pp: int
    mbs: int
    samples_per_s: float
    price_per_s: float

    @property
    def gpus(self) -> int:
        return self.tp * self.pp


@dataclass(frozen=True)
class ResourceChoice:
    """MILP answer: replicas per kind, GPUs per (type, zone), estimated throughput and cost."""

    replicas: dict[ReplicaKind, int]
    gpus: dict[tuple[str, str], int]
    throughput: float
    cost_per_iteration: float
    solve_time: float
    iterations: int = 1


def replica_kinds(
    profile: ModelProfile,
    pool: Mapping[tuple[str, str], int],
    gbs: int,
    gpu_types: Mapping[str, GPUType],
    *,
    max_pp: int = 8,
    network: NetworkModel | None = None,
    config: SimConfig | PlatformConfigs | None = None,
) -> list[ReplicaKind]:
    """Simulated replica kinds per (type, zone) of ``pool``: every (mbs, tp, pp) that fits memory,
    keeping for each (type, GPUs per replica) the fastest, with simulator constants ``config``
    (default: ``SHIPPED_PLATFORMS``, the shipped data's calibration per GPU type)."""
    from heteroplan.planner.search import Searcher, SearchOptions, _Block

    network = network or load_network()
    kinds: list[ReplicaKind] = []
    types = sorted({t for t, _ in pool if t in profile.gpu_types})
    for gpu in types:
        zones = sorted(z for t, z in pool if t == gpu and pool[(t, z)] > 0)
        if not zones:
            continue
        searcher = Searcher(
            profile, network, dict(gpu_types), {(gpu, zones[0]): 10**9}, gbs, "throughput", None, None,
            SearchOptions() if config is None else SearchOptions(config=config),
        )
        best: dict[int, tuple[float, int, int, int]] = {}
        for mbs in profile.microbatch_sizes(gpu):
            if gbs % mbs:
                continue
            for tp in (t for t in profile.tp_degrees(gpu, mbs) if t <= gpu_types[gpu].gpus_per_node):
                for pp in range(1, min(max_pp, profile.num_layers) + 1):
                    cand = searcher.evaluate([_Block((gpu, zones[0]), tp, pp)], mbs, 1)
                    if cand is None:
                        continue
                    rate = gbs / cand.iteration_time
                    g = tp * pp
                    if g not in best or rate > best[g][0]:
                        best[g] = (rate, tp, pp, mbs)
        price = gpu_types[gpu].price_per_hour / 3600.0
        for rate, tp, pp, mbs in best.values():
            for z in zones:
                kinds.append(ReplicaKind(gpu, z, tp, pp, mbs, rate, tp * pp * price))
    if not kinds:
        raise InfeasibleError(f"no feasible plan: {profile.name} fits no replica of the pool's GPUs")
    return kinds


def build_resource_model(
    kinds: list[ReplicaKind],
    pool: Mapping[tuple[str, str], int],
    gbs: int,
    objective: str = "throughput",
    budget: float | None = None,
    min_throughput: float | None = None,
    lam: float = 0.0,
) -> Model:
    """The MILP over ``x[k]`` (replicas of kind ``k``); ``lam`` is Dinkelbach's ratio (cost objective)."""
    if objective not in ("throughput", "cost"):
        raise InputError("objective", objective, "must be 'throughput' or 'cost'")
    pools = sorted(pool)
    index = {p: i for i, p in enumerate(pools)}
    K = len(kinds)
    g = np.array([k.gpus for k in kinds], dtype=float)
    r = np.array([k.samples_per_s for k in kinds]) / gbs  # iter/s per replica
    c = np.array([k.price_per_s for k in kinds])
    cap = np.array([pool[p] for p in pools], dtype=float)
    rows = np.array([index[(k.gpu_type, k.zone)] for k in kinds])
    A = np.zeros((len(pools), K))
    A[rows, np.arange(K)] = g
    m = Model("sailor-resources")
    x = m.add_variables("x", (K,), lb=0.0, ub=np.floor(cap[rows] / g), integer=True)
    m.add_constraints(A @ x <= cap, name="capacity")
    m.add_constraints(x.sum() >= 1, name="some_replica")
    if objective == "throughput":
        if budget is not None:
            m.add_constraints((x * (c - budget * r)).sum() <= 0, name="budget")
        m.maximize((x * r).sum())
    else:
        if min_throughput is not None:
            m.add_constraints((x * r).sum() >= min_throughput, name="throughput_floor")
        m.minimize((x * (c - lam * r)).sum())
    return m


def _choice(kinds: list[ReplicaKind], xs: np.ndarray, gbs: int, solve_time: float, iterations: int) -> ResourceChoice:
    xs = np.rint(xs).astype(int)
    replicas = {k: int(n) for k, n in zip(kinds, xs, strict=True) if n > 0}
    gpus: dict[tuple[str, str], int] = {}
    for k, n in replicas.items():
        gpus[(k.gpu_type, k.zone)] = gpus.get((k.gpu_type, k.zone), 0) + n * k.gpus
    thr = sum(k.samples_per_s * n for k, n in replicas.items()) / gbs
    cost = sum(k.price_per_s * n for k, n in replicas.items()) / thr
    return ResourceChoice(replicas, gpus, thr, cost, solve_time, iterations)


def choose_resources(
    kinds: list[ReplicaKind],
    pool: Mapping[tuple[str, str], int],
    gbs: int,
    objective: str = "throughput",
    budget: float | None = None,
    min_throughput: float | None = None,
    *,
    time_limit: float = 10.0,
    mip_gap: float = 1e-6,
    max_iterations: int = 20,
) -> ResourceChoice:
    """Solve the resource MILP (Dinkelbach loop for the cost objective)."""
    from heteroplan.solvers import solve

    total_time = 0.0
    if objective == "throughput":
        sol = solve(build_resource_model(kinds, pool, gbs, objective, budget), time_limit=time_limit, mip_gap=mip_gap)
        if not sol.has_solution:
            raise InfeasibleError(f"no feasible resource choice: {sol.status.name.lower()} (budget {budget})")
        return _choice(kinds, sol["x"], gbs, sol.solve_time, 1)
    # cost: Dinkelbach, starting from the cheapest-per-iteration single replica
    r = np.array([k.samples_per_s for k in kinds]) / gbs
    c = np.array([k.price_per_s for k in kinds])
    lam = float(np.min(c / r))
    xs = None
    for it in range(1, max_iterations + 1):
        sol = solve(
            build_resource_model(kinds, pool, gbs, "cost", None, min_throughput, lam), time_limit=time_limit, mip_gap=mip_gap
        )
        total_time += sol.solve_time
        if not sol.has_solution:
            raise InfeasibleError(
                f"no feasible resource choice: throughput floor {min_throughput} iter/s is out of reach of the pool"
            )
        xs = np.rint(sol["x"])
        ratio = float(c @ xs / (r @ xs))
        if sol.objective >= -1e-12 * max(1.0, abs(lam)) or math.isclose(ratio, lam, rel_tol=1e-9):
            return _choice(kinds, xs, gbs, total_time, it)
        lam = ratio
    assert xs is not None
    return _choice(kinds, xs, gbs, total_time, max_iterations)


def narrow_pool(choice: ResourceChoice, pool: Mapping[tuple[str, str], int], slack: float = 1.0) -> dict[tuple[str, str], int]:
    """The pool restricted to the (type, zone) pairs the MILP rents, each with ``slack`` extra
    (capped at availability): the DP search then runs on far fewer options."""
    return {p: min(pool[p], int(math.ceil(n * (1 + slack)))) for p, n in choice.gpus.items()}
