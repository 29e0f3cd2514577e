"""The solver-neutral MILP/LP intermediate representation.

:class:`Model` (variable blocks, constraint blocks, a linear objective, built with numpy
arrays) and :class:`Solution` (what a solve returns). Formulations build a ``Model`` here;
:mod:`heteroplan.solvers` turns it into a ``Solution``. Nothing in this package solves.
"""

from heteroplan.milp.model import (
    Constraint,
    ConstraintBlock,
    LinExpr,
    Model,
    StandardForm,
    VarBlock,
    as_model,
)
from heteroplan.milp.solution import Solution, SolveStatus, relative_gap

__all__ = [
    "Model",
    "LinExpr",
    "VarBlock",
    "Constraint",
    "ConstraintBlock",
    "StandardForm",
    "Solution",
    "SolveStatus",
    "relative_gap",
    "as_model",
]
