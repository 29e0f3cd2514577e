"""The result of a solve: status, objective, bound, gap, values per block, timings."""

from __future__ import annotations

import enum
import html
from dataclasses import dataclass, field

import numpy as np

from heteroplan.errors import ModelError

__all__ = ["SolveStatus", "Solution"]


class SolveStatus(enum.Enum):
    """How a solve ended."""

    OPTIMAL = "optimal"
    TIME_LIMIT = "time_limit"  # stopped at the time limit; ``has_solution`` says if an incumbent exists
    INFEASIBLE = "infeasible"
    UNBOUNDED = "unbounded"
    INFEASIBLE_OR_UNBOUNDED = "infeasible_or_unbounded"
    ERROR = "error"


@dataclass(repr=False)
class Solution:
    """Outcome of solving a :class:`~heteroplan.milp.model.Model`.

    Attributes:
        status: how the solve ended.
        objective: objective value of the returned point (``nan`` without one).
        bound: best proven bound on the optimum (the objective itself for a solved LP).
        gap: relative gap ``|objective - bound| / max(|objective|, 1e-9)`` (0 when optimal).
        values: variable values per block name, shaped like the blocks (empty without a point).
        build_time: seconds spent handing the model to the backend.
        solve_time: seconds spent in the backend's solve.
        backend: which backend solved it.
        message: the backend's own status text.
        duals: row duals per constraint block of a solved LP (or LP relaxation), shaped like
            the blocks: the objective's change per unit increase of the row's bound (HiGHS's
            convention; so <= 0 on a binding ``<=`` row when minimizing, >= 0 when maximizing);
            empty for a MILP and for backends that do not report them.
    """

    status: SolveStatus
    objective: float = float("nan")
    bound: float = float("nan")
    gap: float = float("nan")
    values: dict[str, np.ndarray] = field(default_factory=dict)
    build_time: float = 0.0
    solve_time: float = 0.0
    backend: str = "highs"
    message: str = ""
    duals: dict[str, np.ndarray] = field(default_factory=dict)

    @property
    def has_solution(self) -> bool:
        """True when a feasible point is available (optimal, or an incumbent at the time limit)."""
        return bool(self.values)

    @property
    def optimal(self) -> bool:
        return self.status is SolveStatus.OPTIMAL

    def __getitem__(self, name: str) -> np.ndarray:
        if not self.values:
            raise ModelError("solution", self.status.value, f"no solution values ({self.message or self.status.value})")
        try:
            return self.values[name]
        except (KeyError, TypeError):  # a list of names was a TypeError (unhashable)
            raise ModelError("block", name, f"unknown variable block; known: {list(self.values)}") from None

    def summary(self) -> str:
        text = (
            f"{self.backend}: {self.status.value}, objective {self.objective:.6g}, bound {self.bound:.6g}, "
            f"gap {self.gap:.2%}, build {self.build_time * 1e3:.1f} ms, solve {self.solve_time * 1e3:.1f} ms"
        )
        if self.status is SolveStatus.TIME_LIMIT:
            text += " (time limit hit: " + ("best incumbent returned)" if self.has_solution else "no incumbent)")
        return text

    def __repr__(self) -> str:
        """The summary and each block's shape and type, not its values (a few lines)."""
        blocks = ", ".join(f"{name} {v.shape} {v.dtype}" for name, v in list(self.values.items())[:8])
        more = f", ... ({len(self.values)} blocks)" if len(self.values) > 8 else ""
        return f"Solution({self.summary()})" + (f"\n  values: {blocks}{more}" if self.values else "")

    def _repr_html_(self) -> str:
        return f"<code>{html.escape(self.summary())}</code>"


def relative_gap(objective: float, bound: float) -> float:
    """``|objective - bound| / max(|objective|, 1e-9)``; nan when either is missing."""
    if not (np.isfinite(objective) and np.isfinite(bound)):
        return float("nan")
    return abs(objective - bound) / max(abs(objective), 1e-9)
