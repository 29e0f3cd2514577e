"""Sailor's resource choice as a MILP: how many GPUs of each type in each zone to rent.

A *replica kind* ``k`` is one homogeneous pipeline replica — GPU type and zone, TP, PP,
microbatch size — using ``g_k = tp * pp`` GPUs, whose steady-state rate ``r_k`` (samples/s)
comes from the planner's simulator (:func:`heteroplan.planner.search.resources.replica_kinds`). Renting ``x_k`` replicas of each kind and
training them data-parallel with load-balanced microbatches gives

    throughput (iter/s)   = sum_k r_k x_k / gbs
    rental      ($/s)     = sum_k c_k x_k,           c_k = g_k * price_k / 3600
    GPUs of pool p        = sum_k A_pk g_k x_k <= capacity_p

- max throughput under a budget ``B`` ($/iteration): ``max r.x`` s.t. capacity and
  ``c.x - B r.x / gbs <= 0`` (the ratio constraint made linear);
- min $/iteration (``c.x / (r.x / gbs)``) under a floor ``F`` (iter/s): a linear-fractional
  integer program solved by Dinkelbach's method — a short sequence of MILPs
  ``min c.x - lam r.x / gbs`` with ``lam`` updated to the ratio of the last solution.

The estimate ignores all-reduce time and pipeline bubbles. This module builds the model and
decodes its solution; :mod:`heteroplan.planner.search.resources` simulates the kinds, solves (the
Dinkelbach loop) and turns a choice into a smaller pool for the DP search, which then prices
those exactly.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum

import numpy as np

from heteroplan.errors import InputError
from heteroplan.inputs import enum_choice, is_count, real_value, strict_int
from heteroplan.milp import Model

__all__ = ["Objective", "ReplicaKind", "ResourceChoice", "build_resource_model", "decode_resource_choice"]


class Objective(StrEnum):
    """``throughput``: max iterations/s; ``cost``: min $/iteration (also the planner's,
    :class:`heteroplan.planner.goal.Objective`)."""

    THROUGHPUT = "throughput"
    COST = "cost"


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

    def __post_init__(self) -> None:
        for name in ("gpu_type", "zone"):
            if not isinstance(getattr(self, name), str):
                raise InputError(f"kind.{name}", getattr(self, name), "must be a name (a string)")
        for name in ("tp", "pp", "mbs"):  # tp=0 divided by zero; 1.5 GPUs were taken
            object.__setattr__(self, name, strict_int(f"kind.{name}", getattr(self, name), 1))
        for name, low_ok in (("samples_per_s", False), ("price_per_s", True)):  # -1 samples/s was a negative rate
            value = real_value(getattr(self, name))
            if not (math.isfinite(value) and (value >= 0 if low_ok else value > 0)):
                raise InputError(f"kind.{name}", getattr(self, name), f"must be a finite number {'>=' if low_ok else '>'} 0")

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


def build_resource_model(
    kinds: list[ReplicaKind],
    pool: Mapping[tuple[str, str], int],
    gbs: int,
    objective: Objective | str = Objective.THROUGHPUT,
    budget: float | None = None,
    min_throughput: float | None = None,
    lam: float = 0.0,
) -> Model:
    """The MILP over ``x[k]`` (replicas of kind ``k``); ``lam`` is Dinkelbach's ratio (cost objective)."""
    objective = enum_choice(Objective, "objective", objective)
    if not isinstance(kinds, list | tuple) or not all(isinstance(k, ReplicaKind) for k in kinds):
        raise InputError("kinds", kinds, "must be a list of ReplicaKind")
    if not isinstance(pool, Mapping) or not all(is_count(n) and n >= 0 for n in pool.values()):
        raise InputError("pool", pool, "must map (GPU type, zone) to a whole number of GPUs >= 0")
    missing = next(((k.gpu_type, k.zone) for k in kinds if (k.gpu_type, k.zone) not in pool), None)
    if missing is not None:  # was a KeyError
        raise InputError("pool", missing, "a replica kind's (GPU type, zone) is not in the pool")
    gbs = strict_int("gbs", gbs, 1)  # "64" was a TypeError from numpy, 0 an infinite rate
    for name, value in (("budget", budget), ("min_throughput", min_throughput), ("lam", lam)):
        if value is not None and not math.isfinite(real_value(value)):  # NaN was named 'constant' by the model
            raise InputError(name, value, "must be a finite number")
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
    if objective is Objective.THROUGHPUT:
        if budget is not None:
            m.add_constraints((x * (c - budget * r)).sum() <= 0, name="budget")
        m.maximize((x * r).sum())
    else:
        if min_throughput is not None:
            m.add_constraints((x * r).sum() >= min_throughput, name="throughput_floor")
        m.minimize((x * (c - lam * r)).sum())
    return m


def decode_resource_choice(kinds: list[ReplicaKind], xs: np.ndarray, gbs: int, solve_time: float, iterations: int) -> ResourceChoice:
    """The choice behind replica counts ``xs`` (a solution's ``x`` block, one entry per kind)."""
    xs = np.rint(xs).astype(int)
    replicas = {k: int(n) for k, n in zip(kinds, xs, strict=True) if n > 0}
    gpus: dict[tuple[str, str], int] = {}
    for k, n in replicas.items():
        gpus[(k.gpu_type, k.zone)] = gpus.get((k.gpu_type, k.zone), 0) + n * k.gpus
    thr = sum(k.samples_per_s * n for k, n in replicas.items()) / gbs
    cost = sum(k.price_per_s * n for k, n in replicas.items()) / thr
    return ResourceChoice(replicas, gpus, thr, cost, solve_time, iterations)
