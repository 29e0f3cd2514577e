"""Cost/throughput Pareto front of a job: sweep budgets (or throughput floors) through the planner.

Each sweep point is one :func:`~heteroplan.planner.api.plan_job` call: ``objective="throughput"``
under a budget ($/iteration), or ``objective="cost"`` under a throughput floor (iter/s). The
two ends come from the unconstrained searches (fastest plan, cheapest plan); the budgets or
floors in between are spaced geometrically. Every plan found is kept in ``evaluated``; the front
is its non-dominated subset (no other plan is at least as cheap and at least as fast, and
strictly better in one), deduplicated and sorted by cost, so throughput rises along it.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from enum import StrEnum
from typing import Any, NamedTuple

import numpy as np

from heteroplan._html import table, title
from heteroplan.cluster import Cluster
from heteroplan.errors import InfeasibleError, InputError
from heteroplan.inputs import enum_choice, is_count, real_value
from heteroplan.planner.api import PlanResult, plan
from heteroplan.planner.goal import Goal, Objective
from heteroplan.planner.request import PlanRequest

__all__ = ["ParetoPoint", "ParetoFront", "pareto_front", "non_dominated", "Sweep", "MAX_POINTS"]

MAX_POINTS = 1000
"""Most sweep points :func:`pareto_front` plans (``n``, or the length of ``budgets`` or
``min_throughputs``): each is a plan search, and ``n=10**6`` ran for hours."""


class Sweep(StrEnum):
    """Which default sweep :func:`pareto_front` runs: budgets ($/iteration caps under the
    throughput objective), throughput floors (iter/s under the cost objective), or both."""

    BUDGET = "budget"
    THROUGHPUT = "throughput"
    BOTH = "both"


class ParetoPoint(NamedTuple):
    """One plan on the front: $/iteration, iterations/s, and the planner's result."""

    cost: float
    throughput: float
    result: PlanResult


@dataclass(frozen=True, repr=False)
class ParetoFront:
    """Non-dominated plans sorted by cost (cheapest first), and every plan the sweep found.

    Iterating yields the :class:`ParetoPoint` s of the front.
    """

    points: tuple[ParetoPoint, ...]
    evaluated: tuple[ParetoPoint, ...]
    model: str
    gbs: int

    def __iter__(self) -> Iterator[ParetoPoint]:
        return iter(self.points)

    def __len__(self) -> int:
        return len(self.points)

    def __getitem__(self, i: int) -> ParetoPoint:
        return self.points[i]

    @property
    def cheapest(self) -> ParetoPoint:
        return self.points[0]

    @property
    def fastest(self) -> ParetoPoint:
        return self.points[-1]

    def _rows(self) -> list[tuple[Any, ...]]:
        return [
            (
                p.cost, p.throughput, p.result.plan.num_gpus, p.result.plan.pp, p.result.plan.dp,
                ", ".join(f"{n} {t}@{z}" for (t, z), n in p.result.plan.gpus_by_type_zone().items()),
            )
            for p in self.points
        ]

    def __repr__(self) -> str:
        return self.describe()  # a line per plan of the front, not every plan found with its records

    def describe(self) -> str:
        """Text table of the front, one plan per line."""
        lines = [f"Pareto front of {self.model}, GBS {self.gbs}: {len(self)} plans ({len(self.evaluated)} found)",
                 f"  {'$/iter':>9} {'iter/s':>8} {'GPUs':>5} {'PP':>3} {'DP':>4}  GPUs by type@zone"]
        for cost, thr, gpus, pp, dp, where in self._rows():
            lines.append(f"  {cost:9.4g} {thr:8.4g} {gpus:5d} {pp:3d} {dp:4d}  {where}")
        return "\n".join(lines)

    def _repr_html_(self) -> str:
        head = title(f"Pareto front of {self.model}", f"GBS {self.gbs}, {len(self)} plans of {len(self.evaluated)}")
        return head + table(("$/iteration", "iter/s", "GPUs", "PP", "DP", "GPUs by type@zone"), self._rows())


def non_dominated(points: Sequence[ParetoPoint], rel_tol: float = 1e-9) -> list[ParetoPoint]:
    """The points no other point dominates (cheaper-or-equal and faster-or-equal, one strictly).

    Points equal in both numbers (within ``rel_tol``) are kept once (the first). Sorted by cost.
    """
    order = sorted(points, key=lambda p: (p.cost, -p.throughput))
    front: list[ParetoPoint] = []
    for p in order:  # cost ascending: p is dominated iff an earlier point is at least as fast
        if front and p.throughput <= front[-1].throughput * (1 + rel_tol):
            continue
        if front and p.cost <= front[-1].cost * (1 + rel_tol):  # same cost, faster: replaces it
            front.pop()
        front.append(p)
    return front


def _levels(name: str, values: Sequence[float] | None) -> list[float] | None:
    if values is None:
        return None
    if isinstance(values, str | bytes) or not isinstance(values, Sequence | np.ndarray) or len(values) == 0:
        raise InputError(name, values, "give a non-empty sequence of numbers > 0")
    if len(values) > MAX_POINTS:  # each is a plan search: a million would not answer for hours
        raise InputError(name, f"{len(values)} values", f"give at most {MAX_POINTS} values (each is a plan search)")
    out = []
    for v in values:
        number = real_value(v)  # NaN for a bool, a string or an int beyond a float (10**400)
        if not (math.isfinite(number) and number > 0):
            raise InputError(name, values, f"every entry must be a finite number > 0 (got {v!r})")
        out.append(number)
    return out


def pareto_front(
    model: str,
    gbs: int,
    pool: Cluster | Mapping[tuple[str, str], int],
    budgets: Sequence[float] | None = None,
    n: int = 8,
    *,
    min_throughputs: Sequence[float] | None = None,
    sweep: Sweep | str = Sweep.BUDGET,
    **plan_kwargs: Any,
) -> ParetoFront:
    """Sweep the planner between the cheapest and the fastest plan; return the Pareto front.

    Args:
        model: a profiled model, as for :func:`~heteroplan.planner.api.plan_job`.
        gbs: global batch size (samples per iteration).
        pool: GPUs that can be rented, a Cluster or ``{(gpu_type, zone): count}``.
        budgets: $/iteration caps to plan under (``objective="throughput"``); default ``n``
            values spaced geometrically between the cheapest and the fastest plan's cost.
        n: sweep points per default sweep (>= 2, ends included).
        min_throughputs: iter/s floors to plan under (``objective="cost"``); default, when
            ``sweep`` asks for them, ``n`` values between the two ends' throughputs.
        sweep: which default sweep to run when neither list is given (:class:`Sweep` or its
            value: ``"budget"``, ``"throughput"`` or ``"both"``).
        plan_kwargs: passed to :meth:`~heteroplan.planner.request.PlanRequest.build` (``gpu_types``,
            ``options``, ``network``, ``data_dir``), as for ``plan_job``.

    Raises:
        InputError: bad ``n``, ``sweep``, ``budgets`` or ``min_throughputs`` (and whatever
            ``plan_job`` rejects).
        InfeasibleError: no plan at all (e.g. the model fits on no GPU of the pool).
    """
    if not is_count(n) or not 2 <= n <= MAX_POINTS:
        raise InputError("n", n, f"must be an integer in [2, {MAX_POINTS}] (the two ends are included)")
    n = int(n)
    sweep = enum_choice(Sweep, "sweep", sweep)
    caps = _levels("budgets", budgets)
    floors = _levels("min_throughputs", min_throughputs)
    for key in ("goal", "objective", "budget", "min_throughput"):
        if key in plan_kwargs:
            raise InputError(key, plan_kwargs[key], "set by the sweep; use budgets/min_throughputs")

    base = PlanRequest.build(model, gbs, pool, **plan_kwargs)  # validated and loaded once

    def run(goal: Goal) -> PlanResult | None:
        try:
            return plan(replace(base, goal=goal))
        except InfeasibleError:
            return None

    fastest = plan(base.unconstrained(Objective.THROUGHPUT))
    cheapest = plan(base.unconstrained(Objective.COST))
    found: list[PlanResult] = [cheapest, fastest]
    if caps is None and floors is None:
        if sweep in (Sweep.BUDGET, Sweep.BOTH):
            caps = _inner(cheapest.cost_per_iteration_usd, fastest.cost_per_iteration_usd, n)
        if sweep in (Sweep.THROUGHPUT, Sweep.BOTH):
            floors = _inner(cheapest.throughput_iter_s, fastest.throughput_iter_s, n)
    for cap in caps or ():
        found.append(run(Goal(Objective.THROUGHPUT, budget=cap)))
    for floor in floors or ():
        found.append(run(Goal(Objective.COST, min_throughput=floor)))
    evaluated = tuple(ParetoPoint(r.cost_per_iteration_usd, r.throughput_iter_s, r) for r in found if r is not None)
    return ParetoFront(tuple(non_dominated(evaluated)), evaluated, model, gbs)


def _inner(lo: float, hi: float, n: int) -> list[float]:
    """``n - 2`` values strictly between ``lo`` and ``hi``, spaced geometrically (the ends are planned anyway)."""
    if not hi > lo * (1 + 1e-9):
        return []
    return [float(v) for v in np.geomspace(lo, hi, n)[1:-1]]
