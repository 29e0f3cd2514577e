"""What a plan search wants: its objective, its constraint, and what that lets it prune.

Two goals (Sailor's): maximize throughput under an optional budget ($/iteration), or minimize
$/iteration under an optional throughput floor (iterations/s). A plan is ranked by its
:meth:`Goal.key` (smaller is better: seconds then $, or $ then seconds), admitted by
:meth:`Goal.meets`, and a layout whose lower bounds (seconds, $/iteration) already fail the
constraint or cannot beat the best plan is skipped (:meth:`Goal.bounds_fail`, :meth:`Goal.primary`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from heteroplan.errors import InputError
from heteroplan.formulations.sailor import Objective
from heteroplan.inputs import enum_choice, real_value

__all__ = ["Objective", "Goal", "Shortfall"]

Number = float | np.ndarray
TOLERANCE = 1e-12  # relative slack on the budget and the floor (a plan exactly at the limit meets it)


@dataclass
class Shortfall:
    """How close the plans that missed the constraint came: the cheapest $/iteration over the
    budget, the fastest iterations/s under the floor (of plans priced, and of lower bounds)."""

    cheapest: float = np.inf
    cheapest_bound: float = np.inf
    fastest: float = 0.0
    fastest_bound: float = 0.0

    @property
    def any(self) -> bool:
        return bool(np.isfinite(min(self.cheapest, self.cheapest_bound)) or max(self.fastest, self.fastest_bound) > 0)


@dataclass(frozen=True)
class Goal:
    """The objective and its constraint, checked when made.

    Attributes:
        objective: what to optimize (:class:`Objective`; its value, ``"throughput"`` or ``"cost"``,
            is accepted and turned into the member).
        budget: max $/iteration (throughput objective only), or None.
        min_throughput: min iterations/s (cost objective only), or None.

    Raises:
        InputError: an unknown objective, a bound that is not a finite number > 0, or a bound
            the objective would ignore (names the field).
    """

    objective: Objective = Objective.THROUGHPUT
    budget: float | None = None
    min_throughput: float | None = None

    def __post_init__(self) -> None:
        objective = enum_choice(Objective, "objective", self.objective)
        object.__setattr__(self, "objective", objective)
        for name in ("budget", "min_throughput"):
            value = getattr(self, name)
            if value is None:
                continue
            number = real_value(value)
            if not (math.isfinite(number) and number > 0):
                raise InputError(name, value, "must be a finite number > 0")
            if not isinstance(value, int | float):  # numpy's numbers, kept as a float
                object.__setattr__(self, name, number)
        if self.budget is not None and objective is not Objective.THROUGHPUT:  # it would be ignored
            raise InputError("budget", self.budget, f"applies to objective='throughput', not '{objective}'")
        if self.min_throughput is not None and objective is not Objective.COST:
            raise InputError("min_throughput", self.min_throughput, f"applies to objective='cost', not '{objective}'")

    @property
    def wants_throughput(self) -> bool:
        """Whether the objective is throughput (else $/iteration)."""
        return self.objective is Objective.THROUGHPUT

    def key(self, seconds: float, usd: float) -> tuple[float, float]:
        """Sort key of a plan of ``seconds`` per iteration and ``usd`` per iteration (smaller is better)."""
        return (seconds, usd) if self.wants_throughput else (usd, seconds)

    def primary(self, seconds: Number, usd: Number) -> Number:
        """The key's first entry: what a lower bound must beat (``key[0]`` of the best plan)."""
        return seconds if self.wants_throughput else usd

    def order(self, seconds: np.ndarray, usd: np.ndarray, admitted: np.ndarray) -> np.ndarray:
        """Indices of plans by key, the plans not ``admitted`` last."""
        if self.wants_throughput:
            return np.lexsort((usd, np.where(admitted, seconds, np.inf)))
        return np.lexsort((seconds, np.where(admitted, usd, np.inf)))

    def meets(self, seconds: Number, usd: Number, tolerance: float = TOLERANCE) -> bool | np.ndarray:
        """Whether plans of ``seconds`` and ``usd`` per iteration meet the constraint (elementwise)."""
        if self.wants_throughput:
            return True if self.budget is None else usd <= self.budget * (1 + tolerance)
        return True if self.min_throughput is None else 1.0 / seconds >= self.min_throughput * (1 - tolerance)

    def bounds_fail(self, seconds_lb: float, usd_lb: float) -> bool:
        """Whether every plan whose time and cost are at least these bounds misses the constraint."""
        if self.wants_throughput:
            return self.budget is not None and usd_lb > self.budget
        return self.min_throughput is not None and seconds_lb * self.min_throughput > 1

    def note_miss(self, shortfall: Shortfall, seconds: float, usd: float, bound: bool = False) -> None:
        """Record in ``shortfall`` how close a plan (or a layout's bounds) that missed came."""
        if self.wants_throughput:
            if bound:
                shortfall.cheapest_bound = min(shortfall.cheapest_bound, usd)
            else:
                shortfall.cheapest = min(shortfall.cheapest, usd)
        elif bound:
            shortfall.fastest_bound = max(shortfall.fastest_bound, 1.0 / seconds)
        else:
            shortfall.fastest = max(shortfall.fastest, 1.0 / seconds)

    def split_cutoff(self, best_primary: float, usd_per_s: float, fixed_usd: float, crosses_zones: bool) -> float:
        """Seconds of a layer split's objective (time + pipeline egress $ / ``usd_per_s``) that a
        split must beat to beat a plan whose key starts with ``best_primary``; ``fixed_usd``: the
        layout's split-independent egress $; inf when the goal gives no bound."""
        if self.wants_throughput:
            # the split objective adds egress / rate to the time: a bound only without egress
            return best_primary if not crosses_zones else np.inf
        return (best_primary - fixed_usd) / usd_per_s if usd_per_s > 0 else np.inf

    def relaxed(self) -> Objective | None:
        """The objective whose unconstrained optimum tells how far out of reach the constraint
        is (the cheapest plan for a budget, the fastest for a floor); None without a constraint."""
        if self.wants_throughput:
            return Objective.COST if self.budget is not None else None
        return Objective.THROUGHPUT if self.min_throughput is not None else None

    def out_of_reach(self, seconds: float, usd: float) -> str:
        """Why no plan meets the constraint, given the :meth:`relaxed` optimum's time and cost."""
        if self.wants_throughput:
            return f"no feasible plan: budget too small — the cheapest plan costs ${usd:.4g}/iteration > budget ${self.budget:.4g}"
        return (f"no feasible plan: throughput floor too high — the fastest plan reaches "
                f"{1 / seconds:.4g} iter/s < {self.min_throughput:.4g}")

    def why_infeasible(self, shortfall: Shortfall) -> str | None:
        """The constraint's share of a failed search, or None when it was not the reason."""
        if self.wants_throughput and self.budget is not None and np.isfinite(min(shortfall.cheapest, shortfall.cheapest_bound)):
            cheapest = min(shortfall.cheapest, shortfall.cheapest_bound)
            return (f"no feasible plan: budget too small — every plan that fits costs at least "
                    f"${cheapest:.4g}/iteration > budget ${self.budget:.4g}")
        if not self.wants_throughput and self.min_throughput is not None and max(shortfall.fastest, shortfall.fastest_bound) > 0:
            fastest = max(shortfall.fastest, shortfall.fastest_bound)
            return (f"no feasible plan: throughput floor too high — no plan reaches more than "
                    f"{fastest:.4g} iter/s < {self.min_throughput:.4g}")
        return None
